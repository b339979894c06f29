package verdict

import (
	"strings"
	"testing"
)

func TestParseCost(t *testing.T) {
	const max = 100
	for _, c := range []struct {
		in   string
		want int64
		st   CostStatus
	}{
		{"1", 1, CostOK},
		{"100", 100, CostOK},
		{"007", 7, CostOK},
		{"0000000000000000000000000000042", 42, CostOK}, // leading zeros do not count as digits
		{"101", 101, CostTooHigh},
		{"1000000000", 1000000000, CostTooHigh},
		{strings.Repeat("9", 1000), 0, CostTooHigh}, // 1,000 digits: refused, not wrapped
		{"9223372036854775808", 0, CostTooHigh},     // 2^63
		{"", 0, CostMissing},
		{"0", 0, CostMissing}, // a free request would turn the limit off
		{"000", 0, CostMissing},
		{"-1", 0, CostMissing},
		{"+5", 0, CostMissing},
		{"1e9", 0, CostMissing},
		{"0x10", 0, CostMissing},
		{" 5", 0, CostMissing},
		{"5 ", 0, CostMissing},
		{"5.0", 0, CostMissing},
		{"٥", 0, CostMissing}, // an Arabic-Indic digit
		{"1,000", 0, CostMissing},
		{"NaN", 0, CostMissing},
	} {
		got, st := ParseCost(c.in, max)
		if st != c.st || (st == CostOK && got != c.want) || (st == CostTooHigh && c.want != 0 && got != c.want) {
			t.Errorf("ParseCost(%.30q) = %d, %d; want %d, %d", c.in, got, st, c.want, c.st)
		}
	}
}
