package bench

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/puzpuzpuz/xsync/v3"
	"golang.org/x/time/rate"
)

// allowAll is the keyed rate: high enough that every request is admitted, so
// the benchmark measures the lookup and the bucket update.
var allowAll = singleCase{"allow", 1_000_000_000, time.Second, 1_000_000_000}

// keySet returns n distinct keys shaped like user IDs and a visiting order that
// strides through them (not sequential, so caches do not flatter large tables).
// The keys are the ones a server would look up: fresh strings with the same
// bytes as the ones first stored, never the same pointer (see queryKeys).
func keySet(n int) (keys []string, order []int32) {
	keys = make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%08d", i)
	}
	order = make([]int32, n)
	const stride = 7919 // prime, coprime to the powers of ten used for n
	for i := range order {
		order[i] = int32(i * stride % n)
	}
	return keys, order
}

// queryKeys copies keys into new strings, as a server parsing each request's key
// would have them: a lookup must compare bytes, not find the stored pointer.
func queryKeys(keys []string) []string {
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = strings.Clone(k)
	}
	return q
}

// xrateMap is x/time/rate limiters in an xsync map: the usual way to key it.
type xrateMap struct {
	m     *xsync.MapOf[string, *rate.Limiter]
	limit rate.Limit
	burst int
}

func (x *xrateMap) Allow(key string) bool {
	l, ok := x.m.Load(key)
	if !ok {
		l, _ = x.m.LoadOrCompute(key, func() *rate.Limiter { return rate.NewLimiter(x.limit, x.burst) })
	}
	return l.Allow()
}

// heapInUse is the live heap after a full collection.
func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// keyedImpls builds each keyed implementation: it returns the check function.
var keyedImpls = []struct {
	name string
	make func(b *testing.B, n int) func(string) bool
}{
	{"limitgen", func(b *testing.B, n int) func(string) bool {
		r, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: allowAll.tokens, Period: allowAll.period, Burst: allowAll.burst})
		if err != nil {
			b.Fatal(err)
		}
		return atomicbucket.NewTable[string](r, atomicbucket.TableOptions{}).Allow
	}},
	{"xrate-xsync", func(b *testing.B, n int) func(string) bool {
		x := &xrateMap{m: xsync.NewMapOf[string, *rate.Limiter](), limit: rate.Limit(allowAll.perSecond()), burst: int(allowAll.burst)}
		return x.Allow
	}},
	{"sethvargo", func(b *testing.B, n int) func(string) bool {
		take, _ := newSethvargo(b, allowAll) // cached across runs: never closed
		return take
	}},
	{"throttled", func(b *testing.B, n int) func(string) bool {
		return newThrottled(b, allowAll, 0)
	}},
}

// populated is a keyed implementation holding every key of its set.
type populated struct {
	allow       func(string) bool
	keys        []string
	order       []int32
	bytesPerKey float64 // live heap per key after populating (key strings excluded)
}

// keyedSizes are the tables' sizes: 1e3 and 1e6 keys; with -short (make
// test's smoke run, which shows that the benchmarks build and admit) only 1e3,
// whose populating takes milliseconds where 1e6's takes seconds.
func keyedSizes() []int {
	if testing.Short() {
		return []int{1_000}
	}
	return []int{1_000, 1_000_000}
}

// tables caches populated implementations by name and size, so that the
// benchmark functions, which testing calls once per b.N probe, build each once.
var tables = map[string]*populated{}

// table returns im holding n keys, building it on first use. The key strings are
// allocated before the heap is measured and are shared, not copied, so B/key
// counts what the implementation itself holds per key.
func table(b *testing.B, name string, make func(*testing.B, int) func(string) bool, n int) *populated {
	id := fmt.Sprintf("%s/%d", name, n)
	if p, ok := tables[id]; ok {
		return p
	}
	keys, order := keySet(n)
	before := heapInUse()
	allow := make(b, n)
	for _, k := range keys {
		if !allow(k) {
			b.Fatalf("%s denied key %q while populating: the benchmark would not measure a check", name, k)
		}
	}
	p := &populated{allow: allow, keys: queryKeys(keys), order: order, bytesPerKey: float64(heapInUse()-before) / float64(n)}
	tables[id] = p
	return p
}

// BenchmarkKeyed checks keys spread over a table of n keys from one goroutine.
// Every key exists before timing starts; at 1e6 keys it also reports the live
// heap bytes per key (B/key).
func BenchmarkKeyed(b *testing.B) {
	for _, n := range keyedSizes() {
		for _, im := range keyedImpls {
			b.Run(fmt.Sprintf("keys=%.0e/impl=%s", float64(n), im.name), func(b *testing.B) {
				p := table(b, im.name, im.make, n)
				if !p.allow(p.keys[0]) {
					b.Fatalf("%s denies: the benchmark would not measure a check", im.name)
				}
				i := 0
				for b.Loop() {
					sinkBool = p.allow(p.keys[p.order[i]])
					if i++; i == n {
						i = 0
					}
				}
				if n >= 1_000_000 {
					b.ReportMetric(p.bytesPerKey, "B/key")
				}
			})
		}
	}
}

// BenchmarkKeyedParallel is BenchmarkKeyed from every core at once.
func BenchmarkKeyedParallel(b *testing.B) {
	for _, n := range keyedSizes() {
		for _, im := range keyedImpls {
			b.Run(fmt.Sprintf("keys=%.0e/impl=%s", float64(n), im.name), func(b *testing.B) {
				p := table(b, im.name, im.make, n)
				var start atomic.Int64
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(start.Add(int64(n/4+1)) % int64(n)) // each goroutine starts elsewhere
					for pb.Next() {
						p.allow(p.keys[p.order[i]])
						if i++; i == n {
							i = 0
						}
					}
				})
			})
		}
	}
}

// BenchmarkKeyedNewKey is the check of a key the table does not hold: a new
// client, or one that comes back after its bucket was reclaimed (a table
// forgets a key whose bucket has been full for a while, so its return makes a
// bucket again). Every check is of a key the implementation has never seen,
// 2^20 of them a table; then a new table, made while the timer is stopped.
// B/op is what a new key costs in memory at once (its bucket, and for
// limitgen a copy of the key's bytes).
func BenchmarkKeyedNewKey(b *testing.B) {
	n := 1 << 20
	if testing.Short() {
		n = 1 << 12 // make test's smoke run: that it builds and admits, not its speed
	}
	keys, _ := keySet(n)
	keys = queryKeys(keys)
	for _, im := range keyedImpls {
		if im.name == "sethvargo" {
			continue // its store is shared with the other benchmarks and never closed: a new one a table would leave sweepers running
		}
		b.Run("impl="+im.name, func(b *testing.B) {
			allow := im.make(b, n)
			b.ReportAllocs()
			b.ResetTimer()
			j := 0
			for range b.N {
				if j == n {
					b.StopTimer()
					allow, j = im.make(b, n), 0
					runtime.GC()
					b.StartTimer()
				}
				if !allow(keys[j]) {
					b.Fatalf("%s denied a new key", im.name)
				}
				j++
			}
		})
	}
}
