package limitgrpc_test

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limitgrpc"
)

// A QuotaFailure says what the policy says: its rate and burst, not the
// RateLimit fields' quota over a window ("10 per 20 s" for 30/min, burst 10).
func TestDescribe(t *testing.T) {
	for _, c := range []struct {
		l    atomicbucket.Limit
		want string
	}{
		{atomicbucket.Limit{Tokens: 30, Period: time.Minute, Burst: 10}, "30/min, burst 10"},
		{atomicbucket.Limit{Tokens: 5, Period: 10 * time.Second, Burst: 5}, "5 per 10s, burst 5"},
		{atomicbucket.Limit{Tokens: 100, Period: 24 * time.Hour, Burst: 100}, "100/d, burst 100"},
		{atomicbucket.Limit{Tokens: 2000, Period: time.Second, Burst: 4000}, "2000/s, burst 4000"},
	} {
		if got := limitgrpc.Describe(c.l); got != c.want {
			t.Errorf("Describe(%+v) = %q, want %q", c.l, got, c.want)
		}
	}
}
