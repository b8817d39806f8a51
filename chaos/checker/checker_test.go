package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// m is one history line before encoding.
type m map[string]any

func read(c int, k string, v any, call, ret int64) m {
	return m{"client": c, "node": "n1", "proto": "http", "op": "read", "key": k, "mode": "default",
		"value": v, "index": nil, "status": "ok", "call": call, "return": ret}
}

func write(c int, k, v string, call, ret int64) m {
	return m{"client": c, "node": "n1", "proto": "http", "op": "write", "key": k, "value": v,
		"status": "ok", "call": call, "return": ret}
}

func cas(c int, k string, expect any, v string, result bool, call, ret int64) m {
	return m{"client": c, "node": "n1", "proto": "http", "op": "cas", "key": k, "expect": expect,
		"value": v, "result": result, "status": "ok", "call": call, "return": ret}
}

func del(c int, k string, call, ret int64) m {
	return m{"client": c, "node": "n1", "proto": "resp", "op": "delete", "key": k,
		"status": "ok", "call": call, "return": ret}
}

// with returns a copy of x with field k set to v.
func (x m) with(k string, v any) m {
	y := m{}
	for a, b := range x {
		y[a] = b
	}
	y[k] = v
	return y
}

func encode(t *testing.T, ops []m) string {
	t.Helper()
	var b strings.Builder
	for _, op := range ops {
		line, err := json.Marshal(op)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(line)
		b.WriteByte('\n')
	}
	return b.String()
}

func analyzeWith(t *testing.T, opts Options, ops ...m) Report {
	t.Helper()
	recs, err := ParseHistory(strings.NewReader(encode(t, ops)))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return Analyze(recs, opts)
}

func analyze(t *testing.T, ops ...m) Report {
	t.Helper()
	return analyzeWith(t, Options{Timeout: 10 * time.Second}, ops...)
}

func expectVerdict(t *testing.T, rep Report, verdict string, exit int) {
	t.Helper()
	if rep.Summary.Linearizable != verdict {
		t.Fatalf("linearizable = %q, want %q (summary %+v)", rep.Summary.Linearizable, verdict, rep.Summary)
	}
	if got := rep.ExitCode(); got != exit {
		t.Fatalf("exit code = %d, want %d (summary %+v)", got, exit, rep.Summary)
	}
}

func TestSequentialLegal(t *testing.T) {
	rep := analyze(t,
		read(0, "a", nil, 0, 10),
		write(0, "a", "c0-1", 20, 30),
		read(0, "a", "c0-1", 40, 50).with("index", 7),
		cas(0, "a", "c0-1", "c0-2", true, 60, 70),
		read(0, "a", "c0-2", 80, 90).with("mode", "consistent"),
		del(0, "a", 100, 110),
		read(0, "a", nil, 120, 130),
	)
	expectVerdict(t, rep, verdictOk, 0)
	want := Summary{Ops: 7, CheckedOps: 7, Keys: 1, Linearizable: "ok", IllegalKeys: []string{},
		TxnLinearizable: "ok", IllegalGroups: []string{}}
	if !reflect.DeepEqual(rep.Summary, want) {
		t.Fatalf("summary = %+v, want %+v", rep.Summary, want)
	}
}

func TestReadOfOverwrittenValueIsIllegal(t *testing.T) {
	rep := analyze(t,
		write(0, "a", "c0-1", 0, 10),
		write(0, "a", "c0-2", 20, 30),
		read(1, "a", "c0-1", 40, 50), // c0-2 was already written
	)
	expectVerdict(t, rep, verdictIllegal, 1)
	if !reflect.DeepEqual(rep.Summary.IllegalKeys, []string{"a"}) {
		t.Fatalf("illegal keys = %v", rep.Summary.IllegalKeys)
	}
}

func TestReadOfAbsentAfterCompletedWriteIsIllegal(t *testing.T) {
	rep := analyze(t,
		write(0, "a", "c0-1", 0, 10),
		read(1, "a", nil, 11, 12),
	)
	expectVerdict(t, rep, verdictIllegal, 1)
}

