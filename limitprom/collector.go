// Package limitprom exports limitgen's observations to Prometheus: a
// prometheus.Collector that reads, when Prometheus scrapes, the counters
// limitgen keeps anyway (the doors' decisions, the tables' keys, the
// stores' calls and breakers), so that collecting adds nothing to a check.
//
// Metrics (names after Prometheus's conventions: a unit suffix, _total on
// counters; never a per-key label):
//
//	limitgen_decisions_total{door, route, tier, rule, outcome}  counter: the doors' decisions (verdict.Counters), degraded outcomes included
//	limitgen_table_keys{rule}                        gauge: keys tracked
//	limitgen_table_evictions_total{rule}             counter: buckets reclaimed
//	limitgen_table_cap_refusals_total{rule}          counter: new keys that met the key cap with nothing to reclaim
//	limitgen_slots_held{rule}                        gauge: an in-flight rule's slots held (requests running)
//	limitgen_slots_expired_total{rule}               counter: its slots that expired unreleased (a leak, seen)
//	limitgen_store_checks_total{store}               counter: checks sent to the store
//	limitgen_store_degraded_total{store}             counter: checks the failure settings decided
//	limitgen_store_batches_total{store}              counter: coalesced round trips
//	limitgen_store_lease_grants_total{store}         counter: lease calls that granted tokens
//	limitgen_store_leased_tokens_total{store}        counter: the tokens they granted
//	limitgen_store_round_trip_seconds{store}         histogram: round trips to the server
//	limitgen_store_breaker_open{store, node}         gauge: 1 while the node's breaker is open
//	limitgen_store_breaker_failures{store, node}     gauge: the node's failed calls in a row
//
// It lives in a module of its own so that a service without Prometheus
// depends on no Prometheus client.
package limitprom

import (
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"github.com/prometheus/client_golang/prometheus"
)

// Store is what the collector reads of a store (redisstore.Store,
// pgstore.Store: a shared.Engine).
type Store interface {
	Stats() shared.Stats
	Breakers() []shared.BreakerState
}

// Table is what the collector reads of a keyed limiter (a generated
// limiter's Local(), or an atomicbucket.Table).
type Table interface {
	Stats() atomicbucket.TableStats
}

// Slots is what the collector reads of an in-flight rule's limiter (an
// atomicslot.Table or Gate, which a generated limiter embeds).
type Slots interface {
	Stats() atomicslot.Stats
}

// Options name what a Collector reads; each is optional.
type Options struct {
	// Doors are the doors' decisions by route, tier, rule and outcome (each
	// door's Config.Counters), by the door's name: verdict.DoorHTTP for the
	// generated middleware, verdict.DoorGRPC for the interceptors (whose
	// routes are method entries), verdict.DoorRLS for Envoy's rate-limit
	// service (descriptors). The name is the decisions' door label.
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

// Collector is a prometheus.Collector over Options' sources. Register it
// once (prometheus.MustRegister(limitprom.New(opts))).
type Collector struct {
	o Options

	decisions, unmatched, keys, evictions, capRefusals, held, expired *prometheus.Desc
	checks, degraded, batches, grants, leased, trips, open, fails     *prometheus.Desc
	settlements, forgiven, releaseFailed                              *prometheus.Desc
}

// releaseFailer is a shared in-flight rule's limiter: the releases its
// store did not take.
type releaseFailer interface{ ReleaseFailed() int64 }

// New returns a Collector over o.
func New(o Options) *Collector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("limitgen_"+name, help, labels, nil)
	}
	return &Collector{
		o:             o,
		decisions:     d("decisions_total", "Requests the doors decided, by door (http, grpc, rls), route (an HTTP route's pattern, a gRPC method entry, an RLS descriptor), tier (empty for a route that checks one rule), deciding rule and outcome (degraded_*: the store could not decide and the rule's on_failure setting did).", "door", "route", "tier", "rule", "outcome"),
		unmatched:     d("unmatched_total", "Requests a door let through unchecked because no route of the policy covers them (Envoy's rate-limit service: descriptors no pattern matched), by door.", "door"),
		keys:          d("table_keys", "Keys a rule's table tracks.", "rule"),
		evictions:     d("table_evictions_total", "Buckets a rule's table reclaimed (full ones: nothing is lost).", "rule"),
		capRefusals:   d("table_cap_refusals_total", "New keys that met a rule's key cap with nothing to reclaim.", "rule"),
		held:          d("slots_held", "Slots of an in-flight rule held: its requests running.", "rule"),
		expired:       d("slots_expired_total", "Slots of an in-flight rule that reached its max_hold unreleased: requests that ran longer, or whose release never came.", "rule"),
		releaseFailed: d("slots_release_failed_total", "Releases of a shared in-flight rule's slots that its store did not take (down, or its breaker open): each slot stays held there until its max_hold.", "rule"),
		checks:        d("store_checks_total", "Checks sent to the store (a coalesced batch counts each of its checks).", "store"),
		degraded:      d("store_degraded_total", "Checks the failure settings decided: the store failed, a breaker was open, or the store was closed.", "store"),
		batches:       d("store_batches_total", "Round trips that carried coalesced checks.", "store"),
		grants:        d("store_lease_grants_total", "Lease calls that granted tokens.", "store"),
		leased:        d("store_leased_tokens_total", "Tokens granted to leases.", "store"),
		trips:         d("store_round_trip_seconds", "Round trips to the store's server, from a connection in hand to the reply; failed ones included.", "store"),
		open:          d("store_breaker_open", "1 while the circuit breaker of the store's server (a Cluster's master) is open.", "store", "node"),
		fails:         d("store_breaker_failures", "Failed calls in a row to the store's server.", "store", "node"),
		settlements:   d("settlements_total", "Requests of settled routes when their handler returned, by door and outcome: settled (at the actual cost), kept (no readable actual: the estimate stays), failed (a store could not settle: the estimate stays).", "door", "outcome"),
		forgiven:      d("settle_forgiven_tokens_total", "Tokens of settlements' excess beyond the rules' debt bounds, not charged, by door.", "door"),
	}
}

