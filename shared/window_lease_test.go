package shared

import (
	"testing"
	"time"
)

// TestWindowLeaseTerm: a quarter of the window, at most a second, at least
// a microsecond, in whole microseconds; a window's grant is spent for its
// term from the call's sending, a bucket's until the store's second after
// next.
func TestWindowLeaseTerm(t *testing.T) {
	for _, c := range []struct{ window, want time.Duration }{
		{time.Hour, time.Second},
		{4 * time.Second, time.Second},
		{2 * time.Second, 500 * time.Millisecond},
		{time.Millisecond, 250 * time.Microsecond},
		{10 * time.Microsecond, 2 * time.Microsecond},
		{3 * time.Microsecond, time.Microsecond},
		{time.Nanosecond, time.Microsecond},
	} {
		if got := WindowLeaseTerm(c.window); got != c.want {
			t.Errorf("WindowLeaseTerm(%v) = %v, want %v", c.window, got, c.want)
		}
	}
	if got := (Granted{Term: 250 * time.Microsecond, Usec: 400_000}).Expires(1_000); got != 251_000 {
		t.Errorf("a window's grant sent at 1000 ns expires at %d, want 251000", got)
	}
	if got := (Granted{Usec: 400_000}).Expires(1_000); got != 1_000+1_600_000_000 {
		t.Errorf("a bucket's grant 0.4 s into the store's second, sent at 1000 ns, expires at %d, want %d", got, 1_000+1_600_000_000)
	}
}
