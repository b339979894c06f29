package bench

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	generated "github.com/limitgen/limitgen/generated"
)

// BenchmarkNumbers is what numbers changed at run time cost a check
// (generated limiters, from policy.yaml, each case a fresh set):
//   - numbers=policy: nothing ever changed (the folded check);
//   - numbers=others-own: 100 other keys have numbers of their own
//     (SetKeyNumbers), so the rule takes the general path, for keys without;
//   - numbers=own: every key checked has numbers of its own;
//   - numbers=changed: the rule's numbers changed for every key (SetNumbers).
//
// case=keyed is PerEndpoint (int64 keys, 1e3 of them), case=global is
// Global (one bucket: its folded check knows a change by its dead word).
func BenchmarkNumbers(b *testing.B) {
	keys := make([]int64, 1000)
	for i := range keys {
		keys[i] = int64(i) * 7919
	}
	// The policy's numbers, with a rate that keeps every check allowed.
	same := atomicbucket.Numbers{Tokens: 1000, Period: time.Minute, Burst: 200}
	cases := []struct {
		name  string
		setup func(l *generated.Limits)
	}{
		{"policy", func(*generated.Limits) {}},
		{"others-own", func(l *generated.Limits) {
			for i := range 100 {
				must(b, l.PerEndpoint.SetKeyNumbers(-1-int64(i), same, atomicbucket.CarryAsIs))
			}
			must(b, l.Global.SetNumbers(atomicbucket.Numbers{Tokens: 2000, Period: time.Second, Burst: 4000}, atomicbucket.CarryAsIs))
		}},
		{"own", func(l *generated.Limits) {
			for _, k := range keys {
				must(b, l.PerEndpoint.SetKeyNumbers(k, same, atomicbucket.CarryAsIs))
			}
			must(b, l.Global.SetNumbers(atomicbucket.Numbers{Tokens: 2000, Period: time.Second, Burst: 4000}, atomicbucket.CarryAsIs))
		}},
		{"changed", func(l *generated.Limits) {
			must(b, l.PerEndpoint.SetNumbers(same, atomicbucket.CarryAsIs))
			must(b, l.Global.SetNumbers(atomicbucket.Numbers{Tokens: 2000, Period: time.Second, Burst: 4000}, atomicbucket.CarryAsIs))
		}},
	}
	for _, c := range cases {
		b.Run("case=keyed/numbers="+c.name, func(b *testing.B) {
			l := generated.New()
			c.setup(l)
			i := 0
			for b.Loop() {
				sinkBool = l.PerEndpoint.Allow(keys[i])
				if i++; i == len(keys) {
					i = 0
				}
			}
		})
		b.Run("case=global/numbers="+c.name, func(b *testing.B) {
			l := generated.New()
			c.setup(l)
			for b.Loop() {
				sinkBool = l.Global.Allow()
			}
		})
	}
}

// TestNumbersCasesDiffer makes sure BenchmarkNumbers measures what it says:
// each setup leaves the numbers in force it names.
func TestNumbersCasesDiffer(t *testing.T) {
	l := generated.New()
	if _, o := l.PerEndpoint.NumbersFor(7919); o != atomicbucket.FromPolicy {
		t.Fatalf("fresh: %v", o)
	}
	own := atomicbucket.Numbers{Tokens: 5, Period: time.Minute, Burst: 2}
	must(t, l.PerEndpoint.SetKeyNumbers(7919, own, atomicbucket.CarryAsIs))
	if n, o := l.PerEndpoint.NumbersFor(7919); o != atomicbucket.FromKeyOverride || n != own {
		t.Fatalf("own: %v %v", n, o)
	}
	if _, o := l.PerEndpoint.NumbersFor(1); o != atomicbucket.FromPolicy {
		t.Fatalf("another key: %v", o)
	}
	// Its own burst of 2 binds; the policy's 200 would not.
	for i := range 3 {
		if got := l.PerEndpoint.Allow(7919); got != (i < 2) {
			t.Fatalf("check %d of 7919 under its own numbers: %v", i, got)
		}
	}
}

func must(tb testing.TB, err error) {
	tb.Helper()
	if err != nil {
		tb.Fatal(err)
	}
}
