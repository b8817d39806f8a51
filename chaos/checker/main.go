// Command checker checks a history recorded by Trireme's chaos runner for
// linearizability (with porcupine) of single keys and of multi-key
// transactions, for monotonic stale reads, and for locks never held by two
// sessions at once.
//
// Usage:
//
//	checker [--timeout 60s] [--out DIR] [--monotonic-all-modes] HISTORY.jsonl
//
// HISTORY.jsonl ("-" for stdin) holds JSON lines, one per completed client
// operation, for example:
//
//	{"client":3,"node":"n2","proto":"http","op":"read","key":"k3","mode":"default","value":"c3-17","index":123,"status":"ok","call":1234567,"return":1299999}
//
// Fields:
//
//   - client (int, required): client id. A client issues one operation at a time.
//   - node (string): the node the request was sent to.
//   - proto (string): "http" or "resp" (informational).
//   - op (required): "read" | "write" | "cas" | "delete" | "txn" | "acquire" |
//     "release" | "renew" | "session-create" | "session-destroy".
//   - key (string, required but for renew and session-*): txn: the name of
//     the group of keys it works on (a group's keys are changed only by txns);
//     acquire, release: the lock's key.
//   - mode (reads only, required for reads): "default" | "consistent" | "stale".
//   - value: read: the value read, or null when the key was absent; write:
//     the value written; cas: the new value; absent/null for delete. A read's
//     missing value counts as null.
//   - expect (cas only): the value the key must hold for the cas to apply, or
//     null (or missing) meaning the key must be absent (create-only).
//   - result (cas, txn, acquire, release; bool, required when status is "ok"):
//     whether it applied (took the lock, released it).
//   - txn (txn only): its operations in order, each {"verb", "key", "value"}:
//     get (value: what it read, when the txn applied), set (value: written),
//     delete, check-not-exists. A get of an absent key or a check-not-exists
//     of a present one fails the txn, which then changes nothing.
//   - session (acquire, release, renew, session-*): the session id.
//   - lease (session-create, int ns, required when status is "ok"): how long
//     after the call of a successful create or renew no other session may
//     take a lock this one holds.
//   - index (reads only, int or null): the record's ModifyIndex when known.
//   - bound (stale reads only, int ns, optional): how old the answer said it
//     may be (X-Consul-LastContact).
//   - status (required): "ok" (completed, result known), "fail" (certainly
//     did not take effect), "unknown" (timed out or connection broke: a
//     write/cas/delete may or may not have taken effect; a read's answer is
//     unknown).
//   - call, return (int nanoseconds on one monotonic clock, required):
//     return >= call.
//
// Unknown fields are ignored; blank lines are skipped. Every written value is
// expected to be unique across the history.
//
// Checks:
//
//  1. Linearizability of every operation except stale reads, failed
//     operations and unknown reads, against a per-key register that starts
//     absent (partitioned by key). Unknown writes, cas and deletes are kept
//     with an infinite return time; an unknown cas applies iff the state
//     matches its expect.
//  2. Monotonic stale reads: for each (client, node, key), completed stale
//     reads with a non-null index must not see the index decrease in call
//     order (with --monotonic-all-modes, reads of every mode take part).
//  3. Linearizability of the txns against a model of each group's keys
//     (partitioned by group), failed and unknown ones as in 1.
//  4. Locks: the spans in which a session certainly held a lock (lock.go)
//     must not overlap between sessions.
//  5. Stale read bounds (bound.go): a stale read with a bound must not show a
//     value overwritten by a write acknowledged before its call minus its
//     bound.
//
// Output: one JSON summary line on stdout,
//
//	{"ops":N,"checked_ops":M,"keys":K,"stale_reads":S,"linearizable":"ok"|"illegal"|"unknown","illegal_keys":[...],"stale_violations":V,"unknown_writes":U,
//	 "txns":T,"txn_groups":G,"txn_linearizable":"ok"|"illegal"|"unknown","illegal_groups":[...],"lock_holds":H,"lock_violations":L}
//
// and a human summary on stderr. With --out DIR, on a violation, the keys
// found illegal are drawn (porcupine's visualization) to
// DIR/linearizability.html, the transactions to DIR/transactions.html, and
// stale and lock violations are listed one JSON object a line in
// DIR/stale_violations.jsonl and DIR/lock_violations.jsonl.
//
// Exit status: 0 linearizable and no stale violation; 1 a violation; 2 the
// check timed out (and found no violation), or bad usage or input.
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Summary is the JSON line printed on stdout.
type Summary struct {
	Ops             int      `json:"ops"`
	CheckedOps      int      `json:"checked_ops"`
	Keys            int      `json:"keys"`
	StaleReads      int      `json:"stale_reads"`
	Linearizable    string   `json:"linearizable"`
	IllegalKeys     []string `json:"illegal_keys"`
	StaleViolations int      `json:"stale_violations"`
	UnknownWrites   int      `json:"unknown_writes"`
	Txns            int      `json:"txns"`
	TxnGroups       int      `json:"txn_groups"`
	TxnLinearizable string   `json:"txn_linearizable"`
	IllegalGroups   []string `json:"illegal_groups"`
	LockHolds       int      `json:"lock_holds"`
	LockViolations  int      `json:"lock_violations"`
	BoundedReads    int      `json:"bounded_stale_reads"`
	BoundViolations int      `json:"bound_violations"`
}

