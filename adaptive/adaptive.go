// Package adaptive tunes a rule's rate from the health of what it protects
// (the patterns article's "adaptive r"): a service reports each call to its
// downstream (Observe: its latency, whether it failed), and every interval a
// Controller judges the interval against targets — a latency quantile, an
// error ratio — and moves a factor by additive increase and multiplicative
// decrease (AIMD, as TCP does): a healthy interval adds Increase, an
// unhealthy one multiplies by Decrease, always within [Min, Max]. The factor
// goes through the override path, a generated package's ScaleNumbers, so it
// is checked and applied like every other change of numbers (buckets carried
// as they are, never reset), and it scales whatever a source put in force.
//
//	c, err := adaptive.New(adaptive.Config{Latency: 250 * time.Millisecond},
//		func(rate, burst overlay.Factor) error { return lims.ScaleNumbers("Global", rate, burst) })
//	...
//	start := time.Now()
//	resp, err := downstream.Call(ctx, req)
//	c.Observe(time.Since(start), err != nil)
//	...
//	go c.Run(ctx, func(r adaptive.Round) { log.Print(r) })
//
// An interval with fewer than MinSamples observations holds the factor: no
// traffic says nothing about health. A factor the rule refuses (its scaled
// numbers cannot be held) is not applied; the round reports the error and the
// factor stays. The factor is kept, and crosses to ScaleNumbers, as an
// integer in thousandths (overlay.Factor), never a float re-rounded.
package adaptive

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"time"

	"github.com/limitgen/limitgen/overlay"
)

// Config is a Controller's targets and steps. At least one target (Latency
// or Errors) is required; zero fields take the defaults given.
type Config struct {
	// Latency is the latency target: an interval whose Quantile latency
	// exceeds it is unhealthy. 0: latency is not judged.
	Latency time.Duration
	// Quantile is the latency judged, in (0, 1]: default 0.99.
	Quantile float64
	// Errors is the error ratio target, in (0, 1]: an interval whose ratio
	// of failed observations exceeds it is unhealthy. 0: errors are not
	// judged.
	Errors float64
	// Min and Max bound the factor: default 0.1 and 1. Max above 1 lets a
	// healthy downstream have more than the policy's numbers.
	Min, Max float64
	// Increase is added to the factor after a healthy interval: default 0.05.
	Increase float64
	// Decrease multiplies the factor after an unhealthy interval, in (0, 1):
	// default 0.5.
	Decrease float64
	// Interval is how often Run judges: default 1s.
	Interval time.Duration
	// MinSamples is the fewest observations an interval is judged on: an
	// interval with fewer holds the factor. Default 20.
	MinSamples int64
	// Burst scales the burst by the factor too; otherwise only the rate.
	Burst bool
	// Start is the factor the Controller starts at (applied by New): default
	// Max.
	Start float64
}

// Health is one interval's observations: how many, the latency at the
// Config's quantile (the upper bound of its histogram bucket: at most 6.25%
// above the observed value), and the ratio of failures.
type Health struct {
	Samples int64
	Latency time.Duration
	Errors  float64
}

// Verdict is what a step made of an interval.
type Verdict uint8

const (
	// TooFew: fewer observations than MinSamples; the factor holds.
	TooFew Verdict = iota
	// Healthy: every target met; the factor rises by Increase.
	Healthy
	// Unhealthy: a target missed; the factor falls by Decrease.
	Unhealthy
)

func (v Verdict) String() string {
	switch v {
	case TooFew:
		return "too few samples"
	case Healthy:
		return "healthy"
	case Unhealthy:
		return "unhealthy"
	}
	return fmt.Sprintf("Verdict(%d)", uint8(v))
}

// Round is one interval judged: its health, the verdict, and the factor in
// force after it. Err is set when the new factor could not be applied (the
// factor stayed).
type Round struct {
	At      time.Time
	Health  Health
	Verdict Verdict
	Factor  overlay.Factor
	Err     error
}

func (s Round) String() string {
	out := fmt.Sprintf("%s: %d samples, latency %v, errors %.4f: %s, factor %v",
		s.At.Format(time.RFC3339Nano), s.Health.Samples, s.Health.Latency, s.Health.Errors, s.Verdict, s.Factor)
	if s.Err != nil {
		out += ": not applied: " + s.Err.Error()
	}
	return out
}

// Controller moves one rule's factor from the health a service observes.
// Observe is safe from any goroutine and takes no lock; steps are taken one
// at a time.
type Controller struct {
	cfg   Config
	apply func(rate, burst overlay.Factor) error
	w     window

	mu sync.Mutex
	// factor is in force; min, max, inc as configured, in thousandths.
	factor, min, max, inc overlay.Factor
}

// ErrConfig is wrapped by New's errors for a bad Config.
var ErrConfig = errors.New("adaptive: invalid config")

