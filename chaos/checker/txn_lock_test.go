package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// step is one operation of a txn record.
func step(verb, key string, value any) m {
	return m{"verb": verb, "key": key, "value": value}
}

func txn(c int, group string, result any, call, ret int64, steps ...m) m {
	rec := m{"client": c, "node": "n1", "proto": "http", "op": "txn", "key": group,
		"txn": steps, "status": "ok", "call": call, "return": ret}
	if result == nil {
		rec["status"] = "unknown"
	} else {
		rec["result"] = result
	}
	return rec
}

func expectTxn(t *testing.T, rep Report, verdict string) {
	t.Helper()
	if rep.Summary.TxnLinearizable != verdict {
		t.Fatalf("txn verdict %q, want %q: %+v", rep.Summary.TxnLinearizable, verdict, rep.Summary)
	}
}

func TestTransactionsAreAllOrNothing(t *testing.T) {
	setAB := func(c int, v string, call, ret int64) m {
		return txn(c, "g", true, call, ret, step("set", "a", v), step("set", "b", v))
	}
	getAB := func(c int, a, b string, call, ret int64) m {
		return txn(c, "g", true, call, ret, step("get", "a", a), step("get", "b", b))
	}
	// Two writers in turn; a reader sees one of them whole.
	rep := analyze(t, setAB(0, "x", 0, 10), setAB(1, "y", 20, 30), getAB(2, "y", "y", 40, 50))
	expectTxn(t, rep, verdictOk)
	if rep.Summary.Txns != 3 || rep.Summary.TxnGroups != 1 || rep.ExitCode() != 0 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	// Concurrent writers: either whole result is fine, a mix is not.
	rep = analyze(t, setAB(0, "x", 0, 100), setAB(1, "y", 0, 100), getAB(2, "x", "x", 110, 120))
	expectTxn(t, rep, verdictOk)
	rep = analyze(t, setAB(0, "x", 0, 100), setAB(1, "y", 0, 100), getAB(2, "x", "y", 110, 120))
	expectTxn(t, rep, verdictIllegal)
	if rep.ExitCode() != 1 || strings.Join(rep.Summary.IllegalGroups, ",") != "g" {
		t.Fatalf("summary %+v", rep.Summary)
	}
	// A read sees the writes of the steps before it in its own txn.
	rep = analyze(t, txn(0, "g", true, 0, 10, step("set", "a", "x"), step("get", "a", "x"), step("delete", "a", nil)),
		txn(1, "g", false, 20, 30, step("get", "a", nil)))
	expectTxn(t, rep, verdictOk)
}

func TestGroupReadsSeeTransactionsWhole(t *testing.T) {
	setAB := func(c int, v string, call, ret int64) m {
		return txn(c, "g", true, call, ret, step("set", "a", v), step("set", "b", v))
	}
	readAB := func(c int, a, b any, call, ret int64) m {
		rec := txn(c, "g", true, call, ret, step("read", "a", a), step("read", "b", b))
		rec["proto"] = "resp"
		return rec
	}
	// Before any write both keys are absent; after it, both hold its value.
	rep := analyze(t, readAB(0, nil, nil, 0, 10), setAB(1, "x", 20, 30), readAB(0, "x", "x", 40, 50))
	expectTxn(t, rep, verdictOk)
	// Half of a transaction: one key new, the other still absent.
	rep = analyze(t, setAB(1, "x", 0, 100), readAB(0, "x", nil, 10, 20))
	expectTxn(t, rep, verdictIllegal)
	// Half of a later transaction over an earlier one.
	rep = analyze(t, setAB(1, "x", 0, 10), setAB(1, "y", 20, 100), readAB(0, "y", "x", 30, 40))
	expectTxn(t, rep, verdictIllegal)
	// A read that claims a key absent after a completed write of it.
	rep = analyze(t, setAB(1, "x", 0, 10), readAB(0, nil, nil, 20, 30))
	expectTxn(t, rep, verdictIllegal)
}

