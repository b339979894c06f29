package limithttp

import (
	"unsafe"

	"github.com/limitgen/limitgen/internal/memo"
	"github.com/limitgen/limitgen/internal/wire"
	"github.com/limitgen/limitgen/verdict"
)

// The values of an allowed response's fields: RateLimit-Policy (a constant
// of the route) and RateLimit ("Name";r=R;t=T). A header map keeps them after
// the request, so each response's were an allocation of their own, a sixth of
// an allowed request's overhead with the collector's share. But a rule's
// fields take few values: r is at most the burst and t is, for a given r,
// one or two whole seconds. So Respond keeps the values it made in a small
// table of its Config, by rule, route, r and t, and answers a request that
// needs the same fields with the same strings and the same []string: an
// allowed response allocates only when its fields are new to the table (then
// one entry, which replaces the slot's last): internal/memo.
//
// The values are shared between responses: a handler may replace a field
// (Header.Set, Header.Del, Header.Add) but must not write into the slice a
// field holds. Nothing in net/http does.

// valueEntry is an allowed response's field values; nothing writes to one
// after it is published.
type valueEntry struct {
	policy   *verdict.Policy
	policies string // the route's RateLimit-Policy value
	r, t     int64
	vals     [2]string // RateLimit-Policy, RateLimit
	buf      [32]byte  // RateLimit's bytes, when they fit
}

// allowedValues returns the values of an allowed response's two fields.
func (c *Config) allowedValues(res *verdict.Result, r, t int64) *[2]string {
	slot := c.values.Slot(memo.Hash(res.Policy, r, t, 0))
	if e := slot.Load(); e != nil && e.r == r && e.t == t && e.policy == res.Policy && e.policies == res.Policies {
		return &e.vals
	}
	e := &valueEntry{policy: res.Policy, policies: res.Policies, r: r, t: t}
	b := verdict.AppendRateLimit(e.buf[:0], res.Policy, r, t)
	// b is e.buf, or a copy that append made on the heap; nothing writes to
	// it after this.
	e.vals[0], e.vals[1] = res.Policies, unsafe.String(unsafe.SliceData(b), len(b))
	slot.Store(e)
	return &e.vals
}

// numValues is the most header values Respond sets: RateLimit-Policy,
// RateLimit, Retry-After, three legacy fields, Content-Type and
// X-Content-Type-Options.
const numValues = 8

// fieldBuf holds the numbers of a typical response ("PerUser";r=999998;t=1
// and the legacy values); a longer one (a long policy name) spills to a
// second allocation.
const fieldBuf = 64

// fullEntry is the field values of any other response (a denial, or another
// HeaderStyle): names[i] is set to vals[i:i+1], and the two values after the
// last name are the problem body's Content-Type and X-Content-Type-Options.
type fullEntry struct {
	policy      *verdict.Policy
	policies    string
	r, t, retry int64
	style       HeaderStyle
	names       []string // a fieldNames list
	vals        [numValues]string
	buf         [fieldBuf]byte
}

// fieldNames are the fields a response sets, in the order setFields writes
// their values: by style and whether it has a Retry-After.
var fieldNames = [3][2][]string{
	HeadersIETF:   {{HeaderPolicy, HeaderRateLimit}, {HeaderPolicy, HeaderRateLimit, HeaderRetryAfter}},
	HeadersLegacy: {{HeaderPolicy, HeaderRateLimit, HeaderLegacyLimit, HeaderLegacyRemain, HeaderLegacyReset}, {HeaderPolicy, HeaderRateLimit, HeaderRetryAfter, HeaderLegacyLimit, HeaderLegacyRemain, HeaderLegacyReset}},
	HeadersNone:   {{}, {HeaderRetryAfter}},
}

// fullValues returns the values of a response's fields other than an
// allowed one's under HeadersIETF.
func (c *Config) fullValues(res *verdict.Result, r, t, retry int64) *fullEntry {
	style := c.Headers
	if style > HeadersNone {
		style = HeadersIETF
	}
	slot := c.full.Slot(memo.Hash(res.Policy, r, t, uint64(retry)<<48^uint64(style)))
	if e := slot.Load(); e != nil && e.r == r && e.t == t && e.retry == retry && e.style == style && e.policy == res.Policy && e.policies == res.Policies {
		return e
	}
	e := &fullEntry{policy: res.Policy, policies: res.Policies, r: r, t: t, retry: retry, style: style}
	hasRetry := 0
	if retry >= 0 {
		hasRetry = 1
	}
	e.names = fieldNames[style][hasRetry]
	b := e.buf[:0]
	var ends [numValues]int // where each number-bearing value ends in b
	n := 0
	mark := func() { ends[n], n = len(b), n+1 }
	if style != HeadersNone {
		b = verdict.AppendRateLimit(b, res.Policy, r, t)
		mark()
	}
	if retry >= 0 {
		b = wire.AppendDecimal(b, retry)
		mark()
	}
	if style == HeadersLegacy {
		b = wire.AppendDecimal(b, res.Policy.Quota)
		mark()
		b = wire.AppendDecimal(b, r)
		mark()
		b = wire.AppendDecimal(b, t)
		mark()
	}
	// b is e.buf, or a copy that append made on the heap; nothing writes to
	// it after this, so the strings may share its bytes.
	str := unsafe.String(unsafe.SliceData(b), len(b))
	i := 0
	if style != HeadersNone {
		e.vals[0], i = res.Policies, 1
	}
	start := 0
	for k := range n {
		e.vals[i] = str[start:ends[k]]
		start = ends[k]
		i++
	}
	if i != len(e.names) {
		panic("limithttp: field values out of step with their names")
	}
	e.vals[i], e.vals[i+1] = problemType, "nosniff"
	slot.Store(e)
	return e
}
