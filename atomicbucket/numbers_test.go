package atomicbucket

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
)

// A change is refused exactly as a policy with those numbers would be: by
// NewRule, with its message, and nothing changes.
func TestNumbersRefused(t *testing.T) {
	r := MustRule(Limit{Tokens: 10, Period: time.Second, Burst: 50})
	iv := MustRule(Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5, Refill: Interval})
	for _, c := range []struct {
		name string
		rule Rule
		n    Numbers
		want string // part of the error; "" for NewRule's own
	}{
		{"zero rate", r, Numbers{Tokens: 0, Period: time.Second, Burst: 5}, ""},
		{"zero burst", r, Numbers{Tokens: 10, Period: time.Second, Burst: 0}, ""},
		{"zero period", r, Numbers{Tokens: 10, Period: 0, Burst: 5}, ""},
		{"beyond the horizon", r, Numbers{Tokens: 1, Period: 1000 * 24 * time.Hour, Burst: 1 << 40}, ""},
		{"unrepresentable", r, Numbers{Tokens: 999_999_937, Period: time.Hour, Burst: 5}, ""},
		{"interval period", iv, Numbers{Tokens: 5, Period: time.Second, Burst: 5}, "period 10s cannot change"},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := NewTable[string](c.rule, TableOptions{})
			b := NewBucketAt(c.rule, Now())
			want := c.want
			if want == "" {
				l := c.rule.Limit()
				l.Tokens, l.Period, l.Burst = c.n.Tokens, c.n.Period, c.n.Burst
				_, err := NewRule(l)
				if err == nil {
					t.Fatalf("NewRule takes %+v", l)
				}
				want = err.Error()
			}
			for name, err := range map[string]error{
				"Table.SetNumbersAt":    tb.SetNumbersAt(Now(), c.n, CarryAsIs),
				"Table.SetKeyNumbersAt": tb.SetKeyNumbersAt(Now(), "k", c.n, CarryAsIs),
				"Bucket.SetNumbersAt":   b.SetNumbersAt(Now(), c.n, CarryAsIs),
			} {
				if !errors.Is(err, ErrInvalidLimit) || !strings.Contains(err.Error(), want) {
					t.Errorf("%s(%v) = %v, want an ErrInvalidLimit saying %q", name, c.n, err, want)
				}
			}
			if n, o := tb.NumbersFor("k"); n != NumbersOf(c.rule.Limit()) || o != FromPolicy {
				t.Errorf("after a refused change the table's numbers for k are %v (%v)", n, o)
			}
			if n, o := b.NumbersFor(); n != NumbersOf(c.rule.Limit()) || o != FromPolicy {
				t.Errorf("after a refused change the bucket's numbers are %v (%v)", n, o)
			}
			if tb.ov.Load() != nil || b.over.Load() != nil {
				t.Error("a refused change left the fast path")
			}
		})
	}
}

// ResetAt makes a key's bucket new as of its time: the initial tokens then,
// refilling from then on; a reservation on the old bucket gives nothing back
// to the new one; a key without a bucket is left without one.
func TestResetAt(t *testing.T) {
	r := MustRule(Limit{Tokens: 10, Period: time.Second, Burst: 20, Initial: 5, InitialSet: true})
	tb := NewTable[string](r, TableOptions{})
	now := Time(int64(time.Hour))
	if tb.ResetAt("u", now) || tb.Len() != 0 {
		t.Fatalf("ResetAt made a bucket for a key without one (Len %d)", tb.Len())
	}
	if d := tb.AllowNAt("u", now, 5); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("a new key: %+v", d)
	}
	res := tb.ReserveAt("u", now, 3, time.Second)
	if !res.OK {
		t.Fatal("the reservation was refused")
	}
	at := now.Add(100 * time.Millisecond)
	if !tb.ResetAt("u", at) {
		t.Fatal("ResetAt found no bucket")
	}
	res.CancelAt(at.Add(time.Millisecond))
	if d := tb.PeekAt("u", at.Add(time.Millisecond), 0); d.Remaining != 5 {
		t.Fatalf("after cancelling a reservation on the old bucket: remaining %d, want 5", d.Remaining)
	}
	// 5 at the reset, 10/s from it: 7 at 200 ms after.
	if d := tb.PeekAt("u", at.Add(200*time.Millisecond), 0); d.Remaining != 7 {
		t.Fatalf("200 ms after the reset: remaining %d, want 7 (5 initial + 2 refilled)", d.Remaining)
	}
	if d := tb.PeekAt("u", at, 0); d.Remaining != 5 {
		t.Fatalf("at the reset: remaining %d, want the initial 5", d.Remaining)
	}
}

