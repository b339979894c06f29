package overlay

import (
	"fmt"
	"math/big"
	"strings"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// unitNames are the period units a rate may name.
var unitNames = map[string]time.Duration{
	"ns": time.Nanosecond, "us": time.Microsecond, "µs": time.Microsecond, "ms": time.Millisecond,
	"s": time.Second, "sec": time.Second, "second": time.Second,
	"m": time.Minute, "min": time.Minute, "minute": time.Minute,
	"h": time.Hour, "hr": time.Hour, "hour": time.Hour,
	"d": 24 * time.Hour, "day": 24 * time.Hour,
}

// ParseRate reads "100/s", "1000/min", "2/h", "5/10s", "5 per 10s", "10 per second"
// or "0.5/s" into whole tokens per whole nanoseconds, as a policy's rate:
// field is read (interval refill keeps its period, so its count must be
// whole).
func ParseRate(s string, interval bool) (tokens int64, period time.Duration, err error) {
	return parseRate(s, interval, true)
}

// ReadRate reads a rate as ParseRate does, checking its syntax only: whether
// its numbers make a good rule (above 0, not finer than a nanosecond, …) is
// the rule's own check, which numbers given in Go meet too, so that a source
// and the Go API say the same of the same numbers. A rate of 0 or below
// reads as such (tokens ≤ 0) for that check to refuse.
func ReadRate(s string) (tokens int64, period time.Duration, err error) {
	return parseRate(s, false, false)
}

func parseRate(s string, interval, judge bool) (tokens int64, period time.Duration, err error) {
	s = strings.TrimSpace(s)
	var num, per string
	if i := strings.Index(s, "/"); i >= 0 {
		num, per = s[:i], s[i+1:]
	} else if i := strings.Index(s, " per "); i >= 0 {
		num, per = s[:i], s[i+len(" per "):]
	} else {
		return 0, 0, fmt.Errorf("rate %q is not a rate; write it as 100/s, 1000/min, 2/h or 5 per 10s", s)
	}
	num, per = strings.TrimSpace(num), strings.TrimSpace(per)
	d, err := parsePeriod(per)
	if err != nil {
		return 0, 0, fmt.Errorf("rate %q: %w", s, err)
	}
	tokens, ns, err := wholeRate(s, num, d, interval, judge)
	return tokens, time.Duration(ns), err
}

// ParseWindow reads a window rule's length as a policy writes it: a unit
// ("h", "day"), a count of units ("24h", "10 min", "1.5h"), or a Go duration
// ("1h30m").
func ParseWindow(s string) (time.Duration, error) {
	ns, err := parsePeriod(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("window %w", err)
	}
	return time.Duration(ns), nil
}

// unitOf finds a period's unit by name: s, sec, second, min, minute, h, hr,
// hour, d, day (and ns, us, µs, ms), or their plural.
func unitOf(name string) (time.Duration, bool) {
	if d, ok := unitNames[name]; ok {
		return d, true
	}
	if one, ok := strings.CutSuffix(name, "s"); ok && len(one) > 1 {
		d, ok := unitNames[one]
		return d, ok
	}
	return 0, false
}

// parsePeriod reads a rate's period in ns: a unit ("s", "min", "day"), a count
// of units ("10s", "10d", "90min", "2 hours", "1.5h"), or a Go duration
// ("1h30m"). It must be a whole number of ns, at least 1.
func parsePeriod(per string) (int64, error) {
	if d, ok := unitOf(per); ok {
		return int64(d), nil
	}
	end := strings.IndexFunc(per, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	if end > 0 {
		if d, ok := unitOf(strings.TrimSpace(per[end:])); ok {
			count, good := new(big.Rat).SetString(per[:end])
			if !good || count.Sign() <= 0 {
				return 0, fmt.Errorf("%q is not a period: %q is not a positive count", per, per[:end])
			}
			ns := count.Mul(count, new(big.Rat).SetInt64(int64(d)))
			if !ns.IsInt() || !ns.Num().IsInt64() {
				return 0, fmt.Errorf("period %q is not a whole number of nanoseconds, or is beyond 292 years", per)
			}
			return ns.Num().Int64(), nil
		}
	}
	if d, err := time.ParseDuration(per); err == nil && d > 0 {
		return int64(d), nil
	}
	return 0, fmt.Errorf("%q is not a period; write a unit (s, min, h, d), a count of one (10s, 90min, 10d, 2 hours) or a duration such as 1h30m", per)
}

// ParsePerSecond reads a tokens_per_second or rps value (ParseRate's rules).
func ParsePerSecond(s string, interval bool) (tokens int64, period time.Duration, err error) {
	tokens, ns, err := wholeRate(s, strings.TrimSpace(s), int64(time.Second), interval, true)
	return tokens, time.Duration(ns), err
}

// ReadPerSecond is ReadRate for a tokens_per_second or rps value.
func ReadPerSecond(s string) (tokens int64, period time.Duration, err error) {
	tokens, ns, err := wholeRate(s, strings.TrimSpace(s), int64(time.Second), false, false)
	return tokens, time.Duration(ns), err
}

// wholeRate turns a decimal count per period into whole tokens per whole ns:
// 0.5 per 1s becomes 1 per 2s. Interval refill keeps its period, so its count
// must be whole. Unless judge, only the syntax and the fit in 64 bits are
// checked (ReadRate).
func wholeRate(s, num string, periodNs int64, interval, judge bool) (int64, int64, error) {
	r, ok := new(big.Rat).SetString(num)
	if !ok || strings.Contains(num, "/") {
		return 0, 0, fmt.Errorf("rate %q: %q is not a number of tokens (write it as 100, 0.5 or 1e6)", s, num)
	}
	if !judge {
		if r.Sign() <= 0 {
			return r.Num().Int64(), periodNs, nil // 0 or negative: the rule's check refuses it
		}
		per := new(big.Int).Mul(r.Denom(), big.NewInt(periodNs))
		if !r.Num().IsInt64() || !per.IsInt64() {
			return 0, 0, fmt.Errorf("rate %q is too large: its tokens or its period do not fit 64 bits", s)
		}
		return r.Num().Int64(), per.Int64(), nil
	}
	if r.Sign() < 0 {
		return 0, 0, fmt.Errorf("rate %q is negative; a rate is the tokens added per period, above 0", s)
	}
	if r.Sign() == 0 {
		return 0, 0, fmt.Errorf("rate %q admits nothing: a rate of 0 never refills; give a positive rate", s)
	}
	if interval && !r.IsInt() {
		return 0, 0, fmt.Errorf("rate %q: interval refill adds whole tokens at each period; %s per period is not whole, write the rate over a longer period", s, num)
	}
	per := new(big.Int).Mul(r.Denom(), big.NewInt(periodNs))
	switch {
	case r.Num().Cmp(per) > 0:
		return 0, 0, fmt.Errorf("rate %q is more than one token a nanosecond, finer than the clock the buckets count in; limit a cost instead (cost:, with a smaller rate)", s)
	case new(big.Int).Quo(per, r.Num()).Cmp(big.NewInt(int64(atomicbucket.MaxUptime))) > 0:
		return 0, 0, fmt.Errorf("rate %q is less than one token in ten years (the longest a process's clock is planned for); no bucket would refill: give a larger rate", s)
	}
	if !r.Num().IsInt64() || !per.IsInt64() {
		return 0, 0, fmt.Errorf("rate %q is too large: its tokens or its period do not fit 64 bits", s)
	}
	return r.Num().Int64(), per.Int64(), nil
}
