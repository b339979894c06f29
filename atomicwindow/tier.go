package atomicwindow

import "github.com/limitgen/limitgen/atomicbucket"

// Step is key's part in a tier request of the given cost (see TierAt).
func (t *Table[K]) Step(key K, cost int64) atomicbucket.TierStep {
	return windowTableStep[K]{t, key, cost}
}

// Step is the window's part in a tier request of the given cost (see TierAt).
func (g *Window) Step(cost int64) atomicbucket.TierStep { return windowStep{g, cost} }

type windowTableStep[K comparable] struct {
	t    *Table[K]
	key  K
	cost int64
}

func (s windowTableStep[K]) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.t.AllowNAt(s.key, now, s.cost)
}
func (s windowTableStep[K]) PeekAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.t.PeekAt(s.key, now, s.cost)
}
func (s windowTableStep[K]) RefundAt(atomicbucket.Time) {}

type windowStep struct {
	w    *Window
	cost int64
}

func (s windowStep) AllowNAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.w.AllowNAt(now, s.cost)
}
func (s windowStep) PeekAt(now atomicbucket.Time) atomicbucket.Decision {
	return s.w.PeekAt(now, s.cost)
}
func (s windowStep) RefundAt(atomicbucket.Time) {}
