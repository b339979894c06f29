package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/limitgen/limitgen/shared"
)

var _ shared.Store = (*Store)(nil)

// Through the seam a generated package uses: Bind refuses what Redis cannot
// hold, Check decides single rules and tiers on Redis, and with Redis gone a
// tier falls to its rules' failure settings, all or nothing.
func TestBindAndCheck(t *testing.T) {
	srv := redistest.Start(t)
	st, err := New(srv.Client(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := st.Bind([]shared.Rule{{Name: "x", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}},
		{Name: "x", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}}}); err == nil || !strings.Contains(err.Error(), "two shared rules") {
		t.Errorf("two rules with one name: %v", err)
	}
	if _, err := st.Bind([]shared.Rule{{Name: "tiny", Limit: atomicbucket.Limit{Tokens: 1, Period: 10 * time.Nanosecond, Burst: 1}}}); err == nil {
		t.Error("a period finer than Redis's clock was bound")
	}
	if _, err := st.Bind([]shared.Rule{{Name: "share", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1},
		Failure: shared.Failure{Mode: shared.FailLocal, Share: 1.5}}}); err == nil {
		t.Error("a local share above 1 was bound")
	}
	b, err := st.Bind([]shared.Rule{
		{Name: "PerUser", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 3}, Failure: shared.Failure{Mode: shared.FailLocal, Share: 0.5}},
		{Name: "Global", Limit: atomicbucket.Limit{Tokens: 1, Period: time.Minute, Burst: 100}, Failure: shared.Failure{Mode: shared.FailAllow}},
	})
	if err != nil {
		t.Fatal(err)
	}
	tier := []shared.Step{{Rule: 0, Key: "alice", Cost: 1}, {Rule: 1, Key: "", Cost: 1}}
	for i := range 4 {
		res, idx := b.Check(ctx, tier)
		if res.Degraded || res.Allowed != (i < 3) || (i == 3 && idx != 0) {
			t.Fatalf("tier request %d on Redis: %+v from %d", i, res, idx)
		}
	}
	if res, _ := b.Check(ctx, []shared.Step{{Rule: 1, Key: "", Cost: 1}}); !res.Allowed || res.Remaining != 96 {
		t.Fatalf("Global after three tier requests: %+v", res)
	}
	if res, idx := b.Check(ctx, []shared.Step{{Rule: 5, Key: "", Cost: 1}}); res.Allowed || res.Err == nil || idx != 0 {
		t.Errorf("a step naming no rule: %+v", res)
	}

	srv.Stop()
	// Redis gone: PerUser decides on its local half (burst 1), Global allows.
	res, _ := b.Check(ctx, tier)
	if !res.Degraded || !res.Allowed {
		t.Fatalf("first tier request without Redis: %+v", res)
	}
	res, idx := b.Check(ctx, tier)
	if !res.Degraded || res.Allowed || idx != 0 {
		t.Fatalf("second tier request without Redis: %+v from %d (the local share of PerUser holds 1)", res, idx)
	}
}
