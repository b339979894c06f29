package atomicbucket

import (
	"fmt"
	"hash/maphash"
	"strings"
	"testing"
	"time"
)

// BenchmarkTableMillion takes a keyed check on a table of a million keys
// apart, step by step, visiting the keys in the order bench's BenchmarkKeyed
// does (a prime stride: no two neighbours in memory one after the other),
// each with a query string of its own (as a request's key is): the key's
// hash alone (hash/maphash's, the runtime string hash the map uses: no
// memory touched but the key's); the map's lookup (its bucket, the entry,
// the key's bytes beside the bucket); the lookup and a read of the bucket's
// word; the check at a fixed time; the clock read and then that check; the
// clock alone; and the check with the clock read, which is BenchmarkKeyed's
// limitgen row. What each step adds is what it costs.
func BenchmarkTableMillion(b *testing.B) {
	const n = 1_000_000
	rule := MustRule(Limit{Tokens: 1_000_000_000, Period: time.Second, Burst: 1_000_000_000})
	t := NewTable[string](rule, TableOptions{Presize: n})
	keys := make([]string, n)
	start := Now()
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%08d", i)
		t.AllowAt(keys[i], start)
	}
	query := make([]string, n)
	for i, k := range keys {
		query[i] = strings.Clone(k)
	}
	order := make([]int32, n)
	for i := range order {
		order[i] = int32(i * 7919 % n)
	}
	var sink uint64
	seed := maphash.MakeSeed()
	steps := []struct {
		name string
		f    func(k string)
	}{
		{"hash", func(k string) { sink += maphash.String(seed, k) }}, // the map hashes with the runtime's string hash, as maphash does
		{"lookup", func(k string) {
			if t.m.load(k) != nil {
				sink++
			}
		}},
		{"lookup+word", func(k string) {
			if s := t.m.load(k); s != nil {
				sink += uint64(s.tat.Load())
			}
		}},
		{"check-fixed-time", func(k string) { t.AllowNAt(k, start, 1) }},
		{"clock-then-check-fixed-time", func(k string) { sink += uint64(Now()); t.AllowNAt(k, start, 1) }},
		{"clock", func(string) { sink += uint64(Now()) }},
		{"check", func(k string) { t.Allow(k) }},
	}
	for _, st := range steps {
		b.Run("step="+st.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				st.f(query[order[i]])
				if i++; i == n {
					i = 0
				}
			}
		})
	}
	_ = sink
}