func TestConcurrentOverlappingLegal(t *testing.T) {
	rep := analyze(t,
		write(1, "a", "c1-1", 0, 100),
		read(2, "a", nil, 10, 20),       // before the write takes effect
		read(3, "a", "c1-1", 30, 40),    // after
		read(2, "a", "c1-1", 50, 60),    // still after
		write(3, "a", "c3-1", 45, 200),  // overlaps the next read ...
		read(1, "a", "c1-1", 150, 160),  // ... which sees the older value
		read(2, "a", "c3-1", 170, 180),  // and this one the newer
		read(1, "a", "c3-1", 210, 220),  // after both
		write(0, "a", "c0-1", 300, 400), // two writes racing
		write(2, "a", "c2-1", 310, 390),
		read(1, "a", "c0-1", 410, 420), // c0-1 took effect last
	)
	expectVerdict(t, rep, verdictOk, 0)
}

func TestConcurrentButInconsistentOrderIllegal(t *testing.T) {
	// Two non-overlapping reads during a long write: once one read sees the
	// new value, a later one cannot see the old.
	rep := analyze(t,
		write(1, "a", "c1-1", 0, 100),
		read(2, "a", "c1-1", 10, 20),
		read(3, "a", nil, 30, 40),
	)
	expectVerdict(t, rep, verdictIllegal, 1)
}

func TestCasSemantics(t *testing.T) {
	cases := []struct {
		name    string
		ops     []m
		verdict string
	}{
		{"create-only on absent applies", []m{
			cas(0, "a", nil, "c0-1", true, 0, 10),
			read(0, "a", "c0-1", 20, 30),
		}, verdictOk},
		{"create-only on present fails", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", nil, "c1-1", false, 20, 30),
			read(0, "a", "c0-1", 40, 50),
		}, verdictOk},
		{"create-only on present reporting true is illegal", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", nil, "c1-1", true, 20, 30),
		}, verdictIllegal},
		{"create-only on absent reporting false is illegal", []m{
			cas(0, "a", nil, "c0-1", false, 0, 10),
		}, verdictIllegal},
		{"matching cas applies", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c0-1", "c1-1", true, 20, 30),
			read(0, "a", "c1-1", 40, 50),
		}, verdictOk},
		{"mismatching cas reporting true is illegal", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c9-9", "c1-1", true, 20, 30),
		}, verdictIllegal},
		{"matching cas reporting false is illegal", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c0-1", "c1-1", false, 20, 30),
		}, verdictIllegal},
		{"failed cas leaves the state", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c9-9", "c1-1", false, 20, 30),
			read(0, "a", "c1-1", 40, 50), // the cas did not apply
		}, verdictIllegal},
		{"cas on a deleted key with expect null", []m{
			write(0, "a", "c0-1", 0, 10),
			del(0, "a", 20, 30),
			cas(1, "a", nil, "c1-1", true, 40, 50),
		}, verdictOk},
		{"unknown cas may apply", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c0-1", "c1-1", false, 20, 30).with("status", "unknown").with("result", nil),
			read(0, "a", "c1-1", 40, 50),
		}, verdictOk},
		{"unknown cas may not apply", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c0-1", "c1-1", false, 20, 30).with("status", "unknown").with("result", nil),
			read(0, "a", "c0-1", 40, 50),
		}, verdictOk},
		{"unknown cas cannot apply when its expect never held", []m{
			write(0, "a", "c0-1", 0, 10),
			cas(1, "a", "c9-9", "c1-1", false, 20, 30).with("status", "unknown"),
			read(0, "a", "c1-1", 40, 50),
		}, verdictIllegal},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := analyze(t, tc.ops...)
			want := 0
			if tc.verdict == verdictIllegal {
				want = 1
			}
			expectVerdict(t, rep, tc.verdict, want)
		})
	}
}

