package fuzz

import (
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/reference"
)

// impl is one implementation under test, driven with explicit times. Keys are
// small strings; implementations with other key types map them.
type impl interface {
	AllowN(key string, t, cost int64) reference.Decision
	Allow(key string, t int64) bool
	Peek(key string, t, cost int64) reference.Decision
	Refund(key string, t, cost int64)
	Settle(key string, t, estimate, actual int64) (forgiven int64)
	Reserve(key string, t, cost int64, maxWait time.Duration) reference.Reservation
	Cancel(id int, t int64) bool // id: the index of the reservation, in order made
	Sweep(t int64) int
	Len() int
}

// config is a rule and table options, the input every implementation is built from.
type config struct {
	limit atomicbucket.Limit
	opts  atomicbucket.TableOptions
}

func (c config) rule(tb testing.TB) atomicbucket.Rule {
	tb.Helper()
	r, err := atomicbucket.NewRule(c.limit)
	if err != nil {
		tb.Fatalf("NewRule(%+v): %v", c.limit, err)
	}
	return r
}

// refImpl adapts the reference.
type refImpl struct {
	*reference.Reference
	res []reference.Reservation
	// The reference's last answers, which the other implementations are compared to.
	lastAllow    bool
	lastDecision reference.Decision
	lastRes      reference.Reservation
	lastN        int
}

func (r *refImpl) Allow(key string, t int64) bool { return r.AllowN(key, t, 1).Allowed }
func (r *refImpl) Reserve(key string, t, cost int64, maxWait time.Duration) reference.Reservation {
	res := r.Reference.Reserve(key, t, cost, maxWait)
	r.res = append(r.res, res)
	return res
}
func (r *refImpl) Cancel(id int, t int64) bool { return r.Reference.Cancel(&r.res[id], t) }

// reservations keeps an implementation's reservations for Cancel; safe for
// concurrent use, as the concurrency tests reserve from many goroutines.
type reservations struct {
	mu   sync.Mutex
	list []atomicbucket.Reservation
}

func (rs *reservations) add(key string, cost int64, r atomicbucket.Reservation) reference.Reservation {
	rs.mu.Lock()
	rs.list = append(rs.list, r)
	rs.mu.Unlock()
	return reference.Reservation{OK: r.OK, Delay: r.Delay, RetryAfter: r.RetryAfter, Key: key, Cost: cost, At: int64(r.At())}
}

func (rs *reservations) cancel(id int, t int64) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.list[id].CancelAt(atomicbucket.Time(t))
}

// bucketImpl is a single Bucket, created at its first operation. It has one key.
type bucketImpl struct {
	rule atomicbucket.Rule
	b    *atomicbucket.Bucket
	rs   reservations
}

// get returns the bucket, creating it at t if the operation could take tokens:
// the reference creates a bucket only for those.
func (b *bucketImpl) get(t, cost int64) *atomicbucket.Bucket {
	if b.b == nil {
		fresh := atomicbucket.NewBucketAt(b.rule, atomicbucket.Time(t))
		if cost < 1 || cost > b.rule.Limit().Burst {
			return fresh
		}
		b.b = fresh
	}
	return b.b
}
func (b *bucketImpl) AllowN(_ string, t, cost int64) reference.Decision {
	return b.get(t, cost).AllowNAt(atomicbucket.Time(t), cost)
}
func (b *bucketImpl) Allow(_ string, t int64) bool { return b.get(t, 1).AllowAt(atomicbucket.Time(t)) }
func (b *bucketImpl) Peek(_ string, t, cost int64) reference.Decision {
	return b.get(t, 0).PeekAt(atomicbucket.Time(t), cost)
}
func (b *bucketImpl) Refund(_ string, t, cost int64) {
	if b.b != nil {
		b.b.RefundAt(atomicbucket.Time(t), cost)
	}
}
func (b *bucketImpl) Settle(_ string, t, estimate, actual int64) int64 {
	if actual > estimate && estimate >= 0 {
		b.get(t, 1) // a charge makes the bucket, as the reference's
	}
	if b.b == nil {
		return 0
	}
	return b.b.SettleAt(atomicbucket.Time(t), estimate, actual)
}
func (b *bucketImpl) Reserve(key string, t, cost int64, maxWait time.Duration) reference.Reservation {
	tracked := b.b != nil
	res := b.get(t, cost).ReserveAt(atomicbucket.Time(t), cost, maxWait)
	got := b.rs.add(key, cost, res)
	if !tracked && b.b == nil {
		// Answered from a bucket that was not kept (it took nothing): there is
		// nothing to cancel, as for a table key without a bucket.
		b.rs.list[len(b.rs.list)-1] = atomicbucket.Reservation{}
	}
	return got
}
func (b *bucketImpl) Cancel(id int, t int64) bool { return b.rs.cancel(id, t) }
func (b *bucketImpl) Sweep(int64) int             { return 0 }
func (b *bucketImpl) Len() int {
	if b.b == nil {
		return 0
	}
	return 1
}

