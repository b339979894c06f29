// Package limitotel exports limitgen's observations as OpenTelemetry
// instruments (go.opentelemetry.io/otel/metric): asynchronous ones, read by
// one callback when the SDK collects, from the counters limitgen keeps
// anyway (the doors' decisions, the tables' keys, the stores' calls and
// breakers), so that collecting adds nothing to a check. The same
// observations as package limitprom's, named after OpenTelemetry's
// conventions (dotted names, units as UCUM, attributes, never a key):
//
//	limitgen.decisions              counter {decision}: the doors' decisions; attributes door, route, tier, rule, outcome
//	limitgen.table.keys             gauge   {key}: keys a rule's table tracks; attribute rule
//	limitgen.table.evictions        counter {bucket}: buckets reclaimed; attribute rule
//	limitgen.table.cap_refusals     counter {key}: new keys that met the key cap with nothing to reclaim
//	limitgen.slots.held             gauge   {slot}: an in-flight rule's slots held (requests running); attribute rule
//	limitgen.slots.expired          counter {slot}: its slots that expired unreleased (a leak, seen)
//	limitgen.store.checks           counter {check}: checks sent to the store; attribute store
//	limitgen.store.degraded         counter {check}: checks the failure settings decided
//	limitgen.store.batches          counter {round_trip}: coalesced round trips
//	limitgen.store.lease.grants     counter {grant}: lease calls that granted tokens
//	limitgen.store.lease.tokens     counter {token}: the tokens they granted
//	limitgen.store.round_trips      counter {round_trip}: round trips to the store's server
//	limitgen.store.round_trip.time  counter s: their total duration (with round_trips, the mean)
//	limitgen.store.breaker.open     gauge   {breaker}: 1 while a server's breaker is open; attributes store, node
//
// The SDK has no asynchronous histogram, so the round trips' distribution
// (shared.Stats.Latency's buckets) is exported by limitprom only; here their
// count and total.
//
// It lives in a module of its own so that a service without OpenTelemetry
// depends on none of it.
package limitotel

