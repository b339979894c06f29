package storetest

import (
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
	"github.com/limitgen/limitgen/shared"
)

// Harness is what Run needs of a store: how to start a server for it, and a
// few figures of that server's.
type Harness struct {
	// Name is the server's name in messages ("Redis", "PostgreSQL").
	Name string
	// Start starts a new, empty server for one property (Run starts one a
	// property, so that no property sees another's buckets) and stops it
	// when t ends. It may be called from several goroutines at once (Run's
	// properties at explicit times run in parallel).
	Start func(t *testing.T) Server
	// UpWithin is how soon after its server comes up a store made while it
	// was down must decide (the breaker's longest pause, and whatever the
	// store sets up first).
	UpWithin time.Duration
	// OverloadCallers is how many callers Overload drives on a store whose
	// client has one connection, and OverloadTimeout the timeout of its
	// variant that does not coalesce: a few round trips, which the callers'
	// queue for the connection outlasts while a round trip does not.
	OverloadCallers int
	OverloadTimeout time.Duration
}

// Server is one server a property runs on.
type Server struct {
	// Open makes a new store on the server with o: a new client or pool, as
	// another instance of a service has.
	Open func(t *testing.T, o Options) Instance
	// Timed returns the store's backend at explicit times (Backend), on a
	// client of its own.
	Timed func(t *testing.T) *TimedStore
	// Calls counts the calls the server has had so far from the stores Open
	// made (Redis: script calls; PostgreSQL: statements).
	Calls func() int64
	// Forget does what the store does on a schedule to forget full buckets
	// (PostgreSQL's sweep); nil when the server does it by itself (Redis's
	// expiry).
	Forget func(t *testing.T)
	// Stop stops the server; Restart starts it again where it was.
	Stop, Restart func()
	// Says is what a store's SharedErr names while the server is down.
	Says string
}

// Options are a store's settings as Run asks for them.
type Options struct {
	Namespace string
	// Coalesce: 0, the store's default; above 0, at most that many checks a
	// call; below 0, a call a check.
	Coalesce int
	// Timeout: 0, the store's default.
	Timeout time.Duration
	// Conns bounds the client's connections: 0, a few (the property does
	// not depend on them).
	Conns int
}

// Instance is a store as Open makes it.
type Instance interface {
	shared.Store
	Stats() shared.Stats
	Breakers() []shared.BreakerState
	Close()
}

// atExplicitTimes names the properties Run runs in parallel: those that
// check a store only through Server.Timed, at times they give.
var atExplicitTimes = map[string]bool{
	"Greedy": true, "Interval": true, "Tiers": true, "Batches": true, "Versions": true, "LeaseEnvelope": true, "LeaseExpiry": true,
	"Settle": true,
}

