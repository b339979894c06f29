// Package pace is for clients that obey a limiter's answers, whatever the
// door: a Pacer keeps what the last answers said (the RateLimit fields, a
// denial's wait) and holds each request until it may go. limithttp's
// Transport and limitgrpc's client interceptors are built on it.
package pace

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Pacer is what a client that obeys a limiter's answers keeps, whatever the
// door: how many requests it may still send (the RateLimit field's r), and
// when it may send again once none are left (its t, or a denial's wait:
// RetryInfo, grpc-retry-pushback-ms, Retry-After). A client asks Wait before
// each request and tells Observe what came back. The zero Pacer knows
// nothing and lets every request go until an answer says otherwise. Safe
// for concurrent use; requests in flight at once are each counted against r
// as they are sent.
//
// When r is 0, the client waits t, or less when the RateLimit-Policy member
// of the same rule says its quota q refills in w seconds: w/q is never less
// than a token's time at the rule's rate, so the client comes back for one
// token when it is there. t and w are whole seconds: a rule whose burst
// refills in less than a second (10/s, burst 1: q=1;w=1) tells a client to
// come back a second later, and the client then sends less than the rule
// admits; rules whose burst is a whole number of seconds' worth are paced
// to their rate. A Pacer paces requests of cost 1.
type Pacer struct {
	// Now and Sleep, when set, are the clock and the wait (tests drive a
	// Pacer through time with them); time.Now and a timer otherwise.
	Now   func() time.Time
	Sleep func(ctx context.Context, d time.Duration) error

	mu    sync.Mutex
	left  int64     // requests that may still be sent; −1 when no answer said
	until time.Time // no request before this
}

func (p *Pacer) now() time.Time {
	if p.Now != nil {
		return p.Now()
	}
	return time.Now()
}

func (p *Pacer) sleep(ctx context.Context, d time.Duration) error {
	if p.Sleep != nil {
		return p.Sleep(ctx, d)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Wait blocks until a request may be sent, and counts it; it returns ctx's
// error when ctx ends first (the request must not be sent then).
func (p *Pacer) Wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		now := p.now()
		if d := p.until.Sub(now); d > 0 {
			p.mu.Unlock()
			if err := p.sleep(ctx, d); err != nil {
				return err
			}
			continue
		}
		switch {
		case p.left > 0:
			p.left--
		case p.left == 0 && !p.until.IsZero():
			// The wait the last answer asked for is over: what is left now
			// is unknown until the next answer.
			p.left = -1
		}
		p.mu.Unlock()
		return nil
	}
}

// Observe reads an answer: policy and rateLimit are its RateLimit-Policy
// and RateLimit fields' values ("" when it has none), and wait, when
// positive, the wait a denial asked for. A denial that names no wait leaves
// what the fields say.
func (p *Pacer) Observe(policy, rateLimit string, denied bool, wait time.Duration) {
	r, t, ok := ParseRateLimit(rateLimit)
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	if denied && wait > 0 {
		// A denial's own wait is exact (to the millisecond), where t is
		// whole seconds.
		p.left = 0
		p.until = later(p.until, now.Add(wait))
		return
	}
	if ok {
		p.left = r
		if r == 0 {
			next := time.Duration(t) * time.Second
			if q, w, found := policyOf(policy, memberName(rateLimit)); found && q > 0 {
				next = min(next, (time.Duration(w)*time.Second+time.Duration(q)-1)/time.Duration(q))
			}
			p.until = later(p.until, now.Add(next))
		}
	}
	if denied && !ok {
		p.left = -1 // a denial that says nothing: nothing to pace by
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// memberName is the name of a field's first member, as written ("\"A\"").
func memberName(v string) string {
	v = strings.TrimLeft(v, " \t")
	if i := memberEnd(v); i > 0 {
		return v[:i]
	}
	return ""
}

// memberEnd is where the value of a list member at the start of v ends:
// after its string's closing quote, or its token; −1 when a string is not
// closed.
func memberEnd(v string) int {
	if v == "" {
		return -1
	}
	i := 0
	if v[0] == '"' {
		for i = 1; i < len(v) && v[i] != '"'; i++ {
			if v[i] == '\\' {
				i++
			}
		}
		if i >= len(v) {
			return -1
		}
		return i + 1
	}
	for i < len(v) && v[i] != ';' && v[i] != ',' {
		i++
	}
	return i
}

// policyOf finds the RateLimit-Policy member named name and returns its q
// and w.
func policyOf(policy, name string) (q, w int64, ok bool) {
	for policy != "" && name != "" {
		policy = strings.TrimLeft(policy, " \t")
		end := memberEnd(policy)
		if end < 0 {
			return 0, 0, false
		}
		member, rest := policy, ""
		if j := strings.IndexByte(policy[end:], ','); j >= 0 {
			member, rest = policy[:end+j], policy[end+j+1:]
		}
		if policy[:end] == name {
			q, w = -1, -1
			for _, param := range strings.Split(member[end:], ";")[1:] {
				k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
				n, err := strconv.ParseInt(val, 10, 64)
				switch {
				case k == "q" && err == nil && n > 0:
					q = n
				case k == "w" && err == nil && n > 0:
					w = n
				}
			}
			return q, w, q > 0 && w > 0
		}
		policy = rest
	}
	return 0, 0, false
}

// ParseRateLimit reads r and t from a RateLimit field's value, a Structured
// Fields list whose first member is read: "Name";r=17;t=4. False when the
// value has no such member, or r or t is missing, negative or not an
// integer.
func ParseRateLimit(v string) (r, t int64, ok bool) {
	v = strings.TrimLeft(v, " \t")
	i := memberEnd(v)
	if i < 0 {
		return 0, 0, false
	}
	rest := v[i:]
	if j := strings.IndexByte(rest, ','); j >= 0 {
		rest = rest[:j]
	}
	r, t = -1, -1
	for rest != "" {
		var param string
		if rest[0] != ';' {
			return 0, 0, false
		}
		rest = rest[1:]
		param, rest, _ = strings.Cut(rest, ";")
		if rest != "" {
			rest = ";" + rest
		}
		k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
		n, err := strconv.ParseInt(val, 10, 64)
		switch {
		case k == "r" && err == nil && n >= 0:
			r = n
		case k == "t" && err == nil && n >= 0:
			t = n
		}
	}
	if r < 0 || t < 0 {
		return 0, 0, false
	}
	return r, t, true
}
