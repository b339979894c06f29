package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
)

// windowImpls are the local checks BenchmarkWindow sets side by side, each
// admitting every request (case=allow: rates no run can exhaust) or drained
// first and then denying every one (case=deny), for one key at a time of a
// table holding keys of them (keys=1: the rule's global form).
var windowImpls = []struct {
	name string
	// make returns the check, admitting (allow) or drained (deny).
	make func(b *testing.B, allow bool, keys int) func(string) bool
}{
	{"bucket", func(b *testing.B, allow bool, keys int) func(string) bool {
		l := atomicbucket.Limit{Tokens: 1, Period: time.Hour, Burst: 1}
		if allow {
			l = atomicbucket.Limit{Tokens: allowAll.tokens, Period: allowAll.period, Burst: allowAll.burst}
		}
		r, err := atomicbucket.NewRule(l)
		if err != nil {
			b.Fatal(err)
		}
		if keys == 1 {
			bk := atomicbucket.NewBucketAt(r, atomicbucket.Now())
			return func(string) bool { return bk.Allow() }
		}
		return atomicbucket.NewTable[string](r, atomicbucket.TableOptions{}).Allow
	}},
	// 60 an hour: a ring of 60 unit times. Admitting: 64 a microsecond.
	{"window-exact", func(b *testing.B, allow bool, keys int) func(string) bool {
		if allow {
			return windowCheck(atomicwindow.MustRule(64, time.Microsecond), keys)
		}
		return windowCheck(atomicwindow.MustRule(60, time.Hour), keys)
	}},
	// 1000 an hour: 16 sub-window counts. Admitting: 2^26−1 an hour.
	{"window-counted", func(b *testing.B, allow bool, keys int) func(string) bool {
		if allow {
			return windowCheck(atomicwindow.MustRule(atomicwindow.LimitMax, time.Hour), keys)
		}
		return windowCheck(atomicwindow.MustRule(1000, time.Hour), keys)
	}},
}

func windowCheck(r atomicwindow.Rule, keys int) func(string) bool {
	if keys == 1 {
		w := atomicwindow.NewWindow(r)
		return func(string) bool { return w.Allow() }
	}
	return atomicwindow.NewTable[string](r, atomicbucket.TableOptions{}).Allow
}

// BenchmarkWindow is a window rule's local check beside a token bucket's,
// from one goroutine: global (keys=1) and keyed over 1e3 keys, admitting or
// denying.
func BenchmarkWindow(b *testing.B) {
	for _, c := range []string{"allow", "deny"} {
		for _, n := range []int{1, 1_000} {
			keys, order := keySet(n)
			keys = queryKeys(keys)
			for _, im := range windowImpls {
				b.Run(fmt.Sprintf("case=%s/keys=%.0e/impl=%s", c, float64(n), im.name), func(b *testing.B) {
					check := im.make(b, c == "allow", n)
					for _, k := range keys { // every key exists; drained keys have spent their limit
						for check(k) && c == "deny" {
						}
					}
					if got := check(keys[0]); got != (c == "allow") {
						b.Fatalf("%s, case %s: the check says %v", im.name, c, got)
					}
					i := 0
					for b.Loop() {
						sinkBool = check(keys[order[i]])
						if i++; i == n {
							i = 0
						}
					}
				})
			}
		}
	}
}
