package redisstore

import (
	"context"
	"testing"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
)

// Close under load, from two goroutines, with and without coalescing: no
// race (-race; before, a coalesced check's send raced the queue's close),
// later checks decided by the failure setting with shared.ErrClosed, and no
// script call reaches Redis after it (before, a store without coalescing
// kept calling).
func TestCloseUnderLoad(t *testing.T) {
	srv := redistest.Start(t)
	monitor := srv.Client(t)
	storetest.CloseUnderLoad(t, func(t *testing.T, coalesce bool) storetest.Closer {
		var opts Options
		if coalesce {
			opts.Coalesce = 64
		}
		st, err := New(context.Background(), srv.Client(t), opts)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}, func() int64 { return redistest.ScriptCalls(t, monitor) })
}