// Options controls a check.
type Options struct {
	Timeout           time.Duration // 0: no limit
	MonotonicAllModes bool
}

// Report is everything a check found.
type Report struct {
	Summary    Summary
	Lin        LinResult
	Violations []StaleViolation
	Txn        TxnResult
	Locks      []LockViolation
	Bounds     []BoundViolation
}

// ExitCode is 1 on any violation, 2 when the check timed out without finding
// one, 0 otherwise.
func (r Report) ExitCode() int {
	switch {
	case r.Lin.Verdict == verdictIllegal || len(r.Violations) > 0 ||
		r.Txn.Verdict == verdictIllegal || len(r.Locks) > 0 || len(r.Bounds) > 0:
		return 1
	case r.Lin.Verdict == verdictUnknown || r.Txn.Verdict == verdictUnknown:
		return 2
	}
	return 0
}

// Analyze runs every check over parsed records.
func Analyze(recs []Record, opts Options) Report {
	built := BuildOperations(recs)
	lin := CheckLinearizable(built.Ops, opts.Timeout)
	viol := CheckMonotonicReads(recs, opts.MonotonicAllModes)
	txn := CheckTransactions(recs, opts.Timeout)
	holds, locks := CheckLocks(recs)
	bounded, bounds := CheckStaleBounds(recs)
	return Report{
		Summary: Summary{
			Ops:             len(recs),
			CheckedOps:      len(built.Ops),
			Keys:            lin.Keys,
			StaleReads:      built.StaleReads,
			Linearizable:    lin.Verdict,
			IllegalKeys:     lin.IllegalKeys,
			StaleViolations: len(viol),
			UnknownWrites:   built.UnknownWrites,
			Txns:            txn.Ops,
			TxnGroups:       txn.Groups,
			TxnLinearizable: txn.Verdict,
			IllegalGroups:   txn.IllegalGroups,
			LockHolds:       len(holds),
			LockViolations:  len(locks),
			BoundedReads:    bounded,
			BoundViolations: len(bounds),
		},
		Lin:        lin,
		Violations: viol,
		Txn:        txn,
		Locks:      locks,
		Bounds:     bounds,
	}
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("checker", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 60*time.Second, "linearizability check time limit (0: none)")
	outDir := fs.String("out", "", "directory for linearizability.html (when illegal) and stale_violations.jsonl")
	allModes := fs.Bool("monotonic-all-modes", false, "include default and consistent reads in the monotonic-read check")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: checker [--timeout 60s] [--out DIR] [--monotonic-all-modes] HISTORY.jsonl")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return 2
	}

	path := fs.Arg(0)
	var in io.Reader = stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintf(stderr, "checker: %v\n", err)
			return 2
		}
		defer f.Close()
		in = f
	}
	recs, err := ParseHistory(in)
	if err != nil {
		fmt.Fprintf(stderr, "checker: %s: %v\n", path, err)
		return 2
	}

	rep := Analyze(recs, Options{Timeout: *timeout, MonotonicAllModes: *allModes})

	line, _ := json.Marshal(rep.Summary)
	fmt.Fprintln(stdout, string(line))
	printHuman(stderr, rep, *timeout)

	if *outDir != "" {
		if err := writeArtifacts(*outDir, rep, *timeout, stderr); err != nil {
			fmt.Fprintf(stderr, "checker: %v\n", err)
		}
	}
	return rep.ExitCode()
}

