package main

import (
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Transaction verbs, as in Consul's /v1/txn.
const (
	verbGet            = "get"
	verbSet            = "set"
	verbDelete         = "delete"
	verbCheckNotExists = "check-not-exists"
	// A key of a group read in one request (MGET, a listing): the value seen, or
	// nil when the key was absent. It never fails; what it saw must be the state.
	verbRead = "read"
)

// The multi-key model: a transaction works on the keys of one group, all or
// nothing. Its state is the group's keys and values, kept as a canonical
// string (sorted "key\x00value\x00" pairs, absent keys left out) so that
// porcupine can compare and hash it as it is.

type groupState string

func decodeGroup(s groupState) map[string]string {
	out := map[string]string{}
	parts := strings.Split(string(s), "\x00")
	for i := 0; i+1 < len(parts); i += 2 {
		out[parts[i]] = parts[i+1]
	}
	return out
}

func encodeGroup(values map[string]string) groupState {
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(k)
		b.WriteByte(0)
		b.WriteString(values[k])
		b.WriteByte(0)
	}
	return groupState(b.String())
}

// txnInput is one transaction: its steps, and whether its outcome is unknown.
// A completed transaction's output is whether it applied.
type txnInput struct {
	Group   string
	Steps   []TxnStep
	Unknown bool
}

// applyTxn runs the steps on a copy of the state. It returns the new state and
// whether every condition held (a get needs the key to exist; the values a
// completed get saw are checked by the caller); when one fails, the
// transaction changes nothing.
func applyTxn(state groupState, steps []TxnStep) (map[string]string, bool) {
	values := decodeGroup(state)
	for _, s := range steps {
		_, present := values[s.Key]
		switch s.Verb {
		case verbGet:
			if !present {
				return nil, false
			}
		case verbCheckNotExists:
			if present {
				return nil, false
			}
		case verbSet:
			values[s.Key] = *s.Value
		case verbDelete:
			delete(values, s.Key)
		}
	}
	return values, true
}

func txnStep(state, input, output any) (bool, any) {
	st := state.(groupState)
	in := input.(txnInput)
	after, holds := applyTxn(st, in.Steps)
	if in.Unknown {
		// It applied iff its conditions held where it is placed.
		if holds {
			return true, encodeGroup(after)
		}
		return true, st
	}
	applied := output.(bool)
	if applied != holds {
		return false, st
	}
	if !applied {
		return true, st
	}
	// The gets saw the state the steps before them left.
	values := decodeGroup(st)
	for _, s := range in.Steps {
		switch s.Verb {
		case verbGet:
			if s.Value == nil || values[s.Key] != *s.Value {
				return false, st
			}
		case verbRead:
			v, present := values[s.Key]
			if (s.Value == nil) == present || (present && v != *s.Value) {
				return false, st
			}
		case verbSet:
			values[s.Key] = *s.Value
		case verbDelete:
			delete(values, s.Key)
		}
	}
	return true, encodeGroup(after)
}

func describeTxn(input, output any) string {
	in := input.(txnInput)
	parts := make([]string, 0, len(in.Steps))
	for _, s := range in.Steps {
		switch {
		case s.Value != nil:
			parts = append(parts, fmt.Sprintf("%s(%s, %q)", s.Verb, s.Key, *s.Value))
		default:
			parts = append(parts, fmt.Sprintf("%s(%s)", s.Verb, s.Key))
		}
	}
	text := "txn[" + strings.Join(parts, " ") + "]"
	if in.Unknown {
		return text + " → ?"
	}
	return fmt.Sprintf("%s → %v", text, output.(bool))
}

func describeGroup(state any) string {
	values := decodeGroup(state.(groupState))
	keys := make([]string, 0, len(values))
	for k := range values {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, 0, len(keys))
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s=%q", k, values[k]))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

func partitionByGroup(history []porcupine.Operation) [][]porcupine.Operation {
	byGroup := map[string][]porcupine.Operation{}
	for _, op := range history {
		g := op.Input.(txnInput).Group
		byGroup[g] = append(byGroup[g], op)
	}
	out := make([][]porcupine.Operation, 0, len(byGroup))
	for _, g := range sortedGroups(history) {
		out = append(out, byGroup[g])
	}
	return out
}

func sortedGroups(history []porcupine.Operation) []string {
	seen := map[string]bool{}
	var groups []string
	for _, op := range history {
		g := op.Input.(txnInput).Group
		if !seen[g] {
			seen[g] = true
			groups = append(groups, g)
		}
	}
	sort.Strings(groups)
	return groups
}

// txnModel is a group of keys changed only by transactions, partitioned by
// group, starting with every key absent.
var txnModel = porcupine.Model{
	Partition: partitionByGroup,
	Init:      func() any { return groupState("") },
	Step:      txnStep,
	Hash: func(state any) uint64 {
		h := fnv.New64a()
		h.Write([]byte(state.(groupState)))
		return h.Sum64()
	},
	DescribeOperation:         describeTxn,
	DescribeState:             describeGroup,
	DescribeOperationMetadata: describeMeta,
}

// TxnResult is the outcome of the transactions' check.
type TxnResult struct {
	Verdict       string   // ok, illegal or unknown
	Ops           int      // transactions checked
	Groups        int      // groups (partitions) checked
	IllegalGroups []string // groups with no complete linearization (when illegal)
	Info          porcupine.LinearizationInfo
}

// CheckTransactions checks the transactions for linearizability against the
// multi-key model: failed ones are left out, unknown ones kept with an
// infinite return time (they applied iff their conditions held, or never).
func CheckTransactions(recs []Record, timeout time.Duration) TxnResult {
	var ops []porcupine.Operation
	for _, r := range recs {
		if r.Op != opTxn || r.Status == statusFail {
			continue
		}
		op := porcupine.Operation{
			Input:  txnInput{Group: r.Key, Steps: r.Txn, Unknown: r.Status == statusUnknown},
			Call:   r.Call,
			Output: r.Result,
			Return: r.Return,
			Metadata: opMeta{
				Line: r.Line, Client: r.Client, Node: r.Node, Proto: r.Proto, Status: r.Status,
			},
		}
		if r.Status == statusUnknown {
			op.Output = nil
			op.Return = infinity
		}
		ops = append(ops, op)
	}
	assignLanes(ops)
	groups := sortedGroups(ops)
	out := TxnResult{Ops: len(ops), Groups: len(groups), IllegalGroups: []string{}}
	if len(ops) == 0 {
		out.Verdict = verdictOk
		return out
	}
	res, info := porcupine.CheckOperationsVerbose(txnModel, ops, timeout)
	out.Info = info
	out.Verdict, out.IllegalGroups = judge(res, info, ops, groups, func(op porcupine.Operation) string {
		return op.Input.(txnInput).Group
	})
	return out
}
