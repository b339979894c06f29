package atomicbucket

import (
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/limitgen/limitgen/internal/keyhash"
)

// TestSweepTombstone plays, step by step, the interleaving that could lose a
// consumption: a check loads a key's bucket, a sweep removes that bucket, and
// only then does the check try to consume from the pointer it holds. The check
// must find the tombstone, change nothing, and (through the public path) land in
// a new bucket that the table holds.
func TestSweepTombstone(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 2})
	tb := NewTable[string](r, TableOptions{})
	t0 := hour
	tb.AllowNAt("k", t0-Time(time.Second), 1) // creates a bucket, full again at t0
	stale := tb.m.load("k")
	if stale == nil {
		t.Fatal("bucket not created")
	}
	later := t0 + Time(SweepGrace) + Time(time.Second)
	if n := tb.SweepAt(later); n != 1 {
		t.Fatalf("sweep removed %d buckets, want 1", n)
	}
	if tat := stale.tat.Load(); tat != dead {
		t.Fatalf("a removed bucket's word is %d, want the tombstone %d", tat, dead)
	}
	// The stale check consumes through the pointer it loaded before the sweep.
	nowU := r.units(int64(later), tb.m.anchorOf(stale))
	if tat, ok := advance(&stale.tat, &stale.seen, 0, nowU, r.emit, nowU+r.tau); ok || tat >= 0 {
		t.Fatalf("consumption from a removed bucket: advance = (%d, %v), want the tombstone and false", tat, ok)
	}
	giveBack(&stale.tat, &stale.seen, 0, nowU, r.emit)
	if stale.tat.Load() != dead {
		t.Fatal("a refund revived a removed bucket")
	}
	// Through the public path the check lands in a new, tracked bucket.
	if d := tb.AllowNAt("k", later, 2); !d.Allowed || tb.Len() != 1 {
		t.Fatalf("after the sweep: %+v with %d keys, want the burst from a new bucket", d, tb.Len())
	}
	if tb.m.load("k") == stale {
		t.Fatal("the table still holds the removed bucket")
	}
	if d := tb.AllowNAt("k", later, 1); d.Allowed {
		t.Fatalf("the new bucket did not record the consumption: %+v", d)
	}
}

// TestSweepKeepsBusyBuckets: a bucket that is not full, or has been full for
// less than SweepGrace, stays.
func TestSweepKeepsBusyBuckets(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1, Period: time.Second, Burst: 2})
	tb := NewTable[int](r, TableOptions{})
	tb.AllowNAt(1, hour, 2)                                   // full again at +2s
	tb.AllowNAt(2, hour-Time(time.Second), 1)                 // full since hour
	if n := tb.SweepAt(hour + Time(SweepGrace) - 1); n != 0 { // 2 has been full for less than the grace
		t.Fatalf("swept %d, want 0", n)
	}
	if n := tb.SweepAt(hour + Time(SweepGrace)); n != 1 { // 2 goes, 1 is not full
		t.Fatalf("swept %d, want 1", n)
	}
	if n := tb.SweepAt(hour + 2*Time(time.Second) + Time(SweepGrace)); n != 1 { // 1 goes
		t.Fatalf("swept %d, want 1", n)
	}
	if tb.Len() != 0 || tb.Stats().Evictions != 2 {
		t.Fatalf("Len %d, Evictions %d; want 0 and 2", tb.Len(), tb.Stats().Evictions)
	}
}

// A key backed by a buffer the caller reuses: the table keeps its own copy,
// so overwriting the buffer changes neither the stored key nor its bucket.
func TestTableKeepsNoCallerKey(t *testing.T) {
	tab := NewTable[string](MustRule(Limit{Tokens: 1, Period: time.Second, Burst: 2}), TableOptions{})
	buf := []byte("client-a")
	key := unsafe.String(&buf[0], len(buf))
	if !tab.AllowNAt(key, 0, 2).Allowed {
		t.Fatal("a new key's first request denied")
	}
	copy(buf, "client-b") // key now reads "client-b"
	if d := tab.PeekAt("client-a", 0, 1); d.Allowed {
		t.Errorf("client-a's bucket lost its state: %+v", d)
	}
	if d := tab.PeekAt("client-b", 0, 2); !d.Allowed {
		t.Errorf("client-b has client-a's bucket: %+v", d)
	}
	if tab.Len() != 1 {
		t.Errorf("Len = %d, want 1", tab.Len())
	}
}

// TableOptions.KeyHash places a key's interval grid: a struct key whose
// KeyHash is keyhash.Of of its text form gets the grid the string key of that
// form gets, in this process or any other; without one, or with a func of
// another type, a struct key's grid is placed by the table's seed.
func TestKeyHashPlacesTheGrid(t *testing.T) {
	type pair struct {
		tenant string
		user   int
	}
	text := func(k pair) string { return k.tenant + "," + strconv.Itoa(k.user) }
	r := mustRule(t, Limit{Tokens: 1, Period: time.Hour, Burst: 1, Refill: Interval})
	byText := NewTable[string](r, TableOptions{})
	for i := range 50 {
		k := pair{"t" + strconv.Itoa(i), i}
		hashed := NewTable[pair](r, TableOptions{KeyHash: func(k pair) uint64 { return keyhash.Of([]byte(text(k))) }})
		const now = int64(5 * time.Hour)
		want := byText.PeekAt(text(k), Time(now), 1)
		if got := hashed.PeekAt(k, Time(now), 1); got != want {
			t.Fatalf("%v: %+v, want the grid of %q: %+v", k, got, text(k), want)
		}
	}
	// A KeyHash of another type is not taken: the seed places the grid, and
	// the resets of 50 keys are not all the text form's.
	same := 0
	for i := range 50 {
		k := pair{"t" + strconv.Itoa(i), i}
		seeded := NewTable[pair](r, TableOptions{KeyHash: func(k string) uint64 { return 0 }})
		const now = int64(5 * time.Hour)
		if seeded.PeekAt(k, Time(now), 1) == byText.PeekAt(text(k), Time(now), 1) {
			same++
		}
	}
	if same == 50 {
		t.Error("a KeyHash of the wrong type placed every grid as the text form would")
	}
}
