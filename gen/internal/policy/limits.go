package policy

import (
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/genimpl"
	"github.com/limitgen/limitgen/overlay"
	"go.yaml.in/yaml/v3"
)

// limit reads rate, burst, refill, aligned, initial and cost from fields. With
// base set (a plan's override), missing fields take the base's values and the
// refill fields are not allowed.
func (p *parser) limit(fields, keys map[string]*yaml.Node, at *yaml.Node, what string, base *model.Limit) (model.Limit, bool) {
	if base == nil && (fields["in_flight"] != nil || fields["max_hold"] != nil) || base != nil && base.InFlight {
		return p.inFlightLimit(fields, keys, at, what, base)
	}
	if base != nil {
		for _, f := range []string{"in_flight", "max_hold", "wait"} {
			if n := keys[f]; n != nil {
				p.errorf(n, "%s: %s applies to an in-flight rule; this rule is a rate rule", what, f)
				return model.Limit{}, false
			}
		}
	}
	if base == nil && (fields["limit"] != nil || fields["window"] != nil) || base != nil && base.Window {
		return p.windowLimit(fields, keys, at, what, base)
	}
	if base != nil {
		for _, f := range []string{"limit", "window"} {
			if n := keys[f]; n != nil {
				p.errorf(n, "%s: %s applies to a window rule; this rule is a token bucket (rate: and burst:)", what, f)
				return model.Limit{}, false
			}
		}
	}
	var l model.Limit
	if base != nil {
		l = *base
	}
	ok := true
	bad := func(n *yaml.Node, format string, args ...any) {
		p.errorf(n, what+": "+format, args...)
		ok = false
	}
	if base == nil {
		if n := fields["refill"]; n != nil {
			switch n.Value {
			case "greedy":
			case "interval":
				l.Interval = true
			default:
				bad(n, "refill %q: use greedy (continuous) or interval (tokens at each period boundary)", n.Value)
			}
		}
		if n := fields["aligned"]; n != nil {
			v, err := strconv.ParseBool(n.Value)
			switch {
			case err != nil:
				bad(n, "aligned %q: use true or false", n.Value)
			case v && !l.Interval:
				bad(n, "aligned applies to interval refill only; add refill: interval")
			default:
				l.Aligned = v
			}
		}
	}

	var rateNodes []string
	for _, f := range []string{"rate", "tokens_per_second", "rps"} {
		if fields[f] != nil {
			rateNodes = append(rateNodes, f)
		}
	}
	switch {
	case len(rateNodes) > 1:
		bad(keys[rateNodes[1]], "give the rate once: %s and %s both set it", rateNodes[0], rateNodes[1])
	case len(rateNodes) == 1:
		n := fields[rateNodes[0]]
		var err error
		if rateNodes[0] == "rate" {
			l.Tokens, l.PeriodNs, err = parseRate(n.Value, l.Interval)
		} else {
			l.Tokens, l.PeriodNs, err = parsePerSecond(n.Value, l.Interval)
		}
		if err != nil {
			bad(n, "%v", err)
		}
	case base == nil:
		bad(at, "no rate: add rate: such as rate: 100/s, rate: 5 per 10s or tokens_per_second: 100")
	}

	if n := fields["burst"]; n != nil {
		if v, good := p.int(n, what, "burst", 1); good {
			l.Burst = v
		} else {
			ok = false
		}
	} else if base == nil {
		bad(at, "no burst: add burst:, the most tokens the bucket holds (at least 1)")
	}
	if base == nil {
		l.Cost = 1
	}
	if n := fields["cost"]; n != nil {
		if v, good := p.int(n, what, "cost", 1); good {
			l.Cost = v
		} else {
			ok = false
		}
	}
	if n := fields["initial"]; n != nil {
		if v, good := p.int(n, what, "initial", 0); good {
			l.Initial, l.InitialSet = v, true
		} else {
			ok = false
		}
	}
	if !ok {
		return l, false
	}
	if err := genimpl.CheckCost(l.Burst, l.Cost); err != nil {
		n := fields["cost"]
		if n == nil {
			n = fields["burst"]
		}
		bad(n, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), atomicbucket.ErrInvalidLimit.Error()), ": "))
		return l, false
	}
	if l.InitialSet && l.Initial > l.Burst {
		bad(fields["initial"], "initial %d exceeds burst %d; initial must be between 0 and the burst", l.Initial, l.Burst)
		return l, false
	}
	rt, err := atomicbucket.NewRule(l.Atomic())
	if err != nil {
		n := fields["rate"]
		if n == nil {
			n = at
		}
		bad(n, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), atomicbucket.ErrInvalidLimit.Error()), ": "))
		return l, false
	}
	l.Scale, l.Emit, l.Tau, l.Greedy = rt.Units()
	return l, true
}

