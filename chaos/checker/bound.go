package main

// The age bound of stale reads: a stale read reports how old its answer may
// be ("bound", from X-Consul-LastContact). Every write acknowledged longer
// ago than that before the read was called must be reflected in it.

// BoundViolation is a stale read that returned a value overwritten by a
// write acknowledged before the read's call minus its bound.
type BoundViolation struct {
	Client     int64   `json:"client"`
	Node       string  `json:"node"`
	Key        string  `json:"key"`
	Value      *string `json:"value"`
	Bound      int64   `json:"bound"`
	ReadLine   int     `json:"read_line"`
	NewerLine  int     `json:"newer_line"`
	NewerValue *string `json:"newer_value"`
}

// source is a write that may have produced a value a read saw.
type source struct {
	call, ret int64 // ret: forever for a write whose outcome is unknown
	line      int
	value     *string
}

const forever = int64(^uint64(0) >> 1)

// CheckStaleBounds checks every completed stale read that carries a bound
// against the register writes (write, applied cas, delete) of its key. Let W
// be the writes acknowledged before the read's call minus its bound, and w'
// the one of them called last. The read must show a value whose write had not
// returned before w' was called: an older one was overwritten by w' before
// the moment the read claims to reflect. A value the history does not know
// is left to the linearizability check.
func CheckStaleBounds(recs []Record) (checked int, out []BoundViolation) {
	writes := map[string][]source{}
	for _, r := range recs {
		if r.Status == statusFail {
			continue
		}
		applies := r.Op == opWrite || r.Op == opDelete || (r.Op == opCas && (r.Status == statusUnknown || r.Result))
		if !applies {
			continue
		}
		s := source{call: r.Call, ret: r.Return, line: r.Line, value: r.Value}
		if r.Op == opDelete {
			s.value = nil
		}
		if r.Status == statusUnknown {
			s.ret = forever
		}
		writes[r.Key] = append(writes[r.Key], s)
	}
	for _, r := range recs {
		if r.Op != opRead || r.Mode != modeStale || r.Status != statusOk || r.Bound == nil {
			continue
		}
		checked++
		due := r.Call - *r.Bound
		var newest *source
		for i := range writes[r.Key] {
			w := &writes[r.Key][i]
			if w.ret < due && (newest == nil || w.call > newest.call) {
				newest = w
			}
		}
		if newest == nil {
			continue
		}
		// The latest return among the writes that could have produced what
		// the read saw; the key starts absent, as if deleted at the start.
		seen, known := int64(-1), r.Value == nil
		for _, w := range writes[r.Key] {
			if sameValue(w.value, r.Value) {
				known = true
				if w.ret > seen {
					seen = w.ret
				}
			}
		}
		if known && seen < newest.call {
			out = append(out, BoundViolation{
				Client: r.Client, Node: r.Node, Key: r.Key, Value: r.Value,
				Bound: *r.Bound, ReadLine: r.Line, NewerLine: newest.line,
				NewerValue: newest.value,
			})
		}
	}
	return checked, out
}

func sameValue(a, b *string) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return *a == *b
}