// New returns a Controller for cfg that applies its factor with apply (a
// generated package's ScaleNumbers for one rule, or a function of one's
// own): apply(rate, burst) with burst overlay.One unless cfg.Burst. It
// applies the starting factor now, and returns apply's error if that fails.
func New(cfg Config, apply func(rate, burst overlay.Factor) error) (*Controller, error) {
	if cfg.Quantile == 0 {
		cfg.Quantile = 0.99
	}
	if cfg.Min == 0 {
		cfg.Min = 0.1
	}
	if cfg.Max == 0 {
		cfg.Max = 1
	}
	if cfg.Increase == 0 {
		cfg.Increase = 0.05
	}
	if cfg.Decrease == 0 {
		cfg.Decrease = 0.5
	}
	if cfg.Interval == 0 {
		cfg.Interval = time.Second
	}
	if cfg.MinSamples == 0 {
		cfg.MinSamples = 20
	}
	if cfg.Start == 0 {
		cfg.Start = cfg.Max
	}
	var bad []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			bad = append(bad, fmt.Sprintf(format, args...))
		}
	}
	check(cfg.Latency > 0 || cfg.Errors > 0, "no target: give Latency, Errors or both")
	check(cfg.Latency >= 0, "Latency %v is negative", cfg.Latency)
	check(cfg.Errors >= 0 && cfg.Errors <= 1, "Errors %v is not a ratio in [0, 1]", cfg.Errors)
	check(cfg.Quantile > 0 && cfg.Quantile <= 1, "Quantile %v is not in (0, 1]", cfg.Quantile)
	check(cfg.Min >= 0.001 && cfg.Min <= cfg.Max && cfg.Max <= 1000, "Min %v and Max %v: need 0.001 ≤ Min ≤ Max ≤ 1000", cfg.Min, cfg.Max)
	check(cfg.Increase > 0 && cfg.Increase <= 1000, "Increase %v is not in (0, 1000]", cfg.Increase)
	check(cfg.Decrease > 0 && cfg.Decrease < 1, "Decrease %v is not in (0, 1)", cfg.Decrease)
	check(cfg.Interval > 0, "Interval %v is not positive", cfg.Interval)
	check(cfg.MinSamples > 0, "MinSamples %d is not positive", cfg.MinSamples)
	check(cfg.Start >= cfg.Min && cfg.Start <= cfg.Max, "Start %v is outside [Min, Max] = [%v, %v]", cfg.Start, cfg.Min, cfg.Max)
	if apply == nil {
		bad = append(bad, "no apply function")
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("%w: %s", ErrConfig, joinWords(bad))
	}
	c := &Controller{cfg: cfg, apply: apply,
		min: thousandths(cfg.Min), max: thousandths(cfg.Max), inc: max(thousandths(cfg.Increase), 1)}
	start := min(max(thousandths(cfg.Start), c.min), c.max)
	if err := c.set(start); err != nil {
		return nil, err
	}
	c.factor = start
	return c, nil
}

func thousandths(f float64) overlay.Factor {
	return overlay.Factor(math.Round(f * float64(overlay.One)))
}

func joinWords(s []string) string {
	out := s[0]
	for _, w := range s[1:] {
		out += "; " + w
	}
	return out
}

// set applies factor f.
func (c *Controller) set(f overlay.Factor) error {
	burst := overlay.One
	if c.cfg.Burst {
		burst = f
	}
	return c.apply(f, burst)
}

// Observe records one call to what the rule protects: its latency, and
// whether it failed. Lock-free; it allocates nothing.
func (c *Controller) Observe(latency time.Duration, failed bool) { c.w.observe(latency, failed) }

// Factor is the factor in force.
func (c *Controller) Factor() overlay.Factor {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.factor
}

// Config is the Controller's configuration, defaults filled in.
func (c *Controller) Config() Config { return c.cfg }

// Step judges the observations since the last step (at is only recorded)
// and moves the factor.
func (c *Controller) Step(at time.Time) Round {
	return c.Judge(at, c.w.drain(c.cfg.Quantile))
}

// Judge moves the factor from h, an interval's health measured elsewhere
// (a service's own metrics, a replayed series): Step is Judge of what
// Observe recorded.
func (c *Controller) Judge(at time.Time, h Health) Round {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := Round{At: at, Health: h, Verdict: c.verdict(h)}
	next := c.factor
	switch s.Verdict {
	case Healthy:
		next = min(c.factor+c.inc, c.max)
	case Unhealthy:
		next = max(overlay.Factor(math.Floor(float64(c.factor)*c.cfg.Decrease)), c.min)
	}
	if next != c.factor {
		if err := c.set(next); err != nil {
			s.Err = err
		} else {
			c.factor = next
		}
	}
	s.Factor = c.factor
	return s
}

func (c *Controller) verdict(h Health) Verdict {
	switch {
	case h.Samples < c.cfg.MinSamples:
		return TooFew
	case c.cfg.Latency > 0 && h.Latency > c.cfg.Latency, c.cfg.Errors > 0 && h.Errors > c.cfg.Errors:
		return Unhealthy
	}
	return Healthy
}

// Run takes a Step every Interval until ctx is done, passing each Round to
// report (nil: rounds whose factor could not be applied are logged with
// log/slog's default logger, the rest dropped).
func (c *Controller) Run(ctx context.Context, report func(Round)) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := c.Step(now)
			switch {
			case report != nil:
				report(s)
			case s.Err != nil:
				slog.Error("adaptive: a new factor was refused; the factor in force stays", "factor", s.Factor.String(), "err", s.Err)
			}
		}
	}
}