// Describe sends the metrics' descriptions.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.decisions, c.unmatched, c.keys, c.evictions, c.capRefusals, c.held, c.expired,
		c.checks, c.degraded, c.batches, c.grants, c.leased, c.trips, c.open, c.fails, c.settlements, c.forgiven, c.releaseFailed} {
		ch <- d
	}
}

// Collect reads every source once and sends its metrics.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	for door, dc := range c.o.Doors {
		if dc == nil {
			continue
		}
		for _, n := range dc.Snapshot() {
			for o, v := range n.Outcomes {
				ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(v), door, n.Route, n.Tier, n.Rule, verdict.Outcome(o).String())
			}
		}
	}
	for door, f := range c.o.Unmatched {
		if f != nil {
			ch <- prometheus.MustNewConstMetric(c.unmatched, prometheus.CounterValue, float64(f()), door)
		}
	}
	for door, f := range c.o.Settlements {
		if f == nil {
			continue
		}
		s := f()
		ch <- prometheus.MustNewConstMetric(c.settlements, prometheus.CounterValue, float64(s.Settled), door, "settled")
		ch <- prometheus.MustNewConstMetric(c.settlements, prometheus.CounterValue, float64(s.Kept), door, "kept")
		ch <- prometheus.MustNewConstMetric(c.settlements, prometheus.CounterValue, float64(s.Failed), door, "failed")
		ch <- prometheus.MustNewConstMetric(c.forgiven, prometheus.CounterValue, float64(s.Forgiven), door)
	}
	for rule, t := range c.o.Tables {
		s := t.Stats()
		ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys), rule)
		ch <- prometheus.MustNewConstMetric(c.evictions, prometheus.CounterValue, float64(s.Evictions), rule)
		ch <- prometheus.MustNewConstMetric(c.capRefusals, prometheus.CounterValue, float64(s.AtCapHits), rule)
	}
	for rule, sl := range c.o.Slots {
		s := sl.Stats()
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(s.Held), rule)
		ch <- prometheus.MustNewConstMetric(c.expired, prometheus.CounterValue, float64(s.Expired), rule)
		if rf, ok := sl.(releaseFailer); ok {
			ch <- prometheus.MustNewConstMetric(c.releaseFailed, prometheus.CounterValue, float64(rf.ReleaseFailed()), rule)
		}
		if s.Keys > 0 || s.AtCapHits > 0 {
			ch <- prometheus.MustNewConstMetric(c.keys, prometheus.GaugeValue, float64(s.Keys), rule)
			ch <- prometheus.MustNewConstMetric(c.capRefusals, prometheus.CounterValue, float64(s.AtCapHits), rule)
		}
	}
	for name, st := range c.o.Stores {
		s := st.Stats()
		ch <- prometheus.MustNewConstMetric(c.checks, prometheus.CounterValue, float64(s.Calls), name)
		ch <- prometheus.MustNewConstMetric(c.degraded, prometheus.CounterValue, float64(s.Degraded), name)
		ch <- prometheus.MustNewConstMetric(c.batches, prometheus.CounterValue, float64(s.Batches), name)
		ch <- prometheus.MustNewConstMetric(c.grants, prometheus.CounterValue, float64(s.Grants), name)
		ch <- prometheus.MustNewConstMetric(c.leased, prometheus.CounterValue, float64(s.GrantedTokens), name)
		buckets := make(map[float64]uint64, len(shared.LatencyBounds))
		var cum uint64
		for i, b := range shared.LatencyBounds {
			cum += uint64(s.Latency.Counts[i])
			buckets[b.Seconds()] = cum
		}
		ch <- prometheus.MustNewConstHistogram(c.trips, uint64(s.Latency.Count), s.Latency.Sum.Seconds(), buckets, name)
		for _, b := range st.Breakers() {
			open := 0.0
			if b.Open {
				open = 1
			}
			ch <- prometheus.MustNewConstMetric(c.open, prometheus.GaugeValue, open, name, b.Node)
			ch <- prometheus.MustNewConstMetric(c.fails, prometheus.GaugeValue, float64(b.Failures), name, b.Node)
		}
	}
}