// tableImpl is a Table with keys of type K, mapped from the test's string keys.
type tableImpl[K comparable] struct {
	t   *atomicbucket.Table[K]
	key func(string) K
	rs  reservations
}

func (m *tableImpl[K]) AllowN(k string, t, cost int64) reference.Decision {
	return m.t.AllowNAt(m.key(k), atomicbucket.Time(t), cost)
}
func (m *tableImpl[K]) Allow(k string, t int64) bool {
	return m.t.AllowAt(m.key(k), atomicbucket.Time(t))
}
func (m *tableImpl[K]) Peek(k string, t, cost int64) reference.Decision {
	return m.t.PeekAt(m.key(k), atomicbucket.Time(t), cost)
}
func (m *tableImpl[K]) Refund(k string, t, cost int64) {
	m.t.RefundAt(m.key(k), atomicbucket.Time(t), cost)
}
func (m *tableImpl[K]) Settle(k string, t, estimate, actual int64) int64 {
	return m.t.SettleAt(m.key(k), atomicbucket.Time(t), estimate, actual)
}
func (m *tableImpl[K]) Reserve(k string, t, cost int64, maxWait time.Duration) reference.Reservation {
	return m.rs.add(k, cost, m.t.ReserveAt(m.key(k), atomicbucket.Time(t), cost, maxWait))
}
func (m *tableImpl[K]) Cancel(id int, t int64) bool { return m.rs.cancel(id, t) }
func (m *tableImpl[K]) Sweep(t int64) int           { return m.t.SweepAt(atomicbucket.Time(t)) }
func (m *tableImpl[K]) Len() int                    { return int(m.t.Len()) }

// intKey maps a test key to an int64 key, one to one for the short keys tests
// use: a decimal key is its value (so that it places its grid as the string
// does), any other its bytes.
func intKey(s string) int64 {
	if v, err := strconv.ParseInt(s, 10, 64); err == nil {
		return v
	}
	var v int64
	for _, c := range []byte(s) {
		v = v<<8 | int64(c)
	}
	return v
}

// impls returns every implementation for c, each fresh, in groups that each
// hold the reference they must equal, under "reference". single says whether
// the operations use one key and no cap or sweep, so that a single Bucket is a
// valid implementation too.
//
// Anchored interval grids are placed by the key (by a table) or at creation (by
// a single Bucket), so each way gets a reference of its own; under every other
// rule one reference serves all.
func impls(tb testing.TB, c config, single bool) []map[string]impl {
	r := c.rule(tb)
	keyed := reference.ParamsOf(&r, c.opts.MaxKeys, c.opts.AllowAtCap)
	strTable := &tableImpl[string]{t: atomicbucket.NewTable[string](r, c.opts), key: func(s string) string { return s }}
	intTable := &tableImpl[int64]{t: atomicbucket.NewTable[int64](r, c.opts), key: intKey}
	if keyed.KeyAnchor == nil {
		m := map[string]impl{"reference": &refImpl{Reference: reference.NewReference(keyed)}, "table=string": strTable, "table=int64": intTable}
		if single {
			m["bucket"] = &bucketImpl{rule: r}
		}
		return []map[string]impl{m}
	}
	intParams := keyed
	intParams.KeyAnchor = func(k string) int64 { return r.KeyAnchor(strconv.FormatInt(intKey(k), 10)) }
	groups := []map[string]impl{
		{"reference": &refImpl{Reference: reference.NewReference(keyed)}, "table=string": strTable},
		{"reference": &refImpl{Reference: reference.NewReference(intParams)}, "table=int64": intTable},
	}
	if single {
		groups = append(groups, map[string]impl{"reference": &refImpl{Reference: reference.NewReference(reference.SingleParamsOf(&r))}, "bucket": &bucketImpl{rule: r}})
	}
	return groups
}

// implNames is the order implementations are run and reported in.
var implNames = []string{"reference", "bucket", "table=string", "table=int64"}

func describe(d reference.Decision) string {
	ra := fmt.Sprint(d.RetryAfter)
	if d.RetryAfter == atomicbucket.Never {
		ra = "never"
	}
	return fmt.Sprintf("{allowed=%v remaining=%d retry=%s reset=%v}", d.Allowed, d.Remaining, ra, d.Reset)
}
