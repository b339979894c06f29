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

func TestIntKeys(t *testing.T) {
	for _, c := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"42", 42, true}, {"-7", -7, true}, {"+7", 0, false}, {"", 0, false}, {"9223372036854775808", 0, false},
		{"0x1", 0, false}, {"1 ", 0, false}, {strings.Repeat("1", 500), 0, false},
	} {
		if got, ok := IntKey(c.in, true, 64); got != c.want || ok != c.ok {
			t.Errorf("IntKey(%.30q) = %d, %v", c.in, got, ok)
		}
	}
	if _, ok := IntKey("42", false, 64); ok {
		t.Error("IntKey made a key from a source that found none")
	}
	if _, ok := IntKey("128", true, 8); ok {
		t.Error("IntKey put 128 in an int8")
	}
	if _, ok := UintKey("256", true, 8); ok {
		t.Error("UintKey put 256 in a uint8")
	}
	if _, ok := UintKey("", true, 0); ok {
		t.Error("IntKey made a key from a source that found none")
	}
	for _, c := range []struct {
		in   string
		want uint64
		ok   bool
	}{{"18446744073709551615", 1<<64 - 1, true}, {"-1", 0, false}, {"+1", 0, false}, {"", 0, false}} {
		if got, ok := UintKey(c.in, true, 64); got != c.want || ok != c.ok {
			t.Errorf("UintKey(%q) = %d, %v", c.in, got, ok)
		}
	}
}
