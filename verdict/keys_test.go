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
