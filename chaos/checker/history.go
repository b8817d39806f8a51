package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// Operation kinds, statuses and read modes as they appear in a history file.
const (
	opRead   = "read"
	opWrite  = "write"
	opCas    = "cas"
	opDelete = "delete"

	// Multi-key transactions (see txn.go).
	opTxn = "txn"

	// Locks and the sessions that hold them (see lock.go).
	opAcquire        = "acquire"
	opRelease        = "release"
	opRenew          = "renew"
	opSessionCreate  = "session-create"
	opSessionDestroy = "session-destroy"

	statusOk      = "ok"
	statusFail    = "fail"
	statusUnknown = "unknown"

	modeDefault    = "default"
	modeConsistent = "consistent"
	modeStale      = "stale"
)

// Record is one validated line of a history file.
type Record struct {
	Line   int     // 1-based line number in the file
	Client int64   // client id
	Node   string  // node the request was sent to
	Proto  string  // "http" or "resp" (informational)
	Op     string  // read, write, cas, delete, txn, acquire, release, renew, session-*
	Key    string  // txn: the group of keys it works on; session ops: may be empty
	Mode   string  // reads only: default, consistent, stale
	Value  *string // read: value read (nil = absent); write/cas: value written
	Expect *string // cas only: required current value (nil = key must be absent)
	Result bool    // cas, txn, acquire, release with status ok: whether it applied
	Index  *int64  // reads only: ModifyIndex of the record read, if known
	Bound  *int64  // stale reads only: how old the answer said it may be (ns), if it said
	Status string  // ok, fail, unknown
	Call   int64
	Return int64

	Txn     []TxnStep // txn only: its operations, in order
	Session string    // lock and session ops: the session
	Lease   int64     // session-create: how long after a successful create or renew call no other session may take a lock this one holds (ns)
}

// TxnStep is one operation of a transaction: get (Value is what it read when
// the transaction applied), set (Value is written), delete, or
// check-not-exists; or read, one key of a group read in one request (Value is
// what it saw, nil when the key was absent).
type TxnStep struct {
	Verb  string  `json:"verb"`
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// optString is a JSON string that may be null or missing.
type optString struct {
	present bool
	null    bool
	s       string
}

func (o *optString) UnmarshalJSON(b []byte) error {
	o.present = true
	if bytes.Equal(bytes.TrimSpace(b), []byte("null")) {
		o.null = true
		return nil
	}
	return json.Unmarshal(b, &o.s)
}

// ptr returns the string, or nil when null or missing.
func (o optString) ptr() *string {
	if !o.present || o.null {
		return nil
	}
	s := o.s
	return &s
}

type rawRecord struct {
	Client *int64    `json:"client"`
	Node   string    `json:"node"`
	Proto  string    `json:"proto"`
	Op     *string   `json:"op"`
	Key    *string   `json:"key"`
	Mode   *string   `json:"mode"`
	Value  optString `json:"value"`
	Expect optString `json:"expect"`
	Result *bool     `json:"result"`
	Index  *int64    `json:"index"`
	Bound  *int64    `json:"bound"`
	Status *string   `json:"status"`
	Call   *int64    `json:"call"`
	Return *int64    `json:"return"`

	Txn     []TxnStep `json:"txn"`
	Session *string   `json:"session"`
	Lease   *int64    `json:"lease"`
}

// InputError is a malformed history line.
type InputError struct {
	Line int
	Msg  string
}

func (e *InputError) Error() string {
	return fmt.Sprintf("line %d: %s", e.Line, e.Msg)
}

// ParseHistory reads a JSON-lines history. Blank lines are skipped; any other
// malformed line is an *InputError naming its line number.
func ParseHistory(r io.Reader) ([]Record, error) {
	br := bufio.NewReader(r)
	var recs []Record
	for line := 1; ; line++ {
		text, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(text)) > 0 {
			rec, perr := parseLine(text, line)
			if perr != nil {
				return nil, perr
			}
			recs = append(recs, rec)
		}
		if errors.Is(err, io.EOF) {
			return recs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("reading line %d: %w", line, err)
		}
	}
}