func TestUnknownWrites(t *testing.T) {
	t.Run("read later", func(t *testing.T) {
		rep := analyze(t,
			write(0, "a", "c0-1", 0, 10).with("status", "unknown"),
			read(1, "a", nil, 5, 8), // before it took effect
			read(1, "a", "c0-1", 1000, 1010),
		)
		expectVerdict(t, rep, verdictOk, 0)
		if rep.Summary.UnknownWrites != 1 || rep.Summary.CheckedOps != 3 {
			t.Fatalf("summary = %+v", rep.Summary)
		}
	})
	t.Run("never read", func(t *testing.T) {
		rep := analyze(t,
			write(0, "a", "c0-1", 0, 10),
			write(0, "a", "c0-2", 20, 30).with("status", "unknown"),
			read(1, "a", "c0-1", 40, 50),
			read(1, "a", "c0-1", 60, 70),
		)
		expectVerdict(t, rep, verdictOk, 0)
	})
	t.Run("unknown delete", func(t *testing.T) {
		rep := analyze(t,
			write(0, "a", "c0-1", 0, 10),
			del(0, "a", 20, 30).with("status", "unknown"),
			read(1, "a", "c0-1", 40, 50),
			read(1, "a", nil, 60, 70),
		)
		expectVerdict(t, rep, verdictOk, 0)
	})
	t.Run("cannot take effect before its call", func(t *testing.T) {
		rep := analyze(t,
			read(1, "a", "c0-1", 0, 10),
			write(0, "a", "c0-1", 20, 30).with("status", "unknown"),
		)
		expectVerdict(t, rep, verdictIllegal, 1)
	})
	t.Run("unknown read is dropped", func(t *testing.T) {
		rep := analyze(t,
			write(0, "a", "c0-1", 0, 10),
			read(1, "a", "bogus", 20, 30).with("status", "unknown"),
		)
		expectVerdict(t, rep, verdictOk, 0)
		if rep.Summary.CheckedOps != 1 {
			t.Fatalf("checked ops = %d, want 1", rep.Summary.CheckedOps)
		}
	})
}

func TestFailedWriteReadIsIllegal(t *testing.T) {
	rep := analyze(t,
		write(0, "a", "c0-1", 0, 10).with("status", "fail"),
		read(1, "a", "c0-1", 20, 30),
	)
	expectVerdict(t, rep, verdictIllegal, 1)
	if rep.Summary.CheckedOps != 1 || rep.Summary.Ops != 2 {
		t.Fatalf("summary = %+v", rep.Summary)
	}

	rep = analyze(t,
		write(0, "a", "c0-1", 0, 10).with("status", "fail"),
		read(1, "a", nil, 20, 30),
	)
	expectVerdict(t, rep, verdictOk, 0)
}

func TestStaleReads(t *testing.T) {
	stale := func(c int, node, k string, v any, idx any, call, ret int64) m {
		return read(c, k, v, call, ret).with("mode", "stale").with("node", node).with("index", idx)
	}
	// A stale read may return an old value: not a linearizability violation.
	rep := analyze(t,
		write(0, "a", "c0-1", 0, 10),
		write(0, "a", "c0-2", 20, 30),
		stale(1, "n2", "a", "c0-1", 5, 40, 50),
	)
	expectVerdict(t, rep, verdictOk, 0)
	if rep.Summary.StaleReads != 1 || rep.Summary.CheckedOps != 2 {
		t.Fatalf("summary = %+v", rep.Summary)
	}

	// The same client going back in time on the same node is a violation.
	rep = analyze(t,
		write(0, "a", "c0-1", 0, 10),
		write(0, "a", "c0-2", 20, 30),
		stale(1, "n2", "a", "c0-2", 6, 40, 50),
		stale(1, "n2", "a", nil, nil, 55, 58), // absent: no index, ignored
		stale(1, "n2", "a", "c0-1", 5, 60, 70),
		stale(1, "n3", "a", "c0-1", 5, 80, 90), // other node: fine
		stale(2, "n2", "a", "c0-1", 5, 80, 90), // other client: fine
		stale(1, "n2", "b", "c0-9", 1, 80, 90), // other key: fine
	)
	if rep.Summary.Linearizable != verdictOk || rep.Summary.StaleViolations != 1 || rep.ExitCode() != 1 {
		t.Fatalf("summary = %+v, exit %d", rep.Summary, rep.ExitCode())
	}
	want := StaleViolation{Client: 1, Node: "n2", Key: "a", EarlierIndex: 6, LaterIndex: 5, EarlierLine: 3, LaterLine: 5}
	if rep.Violations[0] != want {
		t.Fatalf("violation = %+v, want %+v", rep.Violations[0], want)
	}

	// Ordered by call time, not by line.
	rep = analyze(t,
		stale(1, "n2", "a", "c0-1", 5, 60, 70),
		stale(1, "n2", "a", "c0-2", 6, 40, 50),
	)
	if rep.Summary.StaleViolations != 1 {
		t.Fatalf("summary = %+v", rep.Summary)
	}

	// A default read answered by the leader, then a stale read from a
	// lagging replica: only flagged with --monotonic-all-modes.
	ops := []m{
		write(0, "a", "c0-1", 0, 10),
		write(0, "a", "c0-2", 20, 30),
		read(1, "a", "c0-2", 40, 50).with("node", "n2").with("index", 6),
		stale(1, "n2", "a", "c0-1", 5, 60, 70),
	}
	rep = analyze(t, ops...)
	if rep.Summary.StaleViolations != 0 || rep.ExitCode() != 0 {
		t.Fatalf("summary = %+v", rep.Summary)
	}
	rep = analyzeWith(t, Options{Timeout: 10 * time.Second, MonotonicAllModes: true}, ops...)
	if rep.Summary.StaleViolations != 1 || rep.ExitCode() != 1 {
		t.Fatalf("summary = %+v", rep.Summary)
	}
}

