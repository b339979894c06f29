package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
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
	st := batchStore{scriptStore{newStore(srv.Client(f), true)}}
	n, start := 0, time.Now().Unix()+86400
	f.Fuzz(func(t *testing.T, data []byte) {
		n++
		storetest.Program(t, st, fmt.Sprintf("fz%d", n), data, start)
	})
}

// batchStore is scriptStore with coalesced batches (mode 4).
type batchStore struct{ scriptStore }

func (s batchStore) Batch(rule any, keys []string, costs []int64, sec, usec int64) ([]atomicbucket.Decision, error) {
	batch := make([]*pending, len(keys))
	for i := range keys {
		batch[i] = &pending{Check: Step{rule.(*Rule), keys[i], costs[i]}}
	}
	return s.st.each(context.Background(), batch, atTime(sec, usec)...)
}
