package bench

import (
	"fmt"
	"testing"

	"github.com/limitgen/limitgen/atomicbucket"
)

// BenchmarkSettle is what a settled cost costs locally, at 1 and 1e3 keys:
// impl=check is a plain check (AllowNAt at cost 5), impl=settle a
// settlement alone (SettleAt, charging 1 above the estimate and giving 1
// back in turn: the bucket's word changes on every call, as a real one's
// does), and impl=check+settle a request admitted at its estimate and then
// settled at less (the whole of a settled request's work in the runtime).
// The goal is settle ≤ 1.2× check, with 0 allocations.
func BenchmarkSettle(b *testing.B) {
	rule, err := atomicbucket.NewRule(atomicbucket.Limit{Tokens: allowAll.tokens, Period: allowAll.period, Burst: allowAll.burst})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 1000} {
		keys, order := keySet(n)
		keys = queryKeys(keys)
		t := atomicbucket.NewTable[string](rule, atomicbucket.TableOptions{})
		for _, k := range keys {
			t.AllowNAt(k, atomicbucket.Now(), 5)
		}
		impls := []struct {
			name string
			op   func(i int, key string) bool
		}{
			{"check", func(_ int, key string) bool { return t.AllowNAt(key, atomicbucket.Now(), 5).Allowed }},
			{"settle", func(i int, key string) bool {
				return t.SettleAt(key, atomicbucket.Now(), 5, int64(4+2*(i&1))) == 0
			}},
			{"check+settle", func(_ int, key string) bool {
				now := atomicbucket.Now()
				return t.AllowNAt(key, now, 5).Allowed && t.SettleAt(key, now, 5, 3) == 0
			}},
		}
		for _, im := range impls {
			b.Run(fmt.Sprintf("keys=%.0e/impl=%s", float64(n), im.name), func(b *testing.B) {
				i, j := 0, 0
				for b.Loop() {
					sinkBool = im.op(j, keys[order[i]])
					j++
					if i++; i == n {
						i = 0
					}
				}
			})
		}
	}
}