import (
	"context"
	"errors"
	"math"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Store is what the instruments read of a store (redisstore.Store,
// pgstore.Store: a shared.Engine).
type Store interface {
	Stats() shared.Stats
	Breakers() []shared.BreakerState
}

// Table is what the instruments read of a keyed limiter.
type Table interface {
	Stats() atomicbucket.TableStats
}

// Slots is what the instruments read of an in-flight rule's limiter (an
// atomicslot.Table or Gate, which a generated limiter embeds).
type Slots interface {
	Stats() atomicslot.Stats
}

// Options name what the instruments read; each is optional.
type Options struct {
	// Doors are the doors' decisions by route, tier, rule and outcome (each
	// door's Config.Counters), by the door's name: verdict.DoorHTTP for the
	// generated middleware, verdict.DoorGRPC for the interceptors (whose
	// routes are method entries), verdict.DoorRLS for Envoy's rate-limit
	// service (descriptors). The name is the decisions' door attribute.
	Doors map[string]*verdict.Counters
	// Tables are keyed limiters, by rule name.
	Tables map[string]Table
	// Slots are in-flight rules' limiters, by rule name: their slots held
	// and expired, and, for a keyed one, its keys and cap refusals (as
	// Tables' are).
	Slots map[string]Slots
	// Stores are stores, by a name of the service's choice ("redis").
	Stores map[string]Store
	// Unmatched are the requests a door let through because no route of the
	// policy covers them, by the door's name: verdict.DoorRLS's descriptors
	// no pattern matched (limitrls.Config.Unmatched).
	Unmatched map[string]func() uint64
	// Settlements are a door's settled costs, by the door's name: its
	// SettleStats (the middleware's, the interceptors').
	Settlements map[string]func() verdict.SettleStats
}

// Register creates the instruments on meter and the callback that reads o;
// unregister with the returned Registration.
func Register(meter metric.Meter, o Options) (metric.Registration, error) {
	var errs []error
	counter := func(name, unit, desc string) metric.Int64ObservableCounter {
		c, err := meter.Int64ObservableCounter(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	gauge := func(name, unit, desc string) metric.Int64ObservableGauge {
		g, err := meter.Int64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	decisions := counter("limitgen.decisions", "{decision}", "Requests the doors decided, by door (http, grpc, rls), route (an HTTP route's pattern, a gRPC method entry, an RLS descriptor), tier (empty for a route that checks one rule), deciding rule and outcome (degraded_*: the store could not decide and the rule's on_failure setting did).")
	unmatched := counter("limitgen.unmatched", "{request}", "Requests a door let through unchecked because no route of the policy covers them (Envoy's rate-limit service: descriptors no pattern matched), by door.")
	keys := gauge("limitgen.table.keys", "{key}", "Keys a rule's table tracks.")
	evictions := counter("limitgen.table.evictions", "{bucket}", "Buckets a rule's table reclaimed (full ones: nothing is lost).")
	refusals := counter("limitgen.table.cap_refusals", "{key}", "New keys that met a rule's key cap with nothing to reclaim.")
	held := gauge("limitgen.slots.held", "{slot}", "Slots of an in-flight rule held: its requests running.")
	releaseFailed := counter("limitgen.slots.release_failed", "{slot}", "Releases of a shared in-flight rule's slots that its store did not take (down, or its breaker open): each slot stays held there until its max_hold.")
	expired := counter("limitgen.slots.expired", "{slot}", "Slots of an in-flight rule that reached its max_hold unreleased: requests that ran longer, or whose release never came.")
	checks := counter("limitgen.store.checks", "{check}", "Checks sent to the store (a coalesced batch counts each of its checks).")
	degraded := counter("limitgen.store.degraded", "{check}", "Checks the failure settings decided: the store failed, a breaker was open, or the store was closed.")
	batches := counter("limitgen.store.batches", "{round_trip}", "Round trips that carried coalesced checks.")
	grants := counter("limitgen.store.lease.grants", "{grant}", "Lease calls that granted tokens.")
	tokens := counter("limitgen.store.lease.tokens", "{token}", "Tokens granted to leases.")
	trips := counter("limitgen.store.round_trips", "{round_trip}", "Round trips to the store's server, failed ones included.")
	tripTime, err := meter.Float64ObservableCounter("limitgen.store.round_trip.time", metric.WithUnit("s"),
		metric.WithDescription("Total duration of the round trips to the store's server, from a connection in hand to the reply."))
	errs = append(errs, err)
	settlements := counter("limitgen.settlements", "{request}", "Requests of settled routes when their handler returned, by door and outcome: settled (at the actual cost), kept (no readable actual: the estimate stays), failed (a store could not settle: the estimate stays).")
	forgiven := counter("limitgen.settle.forgiven", "{token}", "Tokens of settlements' excess beyond the rules' debt bounds, not charged, by door.")
	open := gauge("limitgen.store.breaker.open", "{breaker}", "1 while the circuit breaker of the store's server (a Cluster's master) is open.")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return meter.RegisterCallback(func(_ context.Context, ob metric.Observer) error {
		for door, c := range o.Doors {
			if c == nil {
				continue
			}
			for _, n := range c.Snapshot() {
				for oc, v := range n.Outcomes {
					ob.ObserveInt64(decisions, int64(v), metric.WithAttributes(attribute.String("door", door),
						attribute.String("route", n.Route), attribute.String("tier", n.Tier),
						attribute.String("rule", n.Rule), attribute.String("outcome", verdict.Outcome(oc).String())))
				}
			}
		}
		for door, f := range o.Unmatched {
			if f != nil {
				ob.ObserveInt64(unmatched, int64(min(f(), math.MaxInt64)), metric.WithAttributes(attribute.String("door", door)))
			}
		}
		for door, f := range o.Settlements {
			if f == nil {
				continue
			}
			s := f()
			for _, v := range []struct {
				outcome string
				n       uint64
			}{{"settled", s.Settled}, {"kept", s.Kept}, {"failed", s.Failed}} {
				ob.ObserveInt64(settlements, int64(min(v.n, math.MaxInt64)), metric.WithAttributes(attribute.String("door", door), attribute.String("outcome", v.outcome)))
			}
			ob.ObserveInt64(forgiven, int64(min(s.Forgiven, math.MaxInt64)), metric.WithAttributes(attribute.String("door", door)))
		}
		for rule, t := range o.Tables {
			s := t.Stats()
			at := metric.WithAttributes(attribute.String("rule", rule))
			ob.ObserveInt64(keys, s.Keys, at)
			ob.ObserveInt64(evictions, s.Evictions, at)
			ob.ObserveInt64(refusals, s.AtCapHits, at)
		}
		for rule, sl := range o.Slots {
			s := sl.Stats()
			at := metric.WithAttributes(attribute.String("rule", rule))
			ob.ObserveInt64(held, s.Held, at)
			ob.ObserveInt64(expired, s.Expired, at)
			if rf, ok := sl.(interface{ ReleaseFailed() int64 }); ok {
				ob.ObserveInt64(releaseFailed, rf.ReleaseFailed(), at)
			}
			if s.Keys > 0 || s.AtCapHits > 0 {
				ob.ObserveInt64(keys, s.Keys, at)
				ob.ObserveInt64(refusals, s.AtCapHits, at)
			}
		}
		for name, st := range o.Stores {
			s := st.Stats()
			at := metric.WithAttributes(attribute.String("store", name))
			ob.ObserveInt64(checks, s.Calls, at)
			ob.ObserveInt64(degraded, s.Degraded, at)
			ob.ObserveInt64(batches, s.Batches, at)
			ob.ObserveInt64(grants, s.Grants, at)
			ob.ObserveInt64(tokens, s.GrantedTokens, at)
			ob.ObserveInt64(trips, s.Latency.Count, at)
			ob.ObserveFloat64(tripTime, s.Latency.Sum.Seconds(), at)
			for _, b := range st.Breakers() {
				v := int64(0)
				if b.Open {
					v = 1
				}
				ob.ObserveInt64(open, v, metric.WithAttributes(attribute.String("store", name), attribute.String("node", b.Node)))
			}
		}
		return nil
	}, decisions, unmatched, keys, evictions, refusals, held, expired, checks, degraded, batches, grants, tokens, trips, tripTime, open, settlements, forgiven, releaseFailed)
}