// windowLimit reads a window rule's limit, window and cost: at most limit
// cost units admitted in any interval of the window's length. With base (a
// plan's override), what the plan leaves out is the rule's.
func (p *parser) windowLimit(fields, keys map[string]*yaml.Node, at *yaml.Node, what string, base *model.Limit) (model.Limit, bool) {
	l := model.Limit{Window: true, Cost: 1}
	if base != nil {
		l = *base
	}
	ok := true
	bad := func(n *yaml.Node, format string, args ...any) {
		p.errorf(n, what+": "+format, args...)
		ok = false
	}
	for _, f := range []string{"rate", "tokens_per_second", "rps", "burst", "refill", "aligned", "initial"} {
		if n := keys[f]; n != nil {
			bad(n, "%s does not apply to a window rule (limit: and window:, at most limit in any interval of the window); a token bucket has rate: and burst: instead", f)
		}
	}
	switch n := fields["limit"]; {
	case n == nil && base == nil:
		bad(keys["window"], "window without limit: add limit:, the most admitted in any interval of the window, such as limit: 1000")
	case n != nil:
		if v, good := p.int(n, what, "limit", 1); good {
			l.Tokens, l.Burst = v, v
		} else {
			ok = false
		}
	}
	switch n := fields["window"]; {
	case n == nil && base == nil:
		bad(keys["limit"], "limit without window: add window:, such as window: 1h (at most limit in any hour)")
	case n != nil && n.Kind != yaml.ScalarNode:
		bad(n, "window is a %s here; give one period, such as window: 1h", kindName(n.Kind))
	case n != nil:
		if d, err := overlay.ParseWindow(n.Value); err != nil {
			bad(n, "%v", err)
		} else {
			l.PeriodNs = int64(d)
		}
	}
	// where is the node a problem with the numbers points at: the first of
	// the fields given, else at (a plan that sets none of them).
	where := func(names ...string) *yaml.Node {
		for _, f := range names {
			if n := fields[f]; n != nil {
				return n
			}
		}
		return at
	}
	if n := fields["cost"]; n != nil {
		if v, good := p.int(n, what, "cost", 1); good {
			l.Cost = v
		} else {
			ok = false
		}
	}
	if !ok {
		return l, false
	}
	if _, err := atomicwindow.NewRule(l.Tokens, time.Duration(l.PeriodNs)); err != nil {
		n := where("window", "limit")
		if l.Tokens > atomicwindow.LimitMax {
			n = where("limit", "window")
		}
		bad(n, "%s", strings.TrimPrefix(strings.TrimPrefix(err.Error(), atomicbucket.ErrInvalidLimit.Error()), ": "))
		return l, false
	}
	if l.Cost > l.Tokens {
		bad(where("cost", "limit"), "cost %d is above the limit %d: a request of that cost could never be admitted; give cost: %d or less, or raise the limit", l.Cost, l.Tokens, l.Tokens)
		return l, false
	}
	return l, true
}

// inFlightLimit reads an in-flight rule's in_flight and max_hold: at most
// in_flight of a key's requests at once, each holding its slot until it ends
// or, at the latest, for max_hold.
func (p *parser) inFlightLimit(fields, keys map[string]*yaml.Node, at *yaml.Node, what string, base *model.Limit) (model.Limit, bool) {
	l := model.Limit{InFlight: true, Cost: 1}
	if base != nil { // a plan's: what it leaves out is the rule's
		l = *base
	}
	ok := true
	bad := func(n *yaml.Node, format string, args ...any) {
		p.errorf(n, what+": "+format, args...)
		ok = false
	}
	for _, f := range []string{"rate", "tokens_per_second", "rps", "burst", "refill", "aligned", "initial", "limit", "window", "cost"} {
		if n := keys[f]; n != nil {
			bad(n, "%s does not apply to an in-flight rule (in_flight: and max_hold:, at most in_flight of a key's requests at once); each request holds one slot until it ends", f)
		}
	}
	switch n := fields["in_flight"]; {
	case n == nil && base != nil:
	case n == nil:
		bad(keys["max_hold"], "max_hold without in_flight: add in_flight:, the most requests of a key at once, such as in_flight: 4")
	default:
		if v, good := p.int(n, what, "in_flight", 1); !good {
			ok = false
		} else if v > atomicslot.MaxLimit {
			bad(n, "in_flight %d is more than %d: every acquisition reads each of a key's slots; a limit that large is a rate, not a count of requests at once", v, atomicslot.MaxLimit)
		} else {
			l.Tokens, l.Burst = v, v
		}
	}
	switch n := fields["max_hold"]; {
	case n == nil && base != nil:
	case n == nil:
		bad(keys["in_flight"], "in_flight without max_hold: add max_hold:, the longest a request holds its slot if it never ends (a crashed handler), such as max_hold: 30s")
	case n.Kind != yaml.ScalarNode:
		bad(n, "max_hold is a %s here; give one duration, such as max_hold: 30s", kindName(n.Kind))
	default:
		d, err := overlay.ParseWindow(n.Value)
		if err == nil {
			_, err = atomicslot.NewRule(1, d)
		}
		if err != nil {
			bad(n, "max_hold %q: %s", n.Value, strings.TrimPrefix(strings.TrimPrefix(err.Error(), "atomicslot: "), "window "))
		} else {
			l.PeriodNs = int64(d)
		}
	}
	if n := fields["wait"]; n != nil {
		d, err := overlay.ParseWindow(n.Value)
		switch {
		case n.Kind != yaml.ScalarNode:
			bad(n, "wait is a %s here; give one duration, such as wait: 2s", kindName(n.Kind))
		case err != nil:
			bad(n, "wait %q: %s", n.Value, strings.TrimPrefix(err.Error(), "window "))
		case d > maxSlotWait:
			bad(n, "wait %v is more than %v: a request that waits that long for a slot has a client long gone; wait a few seconds at most, and let Retry-After say the rest", d, maxSlotWait)
		default:
			l.WaitNs = int64(d)
		}
	}
	return l, ok
}