// What is in force is reported, per key, with where it comes from; ResetAt
// makes a key's bucket new; a key's own numbers survive its bucket being swept.
func TestNumbersInForce(t *testing.T) {
	r := MustRule(Limit{Tokens: 10, Period: time.Second, Burst: 50})
	tb := NewTable[string](r, TableOptions{})
	now := Time(int64(time.Hour))
	for range 50 {
		tb.AllowAt("vip", now)
		tb.AllowAt("other", now)
	}
	if tb.AllowAt("vip", now) {
		t.Fatal("an empty bucket allowed")
	}
	big := Numbers{Tokens: 1000, Period: time.Second, Burst: 2000}
	if err := tb.SetKeyNumbersAt(now, "vip", big, CarryAsIs); err != nil {
		t.Fatal(err)
	}
	if n, o := tb.NumbersFor("vip"); n != big || o != FromKeyOverride {
		t.Fatalf("vip: %v (%v)", n, o)
	}
	if n, o := tb.NumbersFor("other"); n != NumbersOf(r.Limit()) || o != FromPolicy {
		t.Fatalf("other: %v (%v)", n, o)
	}
	if tb.keysWithNumbers() != 1 {
		t.Fatalf("keysWithNumbers = %d", tb.keysWithNumbers())
	}
	// Carried as is: the empty bucket is still empty; a millisecond later
	// the new rate has added one token, which the old would not.
	if d := tb.AllowNAt("vip", now, 1); d.Allowed {
		t.Fatalf("a change reset vip's bucket: %+v", d)
	}
	if !tb.AllowAt("vip", now.Add(time.Millisecond)) {
		t.Fatal("vip is judged by the old numbers")
	}
	if tb.AllowAt("other", now.Add(time.Millisecond)) {
		t.Fatal("other took vip's numbers")
	}
	// Reset: the bucket is forgotten, the numbers stay.
	if !tb.ResetAt("other", now.Add(time.Millisecond)) {
		t.Fatal("Reset found no bucket for other")
	}
	if d := tb.AllowNAt("other", now.Add(time.Millisecond), 50); !d.Allowed {
		t.Fatalf("other after Reset: %+v", d)
	}
	// A key's own numbers outlive its bucket: swept when full, made again under them.
	later := now.Add(time.Hour)
	if tb.SweepAt(later) != 2 || tb.Len() != 0 {
		t.Fatalf("the sweep left %d keys", tb.Len())
	}
	if d := tb.AllowNAt("vip", later, 2000); !d.Allowed {
		t.Fatalf("vip's new bucket is not under its own numbers: %+v", d)
	}
	tb.ClearKeyNumbersAt(later, "vip", CarryAsIs)
	if n, o := tb.NumbersFor("vip"); n != NumbersOf(r.Limit()) || o != FromPolicy || tb.keysWithNumbers() != 0 {
		t.Fatalf("vip after ClearKeyNumbersAt: %v (%v)", n, o)
	}
	// Back under 10/s, burst 50, vip's empty bucket stays empty.
	if tb.AllowAt("vip", later) {
		t.Fatal("clearing vip's numbers refilled its bucket")
	}
	// A change for the whole table, then back to the policy's.
	if err := tb.SetNumbersAt(later, big, CarryProportional); err != nil {
		t.Fatal(err)
	}
	if n, o := tb.NumbersFor("anyone"); n != big || o != FromOverride {
		t.Fatalf("after SetNumbersAt: %v (%v)", n, o)
	}
	tb.ClearNumbersAt(later, CarryProportional)
	if n, o := tb.NumbersFor("anyone"); n != NumbersOf(r.Limit()) || o != FromPolicy {
		t.Fatalf("after ClearNumbersAt: %v (%v)", n, o)
	}
}

