package verdict

import (
	"strings"
	"testing"
)

func TestParseCost(t *testing.T) {
	const def, max = 3, 100
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1", 1, true},
		{"100", 100, true},
		{"007", 7, true},
		{"0000000000000000000000000000042", 42, true}, // leading zeros do not count as digits
		{"101", 101, false},
		{"1000000000", 1000000000, false},
		{strings.Repeat("9", 1000), max + 1, false}, // 1,000 digits: refused, not wrapped
		{"9223372036854775808", max + 1, false},     // 2^63
		{"", def, true},
		{"0", def, true}, // a free request would turn the limit off
		{"000", def, true},
		{"-1", def, true},
		{"+5", def, true},
		{"1e9", def, true},
		{"0x10", def, true},
		{" 5", def, true},
		{"5 ", def, true},
		{"5.0", def, true},
		{"٥", def, true}, // an Arabic-Indic digit
		{"1,000", def, true},
		{"NaN", def, true},
	} {
		got, ok := ParseCost(c.in, def, max)
		if got != c.want || ok != c.ok {
			t.Errorf("ParseCost(%.30q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestSettleCounts(t *testing.T) {
	var c SettleCounts
	for _, a := range []int64{0, 7, KeptEstimate, SettleFailed, NoSettle, 3, KeptEstimate} {
		c.Add(a)
	}
	if got, want := c.Stats(), (SettleStats{Settled: 3, Kept: 2, Failed: 1, Forgiven: 10}); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
}

func TestParseActual(t *testing.T) {
	for v, want := range map[string]int64{"0": 0, "00": 0, "42": 42, "007": 7, "999999999999999999": 999999999999999999, "1000000000000000000": 1<<63 - 1} {
		if got, ok := ParseActual(v); !ok || got != want {
			t.Errorf("ParseActual(%q) = %d, %v; want %d", v, got, ok, want)
		}
	}
	for _, v := range []string{"", "-1", "+1", " 1", "1 ", "1e3", "0x10", "½"} {
		if got, ok := ParseActual(v); ok {
			t.Errorf("ParseActual(%q) = %d, true; want refused", v, got)
		}
	}
}