func TestFailedConditionsChangeNothing(t *testing.T) {
	create := func(c int, v string, result bool, call, ret int64) m {
		return txn(c, "g", result, call, ret, step("check-not-exists", "a", nil), step("set", "a", v), step("set", "b", v))
	}
	// The second create must fail: a exists.
	rep := analyze(t, create(0, "x", true, 0, 10), create(1, "y", false, 20, 30),
		txn(2, "g", true, 40, 50, step("get", "a", "x"), step("get", "b", "x")))
	expectTxn(t, rep, verdictOk)
	// Claiming it applied is illegal.
	rep = analyze(t, create(0, "x", true, 0, 10), create(1, "y", true, 20, 30))
	expectTxn(t, rep, verdictIllegal)
	// A failed txn that set b before its failing check must not leave b behind.
	rep = analyze(t,
		txn(0, "g", true, 0, 10, step("set", "a", "x")),
		txn(1, "g", false, 20, 30, step("set", "b", "y"), step("check-not-exists", "a", nil)),
		txn(2, "g", true, 40, 50, step("get", "b", "y")))
	expectTxn(t, rep, verdictIllegal)
}

func TestUnknownTransactionsMayOrMayNotHaveApplied(t *testing.T) {
	set := func(c int, v string, result any, call, ret int64) m {
		return txn(c, "g", result, call, ret, step("set", "a", v))
	}
	get := func(c int, v string, call, ret int64) m {
		return txn(c, "g", true, call, ret, step("get", "a", v))
	}
	// Seen or not seen: both fine.
	expectTxn(t, analyze(t, set(0, "x", true, 0, 10), set(1, "y", nil, 20, 30), get(2, "y", 40, 50)), verdictOk)
	expectTxn(t, analyze(t, set(0, "x", true, 0, 10), set(1, "y", nil, 20, 30), get(2, "x", 40, 50)), verdictOk)
	// But once seen, it cannot be unseen.
	rep := analyze(t, set(0, "x", true, 0, 10), set(1, "y", nil, 20, 30), get(2, "y", 40, 50), get(2, "x", 60, 70))
	expectTxn(t, rep, verdictIllegal)
}

func TestTxnParseErrors(t *testing.T) {
	cases := map[string]string{
		`{"client":0,"op":"txn","key":"g","status":"ok","result":true,"call":0,"return":1}`:                                  "without its",
		`{"client":0,"op":"txn","key":"g","txn":[{"verb":"cas","key":"a"}],"status":"ok","result":true,"call":0,"return":1}`: "unknown \"verb\"",
		`{"client":0,"op":"txn","key":"g","txn":[{"verb":"set","key":"a"}],"status":"ok","result":true,"call":0,"return":1}`: "set without",
		`{"client":0,"op":"txn","key":"g","txn":[{"verb":"get","key":"a"}],"status":"ok","call":0,"return":1}`:               "without a \"result\"",
		`{"client":0,"op":"acquire","key":"l","status":"ok","result":true,"call":0,"return":1}`:                              "without a \"session\"",
		`{"client":0,"op":"session-create","session":"s","status":"ok","call":0,"return":1}`:                                 "positive \"lease\"",
		`{"client":0,"op":"release","key":"l","session":"s","status":"ok","call":0,"return":1}`:                              "without a \"result\"",
	}
	for line, want := range cases {
		_, err := ParseHistory(strings.NewReader(line))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one containing %q", line, err, want)
		}
	}
	// Session operations need no key.
	if _, err := ParseHistory(strings.NewReader(`{"client":0,"op":"renew","session":"s","status":"ok","call":0,"return":1}`)); err != nil {
		t.Fatal(err)
	}
}

// Lock histories: times in ms for readability; leases of 100.

func sessionEvent(c int, op, session string, call, ret int64) m {
	rec := m{"client": c, "node": "n1", "proto": "http", "op": op, "session": session,
		"status": "ok", "call": call, "return": ret}
	if op == "session-create" {
		rec["lease"] = 100
	}
	return rec
}

func lockOp(c int, op, key, session string, result bool, call, ret int64) m {
	return m{"client": c, "node": "n1", "proto": "http", "op": op, "key": key, "session": session,
		"result": result, "status": "ok", "call": call, "return": ret}
}

func TestLockHandedOverAfterReleaseIsFine(t *testing.T) {
	rep := analyze(t,
		sessionEvent(0, "session-create", "s0", 0, 1),
		sessionEvent(1, "session-create", "s1", 0, 1),
		lockOp(0, "acquire", "l", "s0", true, 2, 3),
		lockOp(1, "acquire", "l", "s1", false, 4, 5),
		lockOp(0, "release", "l", "s0", true, 10, 11),
		lockOp(1, "acquire", "l", "s1", true, 12, 13),
	)
	if rep.Summary.LockHolds != 2 || rep.Summary.LockViolations != 0 || rep.ExitCode() != 0 {
		t.Fatalf("summary %+v", rep.Summary)
	}
}

