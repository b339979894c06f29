package redisstore

import (
	"context"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// dials watches the client's dials (a redis.Hook): go-redis dials again and
// again until a call's deadline when a server refuses connections, and the
// call then fails with the deadline alone. What the dials said tells such a
// timeout from a slow server: the server is unavailable.
type dials struct {
	failed sync.Map // address → *dialFailure, the last failed dial
}

type dialFailure struct {
	at  time.Time
	err error
}

func (d *dials) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			d.failed.Store(addr, &dialFailure{time.Now(), err})
		} else {
			d.failed.Delete(addr)
		}
		return c, err
	}
}

func (d *dials) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dials) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// classify is err, a call's error from start on, saying the server is
// unavailable (shared.ErrUnavailable, with the dial's error) when it is a
// timeout during which a dial to node ("" : any) failed.
func (d *dials) classify(err error, node string, start time.Time) error {
	if err == nil || !shared.IsTimeout(err) {
		return err
	}
	var found *dialFailure
	d.failed.Range(func(addr, v any) bool {
		if f := v.(*dialFailure); (node == "" || addr == node) && !f.at.Before(start) {
			found = f
			return false
		}
		return true
	})
	if found == nil {
		return err
	}
	return fmt.Errorf("%w: %w (%w)", shared.ErrUnavailable, found.err, err)
}
