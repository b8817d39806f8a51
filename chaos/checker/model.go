package main

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"

	"github.com/anishathalye/porcupine"
)

// regValue is the state of one key's register, and the output of a read:
// either absent, or present with a value. It is comparable, so porcupine's
// default equality works on it.
type regValue struct {
	Present bool
	S       string
}

func valueOf(p *string) regValue {
	if p == nil {
		return regValue{}
	}
	return regValue{Present: true, S: *p}
}

func (v regValue) String() string {
	if !v.Present {
		return "∅"
	}
	return fmt.Sprintf("%q", v.S)
}

// regInput is the input of one operation on the register model.
type regInput struct {
	Op      string // read, write, cas, delete
	Key     string
	Value   regValue // write/cas: the new value
	Expect  regValue // cas: the value the key must hold (absent = create-only)
	Unknown bool     // write/cas/delete whose outcome is unknown
}

// Output types: a read outputs a regValue, a completed cas a bool, anything
// else nil.

// opMeta is shown in the visualization's tooltips.
type opMeta struct {
	Line   int
	Client int64
	Node   string
	Proto  string
	Mode   string
	Index  *int64
	Status string
}

func registerStep(state, input, output any) (bool, any) {
	st := state.(regValue)
	in := input.(regInput)
	switch in.Op {
	case opRead:
		return output.(regValue) == st, st
	case opWrite:
		return true, in.Value
	case opDelete:
		return true, regValue{}
	case opCas:
		matches := st == in.Expect
		if in.Unknown {
			// Either outcome is possible; which one is fixed by the state.
			if matches {
				return true, in.Value
			}
			return true, st
		}
		applied := output.(bool)
		if matches != applied {
			return false, st
		}
		if applied {
			return true, in.Value
		}
		return true, st
	}
	panic("unknown op " + in.Op)
}

// partitionByKey splits a history into one sub-history per key, in sorted
// key order (the order sortedKeys returns).
func partitionByKey(history []porcupine.Operation) [][]porcupine.Operation {
	byKey := map[string][]porcupine.Operation{}
	for _, op := range history {
		k := op.Input.(regInput).Key
		byKey[k] = append(byKey[k], op)
	}
	out := make([][]porcupine.Operation, 0, len(byKey))
	for _, k := range sortedKeys(history) {
		out = append(out, byKey[k])
	}
	return out
}

func sortedKeys(history []porcupine.Operation) []string {
	seen := map[string]bool{}
	var keys []string
	for _, op := range history {
		k := op.Input.(regInput).Key
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	return keys
}

func describeOperation(input, output any) string {
	in := input.(regInput)
	switch in.Op {
	case opRead:
		return fmt.Sprintf("read(%s) → %s", in.Key, output.(regValue))
	case opWrite:
		s := fmt.Sprintf("write(%s, %s)", in.Key, in.Value)
		if in.Unknown {
			s += " ?"
		}
		return s
	case opDelete:
		s := fmt.Sprintf("delete(%s)", in.Key)
		if in.Unknown {
			s += " ?"
		}
		return s
	case opCas:
		s := fmt.Sprintf("cas(%s, %s → %s)", in.Key, in.Expect, in.Value)
		if in.Unknown {
			return s + " → ?"
		}
		return fmt.Sprintf("%s → %v", s, output.(bool))
	}
	return in.Op
}

func describeState(state any) string {
	return state.(regValue).String()
}

func describeMeta(m any) string {
	meta, ok := m.(opMeta)
	if !ok {
		return ""
	}
	parts := []string{fmt.Sprintf("line %d", meta.Line), fmt.Sprintf("client %d", meta.Client)}
	if meta.Node != "" {
		parts = append(parts, "node "+meta.Node)
	}
	if meta.Proto != "" {
		parts = append(parts, meta.Proto)
	}
	if meta.Mode != "" {
		parts = append(parts, "mode "+meta.Mode)
	}
	if meta.Index != nil {
		parts = append(parts, fmt.Sprintf("index %d", *meta.Index))
	}
	parts = append(parts, "status "+meta.Status)
	return strings.Join(parts, ", ")
}

func hashState(state any) uint64 {
	v := state.(regValue)
	h := fnv.New64a()
	if v.Present {
		h.Write([]byte{1})
		h.Write([]byte(v.S))
	}
	return h.Sum64()
}

// registerModel is a per-key register, partitioned by key, starting absent.
var registerModel = porcupine.Model{
	Partition:                 partitionByKey,
	Init:                      func() any { return regValue{} },
	Step:                      registerStep,
	Hash:                      hashState,
	DescribeOperation:         describeOperation,
	DescribeState:             describeState,
	DescribeOperationMetadata: describeMeta,
}