func TestLockGrantedWhileHeldIsAViolation(t *testing.T) {
	rep := analyze(t,
		sessionEvent(0, "session-create", "s0", 0, 1),
		sessionEvent(1, "session-create", "s1", 0, 1),
		lockOp(0, "acquire", "l", "s0", true, 2, 3),
		lockOp(1, "acquire", "l", "s1", true, 4, 5),
	)
	if rep.Summary.LockViolations != 1 || rep.ExitCode() != 1 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	v := rep.Locks[0]
	if v.First.Session != "s0" || v.Second.Session != "s1" || v.First.To != 100 || v.Second.From != 5 {
		t.Fatalf("violation %+v", v)
	}
}

func TestPausedHolderKeepsItsLeaseThenLosesIt(t *testing.T) {
	base := []m{
		sessionEvent(0, "session-create", "s0", 0, 1),
		sessionEvent(1, "session-create", "s1", 0, 1),
		lockOp(0, "acquire", "l", "s0", true, 2, 3),
		sessionEvent(0, "renew", "s0", 50, 51), // then the holder stops renewing
		sessionEvent(1, "renew", "s1", 115, 116),
	}
	// Granted before the lease of the last renewal ran out (50 + 100): two holders.
	rep := analyze(t, append(base, lockOp(1, "acquire", "l", "s1", true, 120, 140))...)
	if rep.Summary.LockViolations != 1 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	// After it: fine, and the paused holder's late renew and release change nothing.
	rep = analyze(t, append(base,
		lockOp(1, "acquire", "l", "s1", true, 160, 170),
		sessionEvent(0, "renew", "s0", 200, 201),
		lockOp(0, "release", "l", "s0", false, 210, 211))...)
	if rep.Summary.LockViolations != 0 || rep.Summary.LockHolds != 2 {
		t.Fatalf("summary %+v", rep.Summary)
	}
	// Renewals that keep coming in time keep the hold.
	rep = analyze(t, append(base,
		sessionEvent(0, "renew", "s0", 140, 141),
		sessionEvent(0, "renew", "s0", 230, 231),
		sessionEvent(1, "renew", "s1", 290, 291),
		lockOp(1, "acquire", "l", "s1", true, 300, 310))...)
	if rep.Summary.LockViolations != 1 || rep.Locks[0].First.To != 330 {
		t.Fatalf("summary %+v %+v", rep.Summary, rep.Locks)
	}
	// A destroy ends the hold; so does an unknown acquire give none.
	rep = analyze(t, append(base,
		sessionEvent(0, "session-destroy", "s0", 60, 61),
		lockOp(1, "acquire", "l", "s1", true, 70, 80),
		lockOp(0, "acquire", "l", "s0", true, 90, 95).with("status", "unknown"))...)
	if rep.Summary.LockViolations != 0 || rep.Summary.LockHolds != 2 {
		t.Fatalf("summary %+v", rep.Summary)
	}
}

func TestRunListsLockViolations(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	p := writeFile(t, dir, encode(t, []m{
		sessionEvent(0, "session-create", "s0", 0, 1),
		sessionEvent(1, "session-create", "s1", 0, 1),
		lockOp(0, "acquire", "l", "s0", true, 2, 3),
		lockOp(1, "acquire", "l", "s1", true, 4, 5),
	}))
	var stdout, stderr strings.Builder
	if code := run([]string{"--out", out, p}, nil, &stdout, &stderr); code != 1 {
		t.Fatalf("exit = %d; stderr %s", code, stderr.String())
	}
	got, err := os.ReadFile(filepath.Join(out, "lock_violations.jsonl"))
	if err != nil || !strings.Contains(string(got), `"session":"s1"`) {
		t.Fatalf("lock_violations.jsonl = %q, %v", got, err)
	}
	if !strings.Contains(stderr.String(), "locks: 2 certain holds, 1 overlap(s)") {
		t.Fatalf("stderr %s", stderr.String())
	}
}
