package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/redisstore/redistest"
	"github.com/limitgen/limitgen/storetest"
)

// FuzzScript runs fuzzed programs (storetest.Program) through the script's
// explicit-time variant on a redis-server the fuzz process starts: single
// checks and coalesced batches of up to four at one time (the script's mode
// 4, each check on its own), every decision equal to the exact reference's.
func FuzzScript(f *testing.F) {
	for _, seed := range storetest.ProgramSeeds {
		f.Add(seed)
	}
	srv := redistest.Start(f)
	st := scriptStore(srv.Client(f))
	n, start := 0, time.Now().Unix()+86400
	f.Fuzz(func(t *testing.T, data []byte) {
		n++
		storetest.Program(t, st, fmt.Sprintf("fz%d", n), data, start)
	})
}

// FuzzWindowLease runs fuzzed programs of window leases, their settlements
// and releases, and checks per request (storetest.WindowLeaseProgram) at
// explicit times on a redis-server the fuzz process starts: no interval of
// the window may hold more than its limit.
func FuzzWindowLease(f *testing.F) {
	for _, seed := range storetest.WindowLeaseSeeds() {
		f.Add(seed)
	}
	srv := redistest.Start(f)
	open := openLeasedWindow(srv.Client(f))
	n := 0
	f.Fuzz(func(t *testing.T, prog []byte) {
		n++
		storetest.WindowLeaseProgram(t, open, fmt.Sprintf("fz%d", n), prog)
	})
}
