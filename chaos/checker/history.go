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

	statusOk      = "ok"
	statusFail    = "fail"
	statusUnknown = "unknown"

	modeDefault    = "default"
	modeConsistent = "consistent"
	modeStale      = "stale"
)

// Record is one validated line of a history file.
type Record struct {
	Line   int    // 1-based line number in the file
	Client int64  // client id
	Node   string // node the request was sent to
	Proto  string // "http" or "resp" (informational)
	Op     string // read, write, cas, delete
	Key    string
	Mode   string  // reads only: default, consistent, stale
	Value  *string // read: value read (nil = absent); write/cas: value written
	Expect *string // cas only: required current value (nil = key must be absent)
	Result bool    // cas only, status ok: whether it applied
	Index  *int64  // reads only: ModifyIndex of the record read, if known
	Status string  // ok, fail, unknown
	Call   int64
	Return int64
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
	Status *string   `json:"status"`
	Call   *int64    `json:"call"`
	Return *int64    `json:"return"`
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
	case raw.Key == nil:
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
		Key:    *raw.Key,
		Status: *raw.Status,
		Call:   *raw.Call,
		Return: *raw.Return,
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
	default:
		return bad("unknown \"op\" %q (want read, write, cas or delete)", rec.Op)
	}
	return rec, nil
}
