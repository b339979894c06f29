package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/puzpuzpuz/xsync/v3"
	"golang.org/x/sync/semaphore"
)

// semaphoreMap is a golang.org/x/sync/semaphore per key in an xsync map: the
// usual way to hold N in flight per key in Go. It has no maximum hold: a slot
// whose release never comes is lost.
type semaphoreMap struct {
	m *xsync.MapOf[string, *semaphore.Weighted]
	n int64
}

func (s *semaphoreMap) get(key string) *semaphore.Weighted {
	w, ok := s.m.Load(key)
	if !ok {
		w, _ = s.m.LoadOrCompute(key, func() *semaphore.Weighted { return semaphore.NewWeighted(s.n) })
	}
	return w
}

// BenchmarkInFlight is an in-flight rule's acquisition and release (one op:
// both) beside a bucket's check of the same key (a request's whole cost under
// a rate rule) and beside a semaphore per key, at 1 and 1e3 keys, 4 slots a
// key, every acquisition admitted. impl=bucket is atomicbucket's keyed check,
// the figure the in-flight pair is held to (≤ 2×).
func BenchmarkInFlight(b *testing.B) {
	const slots = 4
	for _, n := range []int{1, 1000} {
		keys, order := keySet(n)
		keys = queryKeys(keys)
		impls := []struct {
			name string
			op   func(key string) bool
		}{
			{"limitgen", func() func(string) bool {
				r, err := atomicslot.NewRule(slots, time.Minute)
				if err != nil {
					b.Fatal(err)
				}
				t := atomicslot.NewTable[string](r, atomicbucket.TableOptions{})
				return func(key string) bool {
					s, d := t.Acquire(key)
					return d.Allowed && s.Release()
				}
			}()},
			{"bucket", func() func(string) bool {
				r, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: allowAll.tokens, Period: allowAll.period, Burst: allowAll.burst})
				if err != nil {
					b.Fatal(err)
				}
				t := atomicbucket.NewTable[string](r, atomicbucket.TableOptions{})
				return func(key string) bool { return t.AllowNAt(key, atomicbucket.Now(), 1).Allowed }
			}()},
			{"semaphore", func() func(string) bool {
				s := &semaphoreMap{m: xsync.NewMapOf[string, *semaphore.Weighted](), n: slots}
				return func(key string) bool {
					w := s.get(key)
					if !w.TryAcquire(1) {
						return false
					}
					w.Release(1)
					return true
				}
			}()},
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("keys=%.0e/impl=%s", float64(n), im.name), func(b *testing.B) {
				for _, k := range keys {
					if !im.op(k) {
						b.Fatalf("%s denies: the benchmark would not measure an admission", im.name)
					}
				}
				i := 0
				for b.Loop() {
					sinkBool = im.op(keys[order[i]])
					if i++; i == n {
						i = 0
					}
				}
			})
		}
	}
}

// TestSemaphoreMapHoldsN checks the peer's semantics: N in flight per key,
// the next refused until a release.
func TestSemaphoreMapHoldsN(t *testing.T) {
	s := &semaphoreMap{m: xsync.NewMapOf[string, *semaphore.Weighted](), n: 2}
	w := s.get("k")
	if !w.TryAcquire(1) || !w.TryAcquire(1) || w.TryAcquire(1) {
		t.Fatal("a semaphore of 2 did not hold exactly 2")
	}
	w.Release(1)
	if err := w.Acquire(context.Background(), 1); err != nil {
		t.Fatal(err)
	}
}
