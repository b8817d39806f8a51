package main

import (
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability verdicts, as printed in the summary.
const (
	verdictOk      = "ok"
	verdictIllegal = "illegal"
	verdictUnknown = "unknown"
)

// infinity is the return time of a write/cas/delete whose outcome is unknown:
// later than every other event, so porcupine may linearize it anywhere after
// its call, including after everything else ("it never happened").
const infinity = math.MaxInt64

// Built is the porcupine history derived from the records, plus counts.
type Built struct {
	Ops           []porcupine.Operation
	StaleReads    int // completed reads with mode stale (left out of the check)
	UnknownWrites int // write/cas/delete with status unknown (kept, never returning)
}

// BuildOperations turns records into porcupine operations: failed operations,
// unknown reads and stale reads are dropped; unknown writes, cas and deletes
// are kept with an infinite return time.
func BuildOperations(recs []Record) Built {
	var b Built
	for _, r := range recs {
		if r.Status == statusFail || !registerOp(r.Op) {
			continue
		}
		if r.Op == opRead && r.Mode == modeStale {
			if r.Status == statusOk {
				b.StaleReads++
			}
			continue
		}
		if r.Op == opRead && r.Status == statusUnknown {
			continue
		}
		in := regInput{Op: r.Op, Key: r.Key, Unknown: r.Status == statusUnknown}
		var out any
		switch r.Op {
		case opRead:
			out = valueOf(r.Value)
		case opWrite:
			in.Value = valueOf(r.Value)
		case opCas:
			in.Value = valueOf(r.Value)
			in.Expect = valueOf(r.Expect)
			if !in.Unknown {
				out = r.Result
			}
		}
		op := porcupine.Operation{
			Input:  in,
			Call:   r.Call,
			Output: out,
			Return: r.Return,
			Metadata: opMeta{
				Line: r.Line, Client: r.Client, Node: r.Node, Proto: r.Proto,
				Mode: r.Mode, Index: r.Index, Status: r.Status,
			},
		}
		if in.Unknown {
			b.UnknownWrites++
			op.Return = infinity
		}
		b.Ops = append(b.Ops, op)
	}
	assignLanes(b.Ops)
	return b
}

// assignLanes sets each operation's ClientId, the row it is drawn on in the
// visualization (porcupine wants them dense from 0): one row per client, in
// client id order, and one more row for each unknown operation that is not
// its client's last (it never returns, so it would overlap the later ones).
func assignLanes(ops []porcupine.Operation) {
	lastCall := map[int64]int64{}
	for _, op := range ops {
		c := op.Metadata.(opMeta).Client
		if last, ok := lastCall[c]; !ok || op.Call > last {
			lastCall[c] = op.Call
		}
	}
	ids := make([]int64, 0, len(lastCall))
	for c := range lastCall {
		ids = append(ids, c)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	lane := map[int64]int{}
	for i, c := range ids {
		lane[c] = i
	}
	next := len(ids)
	for i := range ops {
		c := ops[i].Metadata.(opMeta).Client
		ops[i].ClientId = lane[c]
		if ops[i].Return == infinity && ops[i].Call < lastCall[c] {
			ops[i].ClientId = next
			next++
		}
	}
}

// opsOfKeys returns copies of the operations on the given keys, with lanes
// assigned afresh.
func opsOfKeys(ops []porcupine.Operation, keys []string) []porcupine.Operation {
	want := map[string]bool{}
	for _, k := range keys {
		want[k] = true
	}
	var sub []porcupine.Operation
	for _, op := range ops {
		if want[op.Input.(regInput).Key] {
			sub = append(sub, op)
		}
	}
	assignLanes(sub)
	return sub
}

// LinResult is the outcome of the linearizability check.
type LinResult struct {
	Verdict     string   // ok, illegal or unknown
	Keys        int      // keys (partitions) checked
	IllegalKeys []string // keys with no complete linearization (when illegal)
	TimedOut    bool     // the timeout ran out (IllegalKeys may then include unfinished keys)
	Ops         []porcupine.Operation
	Info        porcupine.LinearizationInfo
}

// CheckLinearizable runs porcupine over the operations with the register
// model. A timeout of 0 means no limit.
func CheckLinearizable(ops []porcupine.Operation, timeout time.Duration) LinResult {
	keys := sortedKeys(ops)
	start := time.Now()
	res, info := porcupine.CheckOperationsVerbose(registerModel, ops, timeout)
	out := LinResult{Keys: len(keys), IllegalKeys: []string{}, Ops: ops, Info: info}
	out.TimedOut = timeout > 0 && time.Since(start) >= timeout
	// Partitions come back in sorted key order (partitionByKey).
	out.Verdict, out.IllegalKeys = judge(res, info, ops, keys, func(op porcupine.Operation) string {
		return op.Input.(regInput).Key
	})
	if out.Verdict == verdictUnknown {
		out.TimedOut = true
	}
	return out
}

// judge turns porcupine's result into a verdict and, when illegal, the names
// of the partitions at fault. names are the partitions in the order the
// model's Partition returned them; nameOf names an operation's partition.
func judge(res porcupine.CheckResult, info porcupine.LinearizationInfo, ops []porcupine.Operation,
	names []string, nameOf func(porcupine.Operation) string) (string, []string) {
	switch res {
	case porcupine.Ok:
		return verdictOk, []string{}
	case porcupine.Illegal:
		sizes := map[string]int{}
		for _, op := range ops {
			sizes[nameOf(op)]++
		}
		return verdictIllegal, incompletePartitions(names, sizes, info)
	default:
		return verdictUnknown, []string{}
	}
}

// incompletePartitions names the partitions (given in the order the model's
// Partition returned them, with their sizes) that no partial linearization
// covers whole: the illegal ones.
func incompletePartitions(names []string, sizes map[string]int, info porcupine.LinearizationInfo) []string {
	out := []string{}
	partials := info.PartialLinearizations()
	for i, name := range names {
		complete := false
		if i < len(partials) {
			for _, p := range partials[i] {
				if len(p) == sizes[name] {
					complete = true
					break
				}
			}
		}
		if !complete {
			out = append(out, name)
		}
	}
	return out
}

// StaleViolation is a read that returned an older record (lower ModifyIndex)
// than one the same client had already read from the same node.
type StaleViolation struct {
	Client       int64  `json:"client"`
	Node         string `json:"node"`
	Key          string `json:"key"`
	EarlierIndex int64  `json:"earlier_index"`
	LaterIndex   int64  `json:"later_index"`
	EarlierLine  int    `json:"earlier_line"`
	LaterLine    int    `json:"later_line"`
}

// CheckMonotonicReads checks, for each (client, node, key), that the index of
// completed reads with a known index never decreases in call order. With
// allModes false only stale reads take part; with allModes true reads of every
// mode do (a default or consistent read is answered by the shard leader even
// when sent to a follower, so mixing modes can flag a follower that is merely
// behind the leader, which stale reads allow).
func CheckMonotonicReads(recs []Record, allModes bool) []StaleViolation {
	type groupKey struct {
		client int64
		node   string
		key    string
	}
	type seq struct {
		client int64
		node   string
		key    string
		reads  []Record
	}
	groups := map[groupKey]*seq{}
	var order []*seq
	for _, r := range recs {
		if r.Op != opRead || r.Status != statusOk || r.Index == nil {
			continue
		}
		if !allModes && r.Mode != modeStale {
			continue
		}
		k := groupKey{r.Client, r.Node, r.Key}
		g, ok := groups[k]
		if !ok {
			g = &seq{client: r.Client, node: r.Node, key: r.Key}
			groups[k] = g
			order = append(order, g)
		}
		g.reads = append(g.reads, r)
	}
	var out []StaleViolation
	for _, g := range order {
		sort.SliceStable(g.reads, func(i, j int) bool { return g.reads[i].Call < g.reads[j].Call })
		var best *Record
		for i := range g.reads {
			r := &g.reads[i]
			if best != nil && *r.Index < *best.Index {
				out = append(out, StaleViolation{
					Client: g.client, Node: g.node, Key: g.key,
					EarlierIndex: *best.Index, LaterIndex: *r.Index,
					EarlierLine: best.Line, LaterLine: r.Line,
				})
			}
			if best == nil || *r.Index > *best.Index {
				best = r
			}
		}
	}
	return out
}