// Run holds a store to the whole contract, each property a subtest on a server
// of its own: decisions equal to the exact reference at explicit times
// (greedy, interval, tiers, coalesced batches, two versions of a rule,
// leases), histories linearizable, namespaces apart, a rolling deploy within
// its envelope, a converted bucket kept for the larger burst, generated
// packages sharing their limits across instances (rules, tiers, leased tiers,
// coalesced checks, numbers changed at run time, the middleware), close under
// load, the process's own overload no failure of the server's, a start while
// the server is down, and the middleware's answers once it is gone. A store
// outside this repository passes the same tests through its own Harness.
// Numbers sources have their own property (SourceConvergence), and fuzzed
// programs theirs (Program).
//
// The properties at explicit times (atExplicitTimes) run in parallel with
// each other (go test's -parallel at a time), after the others: they read no
// clock and set no timeout, so a busy machine cannot fail them, and two of
// them keep two cores busy where one keeps a round trip waiting. Start must
// then be safe to call from several goroutines at once.
func Run(t *testing.T, h Harness) {
	// A harness missing a part would pass a property vacuously (Overload
	// with no callers) or panic: say which part instead.
	switch {
	case h.Name == "":
		t.Fatal("storetest.Harness: Name is empty")
	case h.Start == nil:
		t.Fatal("storetest.Harness: Start is nil")
	case h.UpWithin <= 0:
		t.Fatal("storetest.Harness: UpWithin is not above 0")
	case h.OverloadCallers <= 0 || h.OverloadTimeout <= 0:
		t.Fatal("storetest.Harness: OverloadCallers and OverloadTimeout must be above 0")
	}
	instances := func(t *testing.T, srv Server, o Options) func() *sharedlimits.Limits {
		return func() *sharedlimits.Limits {
			l := sharedlimits.New(sharedlimits.WithStore(srv.Open(t, o)))
			if err := l.SharedErr(); err != nil {
				t.Fatal(err)
			}
			return l
		}
	}
	on := func(name string, f func(t *testing.T, srv Server)) {
		t.Run(name, func(t *testing.T) {
			if atExplicitTimes[name] {
				t.Parallel()
			}
			srv := h.Start(t)
			if srv.Open == nil || srv.Timed == nil || srv.Calls == nil || srv.Stop == nil || srv.Restart == nil || srv.Says == "" {
				t.Fatalf("storetest.Server from Start: Open, Timed, Calls, Stop, Restart and Says are required (Forget alone may be nil): %+v", srv)
			}
			f(t, srv)
		})
	}
	later := time.Now().Unix() + 86400

	on("Greedy", func(t *testing.T, srv Server) {
		exact, decisions := Greedy(t, srv.Timed(t), 3, 200, 1_790_000_000)
		if exact < 50 {
			t.Fatalf("only %d exact rules drawn", exact)
		}
		t.Logf("%d exact rules, %d decisions equal to the reference", exact, decisions)
	})
	on("Interval", func(t *testing.T, srv Server) {
		t.Logf("%d interval decisions equal to the reference", Interval(t, srv.Timed(t), 11, 120, later))
	})
	on("Tiers", func(t *testing.T, srv Server) {
		decisions, denied := Tiers(t, srv.Timed(t), 7, 60, later)
		t.Logf("%d tier decisions (%d denied) equal to the reference", decisions, denied)
	})
	on("Settle", func(t *testing.T, srv Server) {
		exact, owed := Settle(t, srv.Timed(t), 19, 60, later)
		t.Logf("%d exact rules: every check and settlement (%d of them owing) equal to the reference", exact, owed)
	})
	on("Batches", func(t *testing.T, srv Server) {
		decisions, runs := Batches(t, srv.Timed(t), 13, 40, later)
		t.Logf("%d batched decisions (%d runs of one key and cost) equal to the reference", decisions, runs)
	})
	on("Versions", func(t *testing.T, srv Server) {
		decisions, converted := Versions(t, srv.Timed(t), 5, 150, later)
		if converted < 1000 {
			t.Fatalf("only %d of %d decisions on a converted bucket", converted, decisions)
		}
		t.Logf("%d decisions equal to the reference, %d of them on a bucket the other version wrote", decisions, converted)
	})
	on("LeaseEnvelope", func(t *testing.T, srv Server) {
		rules, total, leased := LeaseEnvelope(t, srv.Timed(t))
		t.Logf("%d rules: %d tokens admitted, %d of them from leases; no window beyond the envelope", rules, total, leased)
	})
	on("LeaseExpiry", func(t *testing.T, srv Server) { LeaseExpiry(t, srv.Timed(t)) })
	on("Histories", func(t *testing.T, srv Server) {
		Histories(t, func(int) Store { return srv.Timed(t) })
	})
	on("Namespaces", func(t *testing.T, srv Server) {
		Namespaces(t, func(t *testing.T, ns string) shared.Store { return srv.Open(t, Options{Namespace: ns}) })
	})
	on("RollingDeploy", func(t *testing.T, srv Server) {
		// A call a check: a coalesced batch of one version can take a whole
		// bucket before the other's first check, and both must admit. A
		// long timeout: eight callers on two keys, under -race.
		figures := RollingDeploy(t, func(t *testing.T) shared.Store {
			return srv.Open(t, Options{Coalesce: -1, Timeout: 10 * time.Second})
		}, 4*time.Second)
		for _, f := range figures {
			t.Log(f)
		}
	})
	on("KeptForTheLargerBurst", func(t *testing.T, srv Server) {
		KeptForTheLargerBurst(t, func(t *testing.T) shared.Store {
			return srv.Open(t, Options{Timeout: 10 * time.Second})
		}, func() {
			if srv.Forget != nil {
				srv.Forget(t)
			}
		})
	})
	on("GeneratedInstances", func(t *testing.T, srv Server) { GeneratedInstances(t, instances(t, srv, Options{})) })
	on("GeneratedCompositeKey", func(t *testing.T, srv Server) { GeneratedCompositeKey(t, instances(t, srv, Options{})) })
	on("GeneratedOneWay", func(t *testing.T, srv Server) { GeneratedOneWay(t, instances(t, srv, Options{})) })
	on("GeneratedMiddleware", func(t *testing.T, srv Server) { GeneratedMiddleware(t, instances(t, srv, Options{})) })
	on("GeneratedTier", func(t *testing.T, srv Server) { GeneratedTier(t, instances(t, srv, Options{})) })
	on("GeneratedMixedTier", func(t *testing.T, srv Server) { GeneratedMixedTier(t, instances(t, srv, Options{})) })
	on("GeneratedMixedTierCoalesced", func(t *testing.T, srv Server) {
		GeneratedMixedTier(t, instances(t, srv, Options{Coalesce: 64}))
	})
	on("GeneratedMeteredTier", func(t *testing.T, srv Server) { GeneratedMeteredTier(t, instances(t, srv, Options{})) })
	on("GeneratedMeteredTierCoalesced", func(t *testing.T, srv Server) {
		GeneratedMeteredTier(t, instances(t, srv, Options{Coalesce: 64}))
	})
	on("Refund", func(t *testing.T, srv Server) { Refund(t, srv.Open(t, Options{})) })
	on("WindowNumbersChange", func(t *testing.T, srv Server) { WindowNumbersChange(t, srv.Open(t, Options{})) })
	on("WindowKeyNumbers", func(t *testing.T, srv Server) { WindowKeyNumbers(t, srv.Open(t, Options{})) })
	on("WindowKeyNumbersCoalesced", func(t *testing.T, srv Server) { WindowKeyNumbers(t, srv.Open(t, Options{Coalesce: 64})) })
	on("WindowLeases", func(t *testing.T, srv Server) {
		WindowLeases(t, func(t *testing.T) shared.Store { return srv.Open(t, Options{}) })
	})
	on("MultiStore", func(t *testing.T, srv Server) {
		MultiStore(t, func(t *testing.T, ns string) shared.Store { return srv.Open(t, Options{Namespace: ns}) })
	})
	on("GeneratedSlotsTier", func(t *testing.T, srv Server) { GeneratedSlotsTier(t, instances(t, srv, Options{})) })
	on("GeneratedSlots", func(t *testing.T, srv Server) { GeneratedSlots(t, instances(t, srv, Options{}), srv.Stop) })
	on("GeneratedSettle", func(t *testing.T, srv Server) { GeneratedSettle(t, instances(t, srv, Options{}), srv.Stop) })
	on("GeneratedWindowGiveBack", func(t *testing.T, srv Server) { GeneratedWindowGiveBack(t, instances(t, srv, Options{})) })
	on("GeneratedSlotsPlans", func(t *testing.T, srv Server) { GeneratedSlotsPlans(t, instances(t, srv, Options{})) })
	on("GeneratedSlotsWait", func(t *testing.T, srv Server) { GeneratedSlotsWait(t, instances(t, srv, Options{})) })
	on("GeneratedSlotsLeased", func(t *testing.T, srv Server) { GeneratedSlotsLeased(t, instances(t, srv, Options{})) })
	on("GeneratedSlotsNumbers", func(t *testing.T, srv Server) { GeneratedSlotsNumbers(t, instances(t, srv, Options{})) })
	on("GeneratedSlotsCoalesced", func(t *testing.T, srv Server) {
		GeneratedSlots(t, instances(t, srv, Options{Coalesce: 64}), srv.Stop)
	})
	on("GeneratedWindows", func(t *testing.T, srv Server) { GeneratedWindows(t, instances(t, srv, Options{})) })
	on("GeneratedWindowsCoalesced", func(t *testing.T, srv Server) { GeneratedWindows(t, instances(t, srv, Options{Coalesce: 64})) })
	on("GeneratedWindowReset", func(t *testing.T, srv Server) { GeneratedWindowReset(t, instances(t, srv, Options{})) })
	on("GeneratedWindowKeyNumbers", func(t *testing.T, srv Server) { GeneratedWindowKeyNumbers(t, instances(t, srv, Options{})) })
	on("GeneratedLeasedFields", func(t *testing.T, srv Server) { GeneratedLeasedFields(t, instances(t, srv, Options{})) })
	on("GeneratedLeasedTier", func(t *testing.T, srv Server) {
		GeneratedLeasedTier(t, instances(t, srv, Options{}), srv.Calls)
	})
	on("GeneratedCoalesced", func(t *testing.T, srv Server) {
		GeneratedCoalesced(t, instances(t, srv, Options{Coalesce: 64}), srv.Calls)
	})
	on("GeneratedNumbers", func(t *testing.T, srv Server) { GeneratedNumbers(t, instances(t, srv, Options{})) })
	on("GeneratedMiddlewareDegraded", func(t *testing.T, srv Server) {
		GeneratedMiddlewareDegraded(t, instances(t, srv, Options{}), srv.Stop)
	})
	on("CloseUnderLoad", func(t *testing.T, srv Server) {
		CloseUnderLoad(t, func(t *testing.T, coalesce bool) Closer {
			o := Options{Coalesce: -1, Conns: 8}
			if coalesce {
				o.Coalesce = 64
			}
			return srv.Open(t, o)
		}, srv.Calls)
	})
	on("Overload", func(t *testing.T, srv Server) {
		Overload(t, h.OverloadCallers, func(t *testing.T, coalesce bool) Breakered {
			o := Options{Coalesce: -1, Timeout: h.OverloadTimeout, Conns: 1}
			if coalesce {
				// The default timeout: a batch of 256 checks is one call.
				o = Options{Coalesce: 256, Conns: 1}
			}
			return srv.Open(t, o)
		})
	})
	on("RecoversIdle", func(t *testing.T, srv Server) {
		RecoversIdle(t, srv.Open(t, Options{}), srv.Stop, srv.Restart)
	})
	on("StartsWhileDown", func(t *testing.T, srv Server) {
		srv.Stop()
		StartsWhileDown(t, Down{Server: h.Name, Store: srv.Open(t, Options{}), Says: srv.Says,
			Up: srv.Restart, Stop: srv.Stop, Within: h.UpWithin})
	})
}