// maxSlotWait is the longest wait: for a free slot an in-flight rule allows.
const maxSlotWait = 10 * time.Minute

// isWholeFloat reports whether s is a whole number written as a float
// (1e9, 1000.0): what a limit spelled so means is clear, and the message can
// say how to write it.
func isWholeFloat(s string) bool {
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f == math.Trunc(f) && math.Abs(f) < 1<<62 && strings.ContainsAny(s, ".eE")
}

// localShare refuses a local share too small for one request: an instance
// alone holds floor(share × burst) tokens (the limit's share, for a
// window), at least 1, so a share below one request's cost would be rounded
// up to more than the policy says (or admit nothing), on any plan.
func (p *parser) localShare(n *yaml.Node, r model.Rule, bad func(*yaml.Node, string, ...any)) {
	least := 0.0 // the smallest share that holds a request on every plan
	for _, l := range r.Limits {
		cost := max(l.Cost, r.Cost, 1)
		s := float64(cost) / float64(l.Burst)
		for int64(s*float64(l.Burst)) < cost {
			s = math.Nextafter(s, 2)
		}
		least = max(least, s)
	}
	if r.Share >= least {
		return
	}
	of := "burst"
	if r.Limits[0].Window {
		of = "limit"
	}
	l := r.Limits[0]
	for _, x := range r.Limits {
		if float64(max(x.Cost, r.Cost, 1))/float64(x.Burst) > float64(max(l.Cost, r.Cost, 1))/float64(l.Burst) {
			l = x
		}
	}
	bad(n, "local_share %v of %s %d is %.3g of a request of cost %d: alone, an instance would round it up to a whole request (%.3g times the share) or admit nothing; give local_share: %.6g or more",
		r.Share, of, l.Burst, r.Share*float64(l.Burst)/float64(max(l.Cost, r.Cost, 1)), max(l.Cost, r.Cost, 1), least/r.Share, least)
}

func (p *parser) int(n *yaml.Node, what, field string, least int64) (int64, bool) {
	v, err := strconv.ParseInt(strings.ReplaceAll(n.Value, "_", ""), 10, 64)
	switch {
	case err == nil && n.Kind == yaml.ScalarNode:
	case n.Kind == yaml.ScalarNode && isWholeFloat(n.Value):
		f, _ := strconv.ParseFloat(n.Value, 64)
		p.errorf(n, "%s: %s %q: write the number in digits, %s (exponents are not read, so that every count is exact)", what, field, n.Value, strconv.FormatFloat(f, 'f', -1, 64))
		return 0, false
	default:
		p.errorf(n, "%s: %s %q is not a whole number", what, field, n.Value)
		return 0, false
	}
	switch {
	case v < least && field == "burst":
		p.errorf(n, "%s: burst %d admits nothing; burst must be at least 1", what, v)
	case v < least:
		p.errorf(n, "%s: %s %d must be at least %d", what, field, v, least)
	default:
		return v, true
	}
	return 0, false
}

// parseRate and parsePerSecond are the overlay package's: an overlay file
// and the policy read rates alike.
func parseRate(s string, interval bool) (int64, int64, error) {
	tokens, period, err := overlay.ParseRate(s, interval)
	return tokens, int64(period), err
}

func parsePerSecond(s string, interval bool) (int64, int64, error) {
	tokens, period, err := overlay.ParsePerSecond(s, interval)
	return tokens, int64(period), err
}

// kindName names a YAML node kind for messages.
func kindName(k yaml.Kind) string {
	switch k {
	case yaml.MappingNode:
		return "mapping"
	case yaml.SequenceNode:
		return "list"
	}
	return "value"
}
