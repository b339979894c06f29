package fuzz

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// impl is one implementation under test, driven with explicit times. Keys are
// small strings; implementations with other key types map them.
type impl interface {
	AllowN(key string, t, cost int64) Decision
	Allow(key string, t int64) bool
	Peek(key string, t, cost int64) Decision
	Refund(key string, t, cost int64)
	Reserve(key string, t, cost int64, maxWait time.Duration) Reservation
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
	*Reference
	res []Reservation
	// The reference's last answers, which the other implementations are compared to.
	lastAllow    bool
	lastDecision Decision
	lastRes      Reservation
	lastN        int
}

func (r *refImpl) Allow(key string, t int64) bool { return r.AllowN(key, t, 1).Allowed }
func (r *refImpl) Reserve(key string, t, cost int64, maxWait time.Duration) Reservation {
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

func (rs *reservations) add(key string, cost int64, r atomicbucket.Reservation) Reservation {
	rs.mu.Lock()
	rs.list = append(rs.list, r)
	rs.mu.Unlock()
	return Reservation{OK: r.OK, Delay: r.Delay, RetryAfter: r.RetryAfter, Key: key, Cost: cost, At: r.At()}
}

func (rs *reservations) cancel(id int, t int64) bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.list[id].CancelAt(t)
}

// bucketImpl is a single Bucket, created at its first operation. It has one key.
type bucketImpl struct {
	rule atomicbucket.Rule
	b    *atomicbucket.Bucket
	rs   reservations
}

func (b *bucketImpl) get(t int64) *atomicbucket.Bucket {
	if b.b == nil {
		b.b = atomicbucket.NewBucketAt(b.rule, t)
	}
	return b.b
}
func (b *bucketImpl) AllowN(_ string, t, cost int64) Decision { return b.get(t).AllowNAt(t, cost) }
func (b *bucketImpl) Allow(_ string, t int64) bool            { return b.get(t).AllowAt(t) }
func (b *bucketImpl) Peek(_ string, t, cost int64) Decision {
	if b.b == nil { // the reference does not create on Peek either
		return atomicbucket.NewBucketAt(b.rule, t).PeekAt(t, cost)
	}
	return b.b.PeekAt(t, cost)
}
func (b *bucketImpl) Refund(_ string, t, cost int64) {
	if b.b != nil {
		b.b.RefundAt(t, cost)
	}
}
func (b *bucketImpl) Reserve(key string, t, cost int64, maxWait time.Duration) Reservation {
	return b.rs.add(key, cost, b.get(t).ReserveAt(t, cost, maxWait))
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

func (m *tableImpl[K]) AllowN(k string, t, cost int64) Decision {
	return m.t.AllowNAt(m.key(k), t, cost)
}
func (m *tableImpl[K]) Allow(k string, t int64) bool          { return m.t.AllowAt(m.key(k), t) }
func (m *tableImpl[K]) Peek(k string, t, cost int64) Decision { return m.t.PeekAt(m.key(k), t, cost) }
func (m *tableImpl[K]) Refund(k string, t, cost int64)        { m.t.RefundAt(m.key(k), t, cost) }
func (m *tableImpl[K]) Reserve(k string, t, cost int64, maxWait time.Duration) Reservation {
	return m.rs.add(k, cost, m.t.ReserveAt(m.key(k), t, cost, maxWait))
}
func (m *tableImpl[K]) Cancel(id int, t int64) bool { return m.rs.cancel(id, t) }
func (m *tableImpl[K]) Sweep(t int64) int           { return m.t.SweepAt(t) }
func (m *tableImpl[K]) Len() int                    { return int(m.t.Len()) }

// intKey maps a test key to an int64 key, one to one for the short keys tests use.
func intKey(s string) int64 {
	var v int64
	for _, c := range []byte(s) {
		v = v<<8 | int64(c)
	}
	return v
}

// impls returns every implementation for c, each fresh, by name. single says
// whether the operations use one key and no cap or sweep, so that a single Bucket
// is a valid implementation too.
func impls(tb testing.TB, c config, single bool) map[string]impl {
	r := c.rule(tb)
	m := map[string]impl{
		"reference": &refImpl{Reference: NewReference(ParamsOf(&r, c.opts.MaxKeys, c.opts.AtCap))},
		"table=string": &tableImpl[string]{
			t: atomicbucket.NewTable[string](r, c.opts), key: func(s string) string { return s },
		},
		"table=int64": &tableImpl[int64]{t: atomicbucket.NewTable[int64](r, c.opts), key: intKey},
	}
	if single {
		m["bucket"] = &bucketImpl{rule: r}
	}
	return m
}

// implNames is the order implementations are run and reported in.
var implNames = []string{"reference", "bucket", "table=string", "table=int64"}

func describe(d Decision) string {
	ra := fmt.Sprint(d.RetryAfter)
	if d.RetryAfter == atomicbucket.Never {
		ra = "never"
	}
	return fmt.Sprintf("{allowed=%v remaining=%d retry=%s reset=%v}", d.Allowed, d.Remaining, ra, d.Reset)
}
