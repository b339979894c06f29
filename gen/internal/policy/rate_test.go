package policy

import (
	"strings"
	"testing"
)

// Rates as a policy writes them, each with the whole tokens and ns it means,
// worked out by hand; and the spellings refused, each with what the message
// must say.
func TestParseRate(t *testing.T) {
	for _, c := range []struct {
		rate     string
		interval bool
		tokens   int64
		period   int64
	}{
		{"100/s", false, 100, 1e9},
		{"1/10d", false, 1, 864_000e9},
		{"1/7d", false, 1, 604_800e9},
		{"1/90min", false, 1, 5_400e9},
		{"3 per 2 hours", false, 3, 7_200e9},
		{"2 per 3 days", true, 2, 259_200e9},
		{"5 per 10s", false, 5, 10e9},
		{"5/10 s", false, 5, 10e9},
		{"1/1.5h", false, 1, 5_400e9},
		{"7 per 250ms", false, 7, 250e6},
		{"1/1h30m", false, 1, 5_400e9},
		{"1e6/s", false, 1_000_000, 1e9},
		{"2.5e-1/s", false, 1, 4e9},
		{"0.5 per second", false, 1, 2e9},
		{"10 per minutes", false, 10, 60e9},
	} {
		tokens, period, err := parseRate(c.rate, c.interval)
		if err != nil || tokens != c.tokens || period != c.period {
			t.Errorf("%q: %d per %d ns, %v; want %d per %d ns", c.rate, tokens, period, err, c.tokens, c.period)
		}
	}
	for _, c := range []struct{ rate, says string }{
		{"-5/s", "is negative"},
		{"0/s", "a rate of 0 never refills"},
		{"1e12/s", "more than one token a nanosecond"},
		{"1e-9/s", "less than one token in ten years"},
		{"1/20y", `"20y" is not a period`},
		{"1/0.5ns", "not a whole number of nanoseconds"},
		{"1/0s", "not a positive count"},
		{"x/s", "not a number of tokens"},
		{"1/2/s", "not a period"},
		{"1.5 per 1s", ""}, // greedy: fine
	} {
		_, _, err := parseRate(c.rate, false)
		switch {
		case c.says == "" && err != nil:
			t.Errorf("%q: %v", c.rate, err)
		case c.says != "" && (err == nil || !strings.Contains(err.Error(), c.says)):
			t.Errorf("%q: %v; want it refused, saying %q", c.rate, err, c.says)
		}
	}
	if _, _, err := parseRate("1.5 per 1s", true); err == nil || !strings.Contains(err.Error(), "not whole") {
		t.Errorf("1.5 per 1s on interval refill: %v", err)
	}
}