func TestPerKeyIndependence(t *testing.T) {
	rep := analyze(t,
		write(0, "a", "c0-1", 0, 10),
		read(1, "b", nil, 20, 30), // a's write does not affect b
		write(1, "b", "c1-1", 40, 50),
		read(0, "a", "c0-1", 60, 70),
		read(0, "c", nil, 60, 70),
		read(0, "b", nil, 80, 90), // illegal: b holds c1-1
		write(2, "c", "c2-1", 100, 110),
		read(2, "c", "c2-1", 120, 130),
	)
	expectVerdict(t, rep, verdictIllegal, 1)
	if rep.Summary.Keys != 3 || !reflect.DeepEqual(rep.Summary.IllegalKeys, []string{"b"}) {
		t.Fatalf("summary = %+v", rep.Summary)
	}
}

func TestTimeoutIsUnknown(t *testing.T) {
	// Many concurrent writes followed by an impossible sequence of reads:
	// porcupine has to try every order of the writes before giving up.
	var ops []m
	for i := 0; i < 40; i++ {
		ops = append(ops, write(i, "a", fmt.Sprintf("c%d-1", i), 0, 1000))
		ops = append(ops, read(100+i, "a", fmt.Sprintf("c%d-1", (i+1)%40), 10, 990))
	}
	ops = append(ops, read(0, "a", "c0-1", 2000, 2010), read(0, "a", "c1-1", 2020, 2030), read(0, "a", "c0-1", 2040, 2050))
	rep := analyzeWith(t, Options{Timeout: 200 * time.Millisecond}, ops...)
	expectVerdict(t, rep, verdictUnknown, 2)
}

func TestParseErrors(t *testing.T) {
	good := `{"client":1,"node":"n1","proto":"http","op":"write","key":"a","value":"c1-1","status":"ok","call":1,"return":2}`
	cases := []struct {
		name string
		bad  string
		msg  string
	}{
		{"not json", `{"client":1,`, "invalid JSON"},
		{"trailing garbage", good + ` x`, "invalid JSON"},
		{"missing client", `{"op":"write","key":"a","value":"v","status":"ok","call":1,"return":2}`, "client"},
		{"missing call", `{"client":1,"op":"write","key":"a","value":"v","status":"ok","return":2}`, "call"},
		{"bad op", `{"client":1,"op":"put","key":"a","value":"v","status":"ok","call":1,"return":2}`, "op"},
		{"bad status", `{"client":1,"op":"write","key":"a","value":"v","status":"maybe","call":1,"return":2}`, "status"},
		{"bad mode", `{"client":1,"op":"read","key":"a","mode":"fast","value":null,"status":"ok","call":1,"return":2}`, "mode"},
		{"read without mode", `{"client":1,"op":"read","key":"a","value":null,"status":"ok","call":1,"return":2}`, "mode"},
		{"write without value", `{"client":1,"op":"write","key":"a","value":null,"status":"ok","call":1,"return":2}`, "value"},
		{"cas without result", `{"client":1,"op":"cas","key":"a","expect":null,"value":"v","status":"ok","call":1,"return":2}`, "result"},
		{"value not a string", `{"client":1,"op":"write","key":"a","value":5,"status":"ok","call":1,"return":2}`, "invalid JSON"},
		{"return before call", `{"client":1,"op":"write","key":"a","value":"v","status":"ok","call":5,"return":2}`, "before"},
		{"fractional time", `{"client":1,"op":"write","key":"a","value":"v","status":"ok","call":1.5,"return":2}`, "invalid JSON"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			// Line 3, after a good line and a blank one.
			_, err := ParseHistory(strings.NewReader(good + "\n\n" + tc.bad + "\n" + good + "\n"))
			ie, ok := err.(*InputError)
			if !ok {
				t.Fatalf("err = %v, want an *InputError", err)
			}
			if ie.Line != 3 || !strings.Contains(ie.Msg, tc.msg) {
				t.Fatalf("err = %v, want line 3 mentioning %q", err, tc.msg)
			}
		})
	}

	// No trailing newline, CRLF line ends, and unknown fields are fine.
	recs, err := ParseHistory(strings.NewReader(good + "\r\n" + strings.Replace(good, `"op"`, `"extra":1,"op"`, 1)))
	if err != nil || len(recs) != 2 || recs[1].Line != 2 {
		t.Fatalf("recs = %+v, err = %v", recs, err)
	}
}

