package redisstore

import (
	"testing"

	"github.com/limitgen/limitgen/internal/storetest"
	"github.com/limitgen/limitgen/redisstore/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// Eight clients with their own connections check one key, and a tier of it
// and a second key, at explicit times (storetest.Histories): every history is
// linearizable against the GCRA model, and none with a decision flipped is.
func TestHistoriesAreLinearizable(t *testing.T) {
	srv := redistest.Start(t)
	storetest.Histories(t, func(int) storetest.Store {
		client := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { client.Close() })
		return scriptStore(client)
	})
}