// Checks after a change allocate nothing (only a bucket's conversion, once,
// makes a new slot).
func TestZeroAllocsAfterChange(t *testing.T) {
	r := mustRule(t, Limit{Tokens: 1_000_000, Period: time.Second, Burst: 1_000_000})
	b := NewBucketAt(r, Now())
	tb := NewTable[string](r, TableOptions{})
	tb.Allow("key")
	tb.Allow("vip")
	n := Numbers{Tokens: 2_000_000, Period: time.Second, Burst: 1_000_000}
	if err := tb.SetKeyNumbersAt(Now(), "vip", n, CarryAsIs); err != nil {
		t.Fatal(err)
	}
	if err := b.SetNumbersAt(Now(), n, CarryAsIs); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	scale, emit, tau, _ := r.Units()
	for name, f := range map[string]func(){
		"Bucket.Allow":                          func() { b.Allow() },
		"Bucket.AllowN":                         func() { b.AllowNAt(Now(), 2) },
		"Bucket.Peek":                           func() { b.PeekAt(Now(), 1) },
		"Bucket.Refund":                         func() { b.RefundAt(Now(), 1) },
		"Bucket.Wait":                           func() { _ = b.Wait(ctx, 1) },
		"Bucket.AllowGreedyAt (generated code)": func() { b.AllowGreedyAt(Now(), scale, emit, tau) },
		"Table.Allow (key without its own)":     func() { tb.Allow("key") },
		"Table.Allow (key with its own)":        func() { tb.Allow("vip") },
		"Table.AllowN":                          func() { tb.AllowNAt("vip", Now(), 2) },
		"Table.Peek":                            func() { tb.PeekAt("vip", Now(), 1) },
		"Table.Refund":                          func() { tb.RefundAt("vip", Now(), 1) },
		"Table.Reserve":                         func() { tb.ReserveAt("vip", Now(), 1, 0) },
		"Table.AllowGreedyAt (generated code)":  func() { tb.AllowGreedyAt("key", Now(), scale, emit, tau) },
	} {
		if n := testing.AllocsPerRun(1000, f); n != 0 {
			t.Errorf("%s: %v allocs per call, want 0", name, n)
		}
	}
}

// A node that holds numbers is scanned by the collector for its pointer to
// them, after the key's bytes: numbers reachable only from a node survive
// collections (a block of bytes would hide the pointer, and the numbers would
// be freed under the node). Keys of every length up to 300 bytes, so every
// width of the node's length header and every cached node type.
func TestSlotKeepsItsNumbers(t *testing.T) {
	var freed atomic.Int64
	slots := make([]*slot, 0, 300)
	m := newKeyMap[string](true, 0, 0)
	for i := range 300 {
		n := &numbers{since: int64(i)}
		runtime.SetFinalizer(n, func(*numbers) { freed.Add(1) })
		s := m.newNode(strings.Repeat("k", i+1), int64(i), n)
		if key := m.keyOf(s); key != strings.Repeat("k", i+1) || m.anchorOf(s) != int64(i) || uintptr(unsafe.Pointer(unsafe.StringData(key))) <= uintptr(unsafe.Pointer(s)) {
			t.Fatalf("key %d is not in its node", i)
		}
		slots = append(slots, s)
	}
	for range 3 {
		runtime.GC()
	}
	time.Sleep(10 * time.Millisecond) // finalizers run on their own goroutine
	if n := freed.Load(); n != 0 {
		t.Fatalf("%d numbers held only by slots were freed", n)
	}
	for i, s := range slots {
		if m.numsOf(s).since != int64(i) {
			t.Fatalf("slot %d's numbers changed under it", i)
		}
	}
	runtime.KeepAlive(slots)
}

// BenchmarkSetKeyNumbers is giving one more key numbers of its own in a table
// where have keys have theirs: it should not grow with have (the keys' map is
// changed in place; a copy of it per change made a Set of n keys cost n²/2
// map writes: 5.6 s for 10,000 keys).
func BenchmarkSetKeyNumbers(b *testing.B) {
	n := Numbers{Tokens: 20, Period: time.Second, Burst: 20}
	for _, have := range []int{1_000, 100_000} {
		b.Run(fmt.Sprintf("have=%d", have), func(b *testing.B) {
			t := NewTable[int64](MustRule(Limit{Tokens: 10, Period: time.Second, Burst: 10}), TableOptions{})
			for i := range have {
				if err := t.SetKeyNumbersAt(0, int64(i), n, CarryAsIs); err != nil {
					b.Fatal(err)
				}
			}
			k := int64(have)
			for b.Loop() {
				if err := t.SetKeyNumbersAt(0, k, n, CarryAsIs); err != nil {
					b.Fatal(err)
				}
				k++
			}
			if got := t.keysWithNumbers(); got < have+1 {
				b.Fatalf("%d keys with numbers of their own, want at least %d", got, have+1)
			}
		})
	}
}