func writeFile(t *testing.T, dir, content string) string {
	t.Helper()
	p := filepath.Join(dir, "history.jsonl")
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestRunMalformedInput(t *testing.T) {
	dir := t.TempDir()
	p := writeFile(t, dir, encode(t, []m{write(0, "a", "c0-1", 0, 10)})+"not json\n")
	var stdout, stderr bytes.Buffer
	code := run([]string{p}, nil, &stdout, &stderr)
	if code != 2 {
		t.Fatalf("exit = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "line 2") {
		t.Fatalf("stderr = %q, want it to name line 2", stderr.String())
	}
	if stdout.Len() != 0 {
		t.Fatalf("stdout = %q, want nothing", stdout.String())
	}

	for _, args := range [][]string{{}, {"a", "b"}, {"--timeout", "soon", p}, {filepath.Join(dir, "missing")}} {
		if code := run(args, nil, &stdout, &stderr); code != 2 {
			t.Fatalf("run(%q) = %d, want 2", args, code)
		}
	}
}

func TestRunWritesVisualizationOnViolation(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	p := writeFile(t, dir, encode(t, []m{
		write(0, "a", "c0-1", 0, 10),
		cas(1, "a", "c0-1", "c1-1", false, 5, 15).with("status", "unknown"),
		write(0, "a", "c0-2", 20, 30),
		read(1, "a", "c0-1", 40, 50).with("index", 3),
		read(2, "b", nil, 0, 10).with("mode", "stale"),
		read(2, "b", "c9-1", 20, 30).with("mode", "stale").with("index", 9),
		read(2, "b", "c9-0", 40, 50).with("mode", "stale").with("index", 8),
		write(3, "c", "c3-legal", 0, 10), // a legal key, left out of the picture
		read(3, "c", "c3-legal", 20, 30),
	}))
	var stdout, stderr bytes.Buffer
	code := run([]string{"--timeout", "5s", "--out", out, p}, nil, &stdout, &stderr)
	if code != 1 {
		t.Fatalf("exit = %d, want 1; stderr %s", code, stderr.String())
	}
	var s Summary
	if err := json.Unmarshal(stdout.Bytes(), &s); err != nil {
		t.Fatalf("stdout %q: %v", stdout.String(), err)
	}
	want := Summary{Ops: 9, CheckedOps: 6, Keys: 2, StaleReads: 3, Linearizable: "illegal",
		IllegalKeys: []string{"a"}, StaleViolations: 1, UnknownWrites: 1,
		TxnLinearizable: "ok", IllegalGroups: []string{}}
	if !reflect.DeepEqual(s, want) {
		t.Fatalf("summary = %+v, want %+v", s, want)
	}
	html, err := os.ReadFile(filepath.Join(out, "linearizability.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(html, []byte("<html")) || !bytes.Contains(html, []byte(`read(a) → \"c0-1\"`)) {
		t.Fatalf("visualization lacks the history (%d bytes)", len(html))
	}
	if bytes.Contains(html, []byte("c3-legal")) {
		t.Fatal("visualization shows a legal key")
	}
	viol, err := os.ReadFile(filepath.Join(out, "stale_violations.jsonl"))
	if err != nil || !strings.Contains(string(viol), `"earlier_index":9,"later_index":8`) {
		t.Fatalf("stale_violations.jsonl = %q, %v", viol, err)
	}
}

func TestRunOkWritesNothing(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	p := writeFile(t, dir, encode(t, []m{write(0, "a", "c0-1", 0, 10), read(1, "a", "c0-1", 20, 30)}))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"--out", out, p}, nil, &stdout, &stderr); code != 0 {
		t.Fatalf("exit = %d; stderr %s", code, stderr.String())
	}
	want := `{"ops":2,"checked_ops":2,"keys":1,"stale_reads":0,"linearizable":"ok","illegal_keys":[],"stale_violations":0,"unknown_writes":0,` +
		`"txns":0,"txn_groups":0,"txn_linearizable":"ok","illegal_groups":[],"lock_holds":0,"lock_violations":0,` +
		`"bounded_stale_reads":0,"bound_violations":0}` + "\n"
	if stdout.String() != want {
		t.Fatalf("stdout = %q, want %q", stdout.String(), want)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Fatalf("out dir should not exist: %v", err)
	}

	// An empty history is trivially fine; stdin works as "-".
	stdout.Reset()
	if code := run([]string{"-"}, strings.NewReader("\n"), &stdout, &stderr); code != 0 {
		t.Fatalf("exit = %d; stderr %s", code, stderr.String())
	}
}

func TestLanes(t *testing.T) {
	recs, err := ParseHistory(strings.NewReader(encode(t, []m{
		write(7, "a", "c7-1", 0, 10).with("status", "unknown"), // not client 7's last: own lane
		write(7, "a", "c7-2", 20, 30),
		write(7, "a", "c7-3", 40, 50).with("status", "unknown"), // client 7's last: its lane
		read(3, "a", nil, 0, 5),
	})))
	if err != nil {
		t.Fatal(err)
	}
	b := BuildOperations(recs)
	var lanes []int
	for _, op := range b.Ops {
		lanes = append(lanes, op.ClientId)
	}
	if want := []int{2, 1, 1, 0}; !reflect.DeepEqual(lanes, want) {
		t.Fatalf("lanes = %v, want %v", lanes, want)
	}
	if b.Ops[0].Return != infinity || b.Ops[1].Return != 30 {
		t.Fatalf("returns = %d, %d", b.Ops[0].Return, b.Ops[1].Return)
	}
}

func TestStaleReadBounds(t *testing.T) {
	stale := func(v any, bound int64, call, ret int64) m {
		return read(1, "a", v, call, ret).with("mode", "stale").with("node", "n2").with("bound", bound)
	}
	history := func(reads ...m) []m {
		return append([]m{
			write(0, "a", "c0-1", 0, 10),
			write(0, "a", "c0-2", 20, 30),
		}, reads...)
	}
	// c0-2 was acknowledged at 30: a read at 100 that may be 50 old must show
	// it; one that may be 80 old may still show c0-1, or the key absent only
	// if it may be older than c0-1 too.
	for _, tc := range []struct {
		name       string
		read       m
		violations int
	}{
		{"fresh enough and new", stale("c0-2", 50, 100, 110), 0},
		{"fresh enough but old", stale("c0-1", 50, 100, 110), 1},
		{"old bound, old value", stale("c0-1", 80, 100, 110), 0},
		{"absent within a bound that covers a write", stale(nil, 50, 100, 110), 1},
		{"absent within a bound older than every write", stale(nil, 95, 100, 110), 0},
		{"unknown value left to linearizability", stale("c9-9", 50, 100, 110), 0},
	} {
		rep := analyze(t, history(tc.read)...)
		if rep.Summary.BoundViolations != tc.violations || rep.Summary.BoundedReads != 1 {
			t.Fatalf("%s: summary = %+v", tc.name, rep.Summary)
		}
		if tc.violations > 0 && rep.ExitCode() != 1 {
			t.Fatalf("%s: exit %d", tc.name, rep.ExitCode())
		}
	}
	// A write whose outcome is unknown may have produced the value at any time.
	rep := analyze(t,
		write(0, "a", "c0-1", 0, 10).with("status", "unknown"),
		write(0, "a", "c0-2", 20, 30),
		stale("c0-1", 50, 100, 110),
	)
	if rep.Summary.BoundViolations != 0 {
		t.Fatalf("unknown write: summary = %+v", rep.Summary)
	}
}
