package wire

import (
	"math"
	"strconv"
	"testing"
)

// AppendDecimal writes what strconv.AppendInt writes, in place or not.
func TestAppendDecimal(t *testing.T) {
	vs := []int64{0, 1, 9, 10, 11, 99, 100, 101, 999, 1000, 12345, 999_999_999, 1_000_000_000, math.MaxInt64, -1, -12345, math.MinInt64}
	for p := int64(10); p <= 1e18; p *= 10 { // where the digit count changes, and where the bit length does
		vs = append(vs, p-1, p, p+1, p/10*9, p/10*9+1)
	}
	for s := 1; s < 63; s++ {
		vs = append(vs, 1<<s-1, 1<<s)
	}
	for _, v := range vs {
		for _, room := range []int{0, 3, 32} {
			b := make([]byte, 2, 2+room)
			b[0], b[1] = 'x', 'y'
			got := string(AppendDecimal(b, v))
			if want := "xy" + strconv.FormatInt(v, 10); got != want {
				t.Errorf("%d with room %d: %q, want %q", v, room, got, want)
			}
		}
	}
}
