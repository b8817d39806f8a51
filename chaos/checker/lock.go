package main

import "sort"

// The lock check. A session's lease is the promise the server makes on each
// successful create or renew: no other session takes a lock this one holds
// until the lease has run from that call (for Consul's sessions: the TTL with
// its grace, then the lock-delay). So a client that acquired a lock certainly
// holds it from the acquire's return until the first of: its release or the
// session's destroy being called, or the lease of its last renewal running
// out (renewals chain only while each comes before the lease it extends ran
// out). Two sessions' certain holds of one key must never overlap; a holder
// that stops renewing (paused) keeps its hold until its lease runs out.

// LockHold is a span (ns on the history's clock) during which a session
// certainly held a lock.
type LockHold struct {
	Key     string `json:"key"`
	Session string `json:"session"`
	Client  int64  `json:"client"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	Line    int    `json:"line"` // the acquire's line
}

// LockViolation is two sessions' certain holds of one key that overlap.
type LockViolation struct {
	Key    string   `json:"key"`
	First  LockHold `json:"first"`
	Second LockHold `json:"second"`
}

// sessionLife is what the history says of one session.
type sessionLife struct {
	lease    int64
	renewals []int64 // calls of the successful create and renews, in order
	ends     []Record
}

// CheckLocks derives the certain holds from the history and returns them
// with the pairs that overlap.
func CheckLocks(recs []Record) ([]LockHold, []LockViolation) {
	sessions := map[string]*sessionLife{}
	life := func(id string) *sessionLife {
		s, ok := sessions[id]
		if !ok {
			s = &sessionLife{}
			sessions[id] = s
		}
		return s
	}
	for _, r := range recs {
		switch {
		case r.Op == opSessionCreate && r.Status == statusOk:
			s := life(r.Session)
			s.lease = r.Lease
			s.renewals = append(s.renewals, r.Call)
		case r.Op == opRenew && r.Status == statusOk:
			s := life(r.Session)
			s.renewals = append(s.renewals, r.Call)
		case r.Op == opRelease || r.Op == opSessionDestroy:
			// Whatever its outcome: ending a hold early only checks less.
			s := life(r.Session)
			s.ends = append(s.ends, r)
		}
	}
	for _, s := range sessions {
		sort.Slice(s.renewals, func(i, j int) bool { return s.renewals[i] < s.renewals[j] })
	}

	var holds []LockHold
	for _, r := range recs {
		if r.Op != opAcquire || r.Status != statusOk || !r.Result {
			continue
		}
		s := sessions[r.Session]
		if s == nil || s.lease == 0 {
			continue
		}
		end := int64(infinity)
		for _, e := range s.ends {
			if e.Call >= r.Call && e.Call < end && (e.Op == opSessionDestroy || e.Key == r.Key) {
				end = e.Call
			}
		}
		// The last renewal before the acquire returned, then those that
		// follow while the lease still runs.
		covered := int64(-1)
		for _, t := range s.renewals {
			switch {
			case t <= r.Return:
				covered = t + s.lease
			case t <= covered && t < end:
				covered = t + s.lease
			}
		}
		to := min(end, covered)
		if to > r.Return {
			holds = append(holds, LockHold{
				Key: r.Key, Session: r.Session, Client: r.Client,
				From: r.Return, To: to, Line: r.Line,
			})
		}
	}

	sort.Slice(holds, func(i, j int) bool {
		if holds[i].Key != holds[j].Key {
			return holds[i].Key < holds[j].Key
		}
		return holds[i].From < holds[j].From
	})
	var violations []LockViolation
	for i := range holds {
		for j := i + 1; j < len(holds) && holds[j].Key == holds[i].Key; j++ {
			a, b := holds[i], holds[j]
			if a.Session != b.Session && b.From < a.To {
				violations = append(violations, LockViolation{Key: a.Key, First: a, Second: b})
			}
		}
	}
	return holds, violations
}