func printHuman(w io.Writer, rep Report, timeout time.Duration) {
	s := rep.Summary
	fmt.Fprintf(w, "checker: %d ops, %d checked for linearizability over %d keys (%d unknown writes kept), %d stale reads\n",
		s.Ops, s.CheckedOps, s.Keys, s.UnknownWrites, s.StaleReads)
	switch s.Linearizable {
	case verdictOk:
		fmt.Fprintln(w, "linearizability: ok")
	case verdictIllegal:
		fmt.Fprintf(w, "linearizability: ILLEGAL on %d key(s): %s\n", len(s.IllegalKeys), strings.Join(s.IllegalKeys, ", "))
		if rep.Lin.TimedOut {
			fmt.Fprintln(w, "  (the timeout also ran out: some of these keys may be unfinished rather than illegal)")
		}
	default:
		fmt.Fprintf(w, "linearizability: UNKNOWN (no verdict within %v; raise --timeout)\n", timeout)
	}
	fmt.Fprintf(w, "monotonic stale reads: %d violation(s)\n", len(rep.Violations))
	for _, v := range rep.Violations {
		fmt.Fprintf(w, "  client %d on node %s, key %s: index %d (line %d) after index %d (line %d)\n",
			v.Client, v.Node, v.Key, v.LaterIndex, v.LaterLine, v.EarlierIndex, v.EarlierLine)
	}
	fmt.Fprintf(w, "stale read bounds: %d checked, %d violation(s)\n", s.BoundedReads, len(rep.Bounds))
	for _, v := range rep.Bounds {
		fmt.Fprintf(w, "  client %d on node %s, key %s (line %d, bound %d ns): overwritten by line %d\n",
			v.Client, v.Node, v.Key, v.ReadLine, v.Bound, v.NewerLine)
	}
	switch s.TxnLinearizable {
	case verdictOk:
		fmt.Fprintf(w, "transactions: %d over %d groups, linearizable\n", s.Txns, s.TxnGroups)
	case verdictIllegal:
		fmt.Fprintf(w, "transactions: ILLEGAL in %d group(s): %s\n", len(s.IllegalGroups), strings.Join(s.IllegalGroups, ", "))
	default:
		fmt.Fprintf(w, "transactions: UNKNOWN (no verdict within %v; raise --timeout)\n", timeout)
	}
	fmt.Fprintf(w, "locks: %d certain holds, %d overlap(s)\n", s.LockHolds, len(rep.Locks))
	for _, v := range rep.Locks {
		fmt.Fprintf(w, "  key %s: session %s (client %d, line %d) held it until %d, session %s (client %d, line %d) from %d\n",
			v.Key, v.First.Session, v.First.Client, v.First.Line, v.First.To,
			v.Second.Session, v.Second.Client, v.Second.Line, v.Second.From)
	}
}

// illegalInfo checks the illegal keys again on their own, so that the
// visualization shows only them (a whole chaos history is a large picture);
// should that check not come back illegal, it falls back to everything.
func illegalInfo(lin LinResult, timeout time.Duration) porcupine.LinearizationInfo {
	sub := opsOfKeys(lin.Ops, lin.IllegalKeys)
	if len(sub) == 0 {
		return lin.Info
	}
	res, info := porcupine.CheckOperationsVerbose(registerModel, sub, timeout)
	if res != porcupine.Illegal {
		return lin.Info
	}
	return info
}

// writeArtifacts writes the visualization of an illegal history and the lists
// of stale and lock violations, when there are any.
func writeArtifacts(dir string, rep Report, timeout time.Duration, stderr io.Writer) error {
	if rep.ExitCode() != 1 {
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var errs []error
	written := func(p string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("writing %s: %w", p, err))
		} else {
			fmt.Fprintf(stderr, "written: %s\n", p)
		}
	}
	if rep.Lin.Verdict == verdictIllegal {
		p := filepath.Join(dir, "linearizability.html")
		written(p, porcupine.VisualizePath(registerModel, illegalInfo(rep.Lin, timeout), p))
	}
	if rep.Txn.Verdict == verdictIllegal {
		p := filepath.Join(dir, "transactions.html")
		written(p, porcupine.VisualizePath(txnModel, rep.Txn.Info, p))
	}
	if len(rep.Violations) > 0 {
		p := filepath.Join(dir, "stale_violations.jsonl")
		written(p, writeLines(p, rep.Violations))
	}
	if len(rep.Bounds) > 0 {
		p := filepath.Join(dir, "bound_violations.jsonl")
		written(p, writeLines(p, rep.Bounds))
	}
	if len(rep.Locks) > 0 {
		p := filepath.Join(dir, "lock_violations.jsonl")
		written(p, writeLines(p, rep.Locks))
	}
	return errors.Join(errs...)
}

// writeLines writes one JSON object a line.
func writeLines[T any](path string, items []T) error {
	var b strings.Builder
	for _, item := range items {
		line, _ := json.Marshal(item)
		b.Write(line)
		b.WriteByte('\n')
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}