func parseLine(text []byte, line int) (Record, error) {
	bad := func(format string, args ...any) (Record, error) {
		return Record{}, &InputError{Line: line, Msg: fmt.Sprintf(format, args...)}
	}
	var raw rawRecord
	if err := json.Unmarshal(text, &raw); err != nil {
		return bad("invalid JSON: %v", err)
	}
	switch {
	case raw.Client == nil:
		return bad("missing \"client\"")
	case raw.Op == nil:
		return bad("missing \"op\"")
	case raw.Key == nil && !sessionOp(*raw.Op):
		return bad("missing \"key\"")
	case raw.Status == nil:
		return bad("missing \"status\"")
	case raw.Call == nil:
		return bad("missing \"call\"")
	case raw.Return == nil:
		return bad("missing \"return\"")
	}
	rec := Record{
		Line:   line,
		Client: *raw.Client,
		Node:   raw.Node,
		Proto:  raw.Proto,
		Op:     *raw.Op,
		Status: *raw.Status,
		Call:   *raw.Call,
		Return: *raw.Return,
	}
	if raw.Key != nil {
		rec.Key = *raw.Key
	}
	if rec.Return < rec.Call {
		return bad("\"return\" (%d) is before \"call\" (%d)", rec.Return, rec.Call)
	}
	switch rec.Status {
	case statusOk, statusFail, statusUnknown:
	default:
		return bad("unknown \"status\" %q (want ok, fail or unknown)", rec.Status)
	}
	switch rec.Op {
	case opRead:
		if raw.Mode == nil {
			return bad("read without \"mode\"")
		}
		rec.Mode = *raw.Mode
		switch rec.Mode {
		case modeDefault, modeConsistent, modeStale:
		default:
			return bad("unknown read \"mode\" %q (want default, consistent or stale)", rec.Mode)
		}
		rec.Value = raw.Value.ptr()
		rec.Index = raw.Index
		rec.Bound = raw.Bound
	case opWrite:
		rec.Value = raw.Value.ptr()
		if rec.Value == nil && rec.Status != statusFail {
			return bad("write without a \"value\"")
		}
	case opCas:
		rec.Value = raw.Value.ptr()
		rec.Expect = raw.Expect.ptr()
		if rec.Value == nil && rec.Status != statusFail {
			return bad("cas without a new \"value\"")
		}
		if rec.Status == statusOk {
			if raw.Result == nil {
				return bad("completed cas without a \"result\"")
			}
			rec.Result = *raw.Result
		}
	case opDelete:
	case opTxn:
		if len(raw.Txn) == 0 {
			return bad("txn without its \"txn\" operations")
		}
		for i, step := range raw.Txn {
			switch step.Verb {
			case verbGet, verbDelete, verbCheckNotExists, verbRead:
			case verbSet:
				if step.Value == nil {
					return bad("txn operation %d: set without a \"value\"", i)
				}
			default:
				return bad("txn operation %d: unknown \"verb\" %q (want get, set, delete, check-not-exists or read)", i, step.Verb)
			}
		}
		rec.Txn = raw.Txn
		if rec.Status == statusOk {
			if raw.Result == nil {
				return bad("completed txn without a \"result\"")
			}
			rec.Result = *raw.Result
		}
	case opAcquire, opRelease, opRenew, opSessionCreate, opSessionDestroy:
		if raw.Session == nil || *raw.Session == "" {
			return bad("%s without a \"session\"", rec.Op)
		}
		rec.Session = *raw.Session
		if (rec.Op == opAcquire || rec.Op == opRelease) && rec.Status == statusOk {
			if raw.Result == nil {
				return bad("completed %s without a \"result\"", rec.Op)
			}
			rec.Result = *raw.Result
		}
		if rec.Op == opSessionCreate && rec.Status == statusOk {
			if raw.Lease == nil || *raw.Lease <= 0 {
				return bad("completed session-create without a positive \"lease\"")
			}
			rec.Lease = *raw.Lease
		}
	default:
		return bad("unknown \"op\" %q (want read, write, cas, delete, txn, acquire, release, renew, session-create or session-destroy)", rec.Op)
	}
	return rec, nil
}

// sessionOp tells the operations that need no key.
func sessionOp(op string) bool {
	return op == opRenew || op == opSessionCreate || op == opSessionDestroy
}

// registerOp tells the operations of the single-key register model.
func registerOp(op string) bool {
	return op == opRead || op == opWrite || op == opCas || op == opDelete
}
