package redisstore

import (
	"context"
	"testing"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/limitgen/limitgen/shared"
)

// leaseStore is scriptStore with the script's lease mode at explicit times.
type leaseStore struct{ scriptStore }

func (s leaseStore) Lease(rule any, key string, cost, want int64, prev shared.Settlement, sec, usec int64) (shared.Granted, error) {
	return s.st.lease(context.Background(), rule.(*Rule), key, cost, want, prev, atTime(sec, usec)...)
}

// Leases on the script's explicit-time variant (storetest.LeaseEnvelope): no
// window of the combined stream of three lessees and per-request checks
// exceeds the envelope.
func TestLeasesKeepTheEnvelope(t *testing.T) {
	srv := redistest.Start(t)
	rules, total, leased := storetest.LeaseEnvelope(t, leaseStore{scriptStore{newStore(srv.Client(t), true)}})
	t.Logf("%d rules: %d tokens admitted, %d of them from leases; no window beyond the envelope", rules, total, leased)
}

// A grant spent entirely just before it expires frees nothing early
// (storetest.LeaseExpiry).
func TestLeaseExpiryKeepsItsTokensSpent(t *testing.T) {
	srv := redistest.Start(t)
	storetest.LeaseExpiry(t, leaseStore{scriptStore{newStore(srv.Client(t), true)}})
}
