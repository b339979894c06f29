package storetest

import (
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/shared"
)

// Timed is a store's backend at explicit times (its test variant: the
// server's clock replaced by Unix time sec seconds and usec µs), each method
// one round trip as shared.Backend's.
type Timed interface {
	TierAt(calls []shared.Call, mode shared.Mode, sec, usec int64) (shared.Reply, error)
	EachAt(calls []shared.Call, sec, usec int64) ([]shared.Reply, error)
	LeaseAt(c shared.Call, want int64, prev shared.Settlement, sec, usec int64) (shared.LeaseReply, error)
}

// Backend adapts a store's timed backend, with rules from newRule, to the
// interfaces the differential tests drive (Store, Batcher, LeaseStore), so
// that every store is held to the reference through the same code.
func Backend(b Timed, newRule func(string, atomicbucket.Limit) (*shared.StoreRule, error)) *TimedStore {
	return &TimedStore{b: b, newRule: newRule}
}

// TimedStore is what Backend returns.
type TimedStore struct {
	b       Timed
	newRule func(string, atomicbucket.Limit) (*shared.StoreRule, error)
}

func (s *TimedStore) Rule(name string, l atomicbucket.Limit) (any, bool, error) {
	r, err := s.newRule(name, l)
	if err != nil {
		return nil, false, err
	}
	return r, r.Exact(), nil
}

func (s *TimedStore) Check(steps []Part, take bool, sec, usec int64) (atomicbucket.Decision, int, error) {
	calls := make([]shared.Call, len(steps))
	clamped := make([]shared.Call, len(steps))
	for i, x := range steps {
		calls[i] = shared.Call{Rule: x.Rule.(*shared.StoreRule), Key: x.Key, Cost: x.Cost}
		clamped[i] = calls[i].Clamped()
	}
	mode := shared.ModePeek
	if take {
		mode = shared.ModeTake
	}
	r, err := s.b.TierAt(clamped, mode, sec, usec)
	if err != nil {
		return atomicbucket.Decision{}, -1, err
	}
	return calls[r.Index].Decision(r), r.Index, nil
}

func (s *TimedStore) Batch(rule any, keys []string, costs []int64, sec, usec int64) ([]atomicbucket.Decision, error) {
	calls := make([]shared.Call, len(keys))
	clamped := make([]shared.Call, len(keys))
	for i := range keys {
		calls[i] = shared.Call{Rule: rule.(*shared.StoreRule), Key: keys[i], Cost: costs[i]}
		clamped[i] = calls[i].Clamped()
	}
	rs, err := s.b.EachAt(clamped, sec, usec)
	if err != nil {
		return nil, err
	}
	ds := make([]atomicbucket.Decision, len(rs))
	for i, r := range rs {
		ds[i] = calls[i].Decision(r)
	}
	return ds, nil
}

func (s *TimedStore) Lease(rule any, key string, cost, want int64, prev shared.Settlement, sec, usec int64) (shared.Granted, error) {
	c := shared.Call{Rule: rule.(*shared.StoreRule), Key: key, Cost: cost}
	lr, err := s.b.LeaseAt(c.Clamped(), want, prev, sec, usec)
	if err != nil {
		return shared.Granted{}, err
	}
	return c.Granted(lr), nil
}
