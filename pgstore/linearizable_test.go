package pgstore

import (
	"testing"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/pgstore/pgtest"
)

// Eight clients with a connection each check one key, and a tier of it and a
// second key, at explicit times (storetest.Histories): every history is
// linearizable against the GCRA model, and none with a decision flipped is.
func TestHistoriesAreLinearizable(t *testing.T) {
	srv := pgtest.Start(t)
	storetest.Histories(t, func(int) storetest.Store {
		_, st := open(t, srv, 1, Options{})
		return atStore(st)
	})
}
