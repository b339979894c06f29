package storetest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
)

// Down is a store made while its server is down, for StartsWhileDown.
type Down struct {
	Server string // its name in messages: "Redis", "PostgreSQL"
	Store  interface {
		shared.Store
		Stats() shared.Stats
	} // made by the store's New while nothing listens
	Says string // what SharedErr names while it is down (its address)
	Up   func() // starts the server
	Stop func() // stops it again
	// Within is how soon after Up the store must decide (the breaker's
	// longest pause, and whatever setup the store does first).
	Within time.Duration
}

// StartsWhileDown: a service starts while its store's server is down. New
// made the store; SharedErr says the store is not answering (naming d.Says);
// each check is decided by its rule's on_failure (Exports: deny) as an
// outage, counted degraded, its error classed "unavailable" (a refused
// connection, not a timeout); once the server answers, the store decides
// within d.Within and SharedErr is nil; when it dies again SharedErr says so
// again.
func StartsWhileDown(t *testing.T, d Down) {
	ctx := context.Background()
	lims := sharedlimits.New(sharedlimits.WithStore(d.Store))
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) || !strings.Contains(err.Error(), d.Says) {
		t.Fatalf("SharedErr with %s down: %v, want ErrUnhealthy saying %q", d.Server, err, d.Says)
	}
	for i := range 3 {
		res := lims.Exports.AllowN(ctx, 7, 1) // on_failure: deny
		if !res.Degraded || res.Allowed || !res.Outage {
			t.Fatalf("check %d with %s down: %+v, want a degraded denial for the outage", i, d.Server, res)
		}
		if c := shared.ErrorClass(res.Err); c != "unavailable" {
			t.Errorf("check %d with %s down: error class %q (%v), want unavailable", i, d.Server, c, res.Err)
		}
	}
	if s := d.Store.Stats(); s.Degraded < 3 {
		t.Errorf("Stats with %s down: %+v, want the 3 checks counted degraded", d.Server, s)
	}

	d.Up()
	up := time.Now()
	// An idle instance behind a readiness probe: no check comes, and the
	// store must still say it answers (it probes its server itself).
	for lims.SharedErr() != nil && time.Since(up) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if err := lims.SharedErr(); err != nil || time.Since(up) > d.Within {
		t.Errorf("%s up for %v with no check: SharedErr %v, want nil within %v (the store probes its server)", d.Server, time.Since(up), err, d.Within)
	}
	t.Logf("SharedErr nil %v after %s answered, with no check", time.Since(up), d.Server)
	var res verdict.Result
	for res = lims.Exports.AllowN(ctx, 8, 1); res.Degraded && time.Since(up) < 10*time.Second; res = lims.Exports.AllowN(ctx, 8, 1) {
		time.Sleep(10 * time.Millisecond)
	}
	if res.Degraded || !res.Allowed {
		t.Fatalf("%s up for %v: %+v, want the store to decide", d.Server, time.Since(up), res)
	}
	if took := time.Since(up); took > d.Within {
		t.Errorf("the store decided %v after %s answered, want within %v", took, d.Server, d.Within)
	}
	t.Logf("the store decided %v after %s answered", time.Since(up), d.Server)
	if err := lims.SharedErr(); err != nil {
		t.Errorf("SharedErr with %s up: %v", d.Server, err)
	}

	d.Stop()
	if res := lims.Exports.AllowN(ctx, 9, 1); !res.Degraded {
		t.Fatalf("a check with %s stopped: %+v, want degraded", d.Server, res)
	}
	if err := lims.SharedErr(); !errors.Is(err, shared.ErrUnhealthy) {
		t.Errorf("SharedErr after %s died: %v, want ErrUnhealthy (the live state)", d.Server, err)
	}
}
