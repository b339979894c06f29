package pgstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/storetest"
)

// FuzzFunction runs fuzzed programs (storetest.Program) through the check
// functions at explicit times on a PostgreSQL server the fuzz process starts:
// single checks (taking or not), tiers of up to three keys and coalesced
// batches of up to four checks, every decision equal to the exact reference's.
func FuzzFunction(f *testing.F) {
	for _, seed := range storetest.ProgramSeeds {
		f.Add(seed)
	}
	srv := pgtest.Start(f)
	_, st := open(f, srv, 4, Options{})
	n, start := 0, time.Now().Unix()+86400
	f.Fuzz(func(t *testing.T, data []byte) {
		n++
		storetest.Program(t, atStore(st), fmt.Sprintf("fz%d_%d", n, time.Now().UnixNano()), data, start)
	})
}

// FuzzWindowLease runs fuzzed programs of window leases, their settlements
// and releases, and checks per request (storetest.WindowLeaseProgram) at
// explicit times on a PostgreSQL server the fuzz process starts: no
// interval of the window may hold more than its limit.
func FuzzWindowLease(f *testing.F) {
	for _, seed := range storetest.WindowLeaseSeeds() {
		f.Add(seed)
	}
	srv := pgtest.Start(f)
	open := openLeasedWindow(srv.Pool(f))
	n := 0
	f.Fuzz(func(t *testing.T, prog []byte) {
		n++
		storetest.WindowLeaseProgram(t, open, fmt.Sprintf("fz%d", n), prog)
	})
}
