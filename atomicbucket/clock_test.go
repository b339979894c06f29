package atomicbucket

import (
	"sync/atomic"
	"testing"
	"time"
)

func TestNowIsMonotonic(t *testing.T) {
	prev := Now()
	if prev < 0 {
		t.Fatalf("Now() = %d, want >= 0 after init", prev)
	}
	for range 1000 {
		n := Now()
		if n < prev {
			t.Fatalf("Now went backwards: %d after %d", n, prev)
		}
		prev = n
	}
	before := Now()
	time.Sleep(2 * time.Millisecond)
	if d := Now() - before; d < Time(2*time.Millisecond) {
		t.Fatalf("Now advanced %d ns over a 2ms sleep", d)
	}
}

var sinkInt64 int64
var sinkTime Time

// BenchmarkClock compares the clock readings a check could use; the figures
// chosen from it are recorded in clock.go.
func BenchmarkClock(b *testing.B) {
	b.Run("impl=nanotime", func(b *testing.B) {
		for b.Loop() {
			sinkTime = Now()
		}
	})
	b.Run("impl=time.Now", func(b *testing.B) {
		for b.Loop() {
			sinkInt64 = time.Now().UnixNano()
		}
	})
	start := time.Now()
	b.Run("impl=time.Since", func(b *testing.B) {
		for b.Loop() {
			sinkInt64 = int64(time.Since(start))
		}
	})
	b.Run("impl=coarse", func(b *testing.B) {
		var c atomic.Int64
		done := make(chan struct{})
		go func() {
			tk := time.NewTicker(time.Millisecond)
			defer tk.Stop()
			for {
				select {
				case <-tk.C:
					c.Store(int64(Now()))
				case <-done:
					return
				}
			}
		}()
		for b.Loop() {
			sinkInt64 = c.Load()
		}
		close(done)
	})
}
