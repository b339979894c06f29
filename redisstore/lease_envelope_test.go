package redisstore

import (
	"testing"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
)

// Leases on the script's explicit-time variant (storetest.LeaseEnvelope): no
// window of the combined stream of three lessees and per-request checks
// exceeds the envelope.
func TestLeasesKeepTheEnvelope(t *testing.T) {
	srv := redistest.Start(t)
	rules, total, leased := storetest.LeaseEnvelope(t, scriptStore(srv.Client(t)))
	t.Logf("%d rules: %d tokens admitted, %d of them from leases; no window beyond the envelope", rules, total, leased)
}

// A grant spent entirely just before it expires frees nothing early
// (storetest.LeaseExpiry).
func TestLeaseExpiryKeepsItsTokensSpent(t *testing.T) {
	srv := redistest.Start(t)
	storetest.LeaseExpiry(t, scriptStore(srv.Client(t)))
}
