package bench

import (
	"testing"

	"github.com/limitgen/limitgen/atomicbucket"
	generated "github.com/limitgen/limitgen/generated"
)

// BenchmarkGenerated sets limiters generated from the repository's policy.yaml
// beside the generic runtime built with the same numbers, checked the same way:
// the generated methods are thin and inline, so they should cost what the
// runtime costs.
func BenchmarkGenerated(b *testing.B) {
	// Global: 2000/s, burst 4000 (policy.yaml), drained so every check is denied
	// quickly and the bucket never runs dry mid-measurement.
	b.Run("case=global/impl=generated", func(b *testing.B) {
		for b.Loop() {
			sinkBool = generated.Global.Allow()
		}
	})
	b.Run("case=global/impl=runtime", func(b *testing.B) {
		g := atomicbucket.NewBucketAt(atomicbucket.MustRule(atomicbucket.Limit{Tokens: 2000, Period: 1e9, Burst: 4000}), atomicbucket.Now())
		for b.Loop() {
			sinkBool = g.Allow()
		}
	})
	// PerEndpoint: 1000/min per int64 key, burst 200; 1e3 keys.
	keys := make([]int64, 1000)
	for i := range keys {
		keys[i] = int64(i) * 7919
	}
	b.Run("case=keyed/impl=generated", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sinkBool = generated.PerEndpoint.Allow(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	b.Run("case=keyed/impl=runtime", func(b *testing.B) {
		t := atomicbucket.NewTable[int64](atomicbucket.MustRule(atomicbucket.Limit{Tokens: 1000, Period: 60e9, Burst: 200}), atomicbucket.TableOptions{})
		i := 0
		for b.Loop() {
			sinkBool = t.Allow(keys[i])
			if i++; i == len(keys) {
				i = 0
			}
		}
	})
	// PerUser on a plan: the plan index selects the table, no map lookup.
	users := make([]string, 1000)
	for i := range users {
		users[i] = "user-" + string(rune('a'+i%26)) + string(rune('a'+i/26%26))
	}
	b.Run("case=planned/impl=generated", func(b *testing.B) {
		i := 0
		for b.Loop() {
			sinkBool = generated.PerUser.Allow(generated.PlanPro, users[i])
			if i++; i == len(users) {
				i = 0
			}
		}
	})
	b.Run("case=planned/impl=runtime", func(b *testing.B) {
		t := atomicbucket.NewTable[string](atomicbucket.MustRule(atomicbucket.Limit{Tokens: 100, Period: 1e9, Burst: 500}), atomicbucket.TableOptions{MaxKeys: 1_000_000})
		i := 0
		for b.Loop() {
			sinkBool = t.Allow(users[i])
			if i++; i == len(users) {
				i = 0
			}
		}
	})
}
