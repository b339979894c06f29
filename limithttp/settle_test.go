package limithttp

import (
	"math"
	"net/http"
	"testing"
)

func TestActualCost(t *testing.T) {
	for _, c := range []struct {
		name string
		h    http.Header
		want int64
		ok   bool
	}{
		{"header", http.Header{"X-Used": {"120"}}, 120, true},
		{"first value", http.Header{"X-Used": {"7", "9"}}, 7, true},
		{"zero", http.Header{"X-Used": {"0"}}, 0, true},
		{"leading zeros", http.Header{"X-Used": {"000042"}}, 42, true},
		{"trailer prefix", http.Header{http.TrailerPrefix + "X-Used": {"33"}}, 33, true},
		{"trailer prefix, not canonical", http.Header{http.TrailerPrefix + "x-used": {"34"}}, 34, true},
		{"header before trailer", http.Header{"X-Used": {"1"}, http.TrailerPrefix + "X-Used": {"2"}}, 1, true},
		{"18 digits", http.Header{"X-Used": {"999999999999999999"}}, 999999999999999999, true},
		{"19 digits: the most", http.Header{"X-Used": {"9999999999999999999"}}, math.MaxInt64, true},
		{"absent", http.Header{"X-Other": {"5"}}, 0, false},
		{"empty", http.Header{"X-Used": {""}}, 0, false},
		{"no values", http.Header{"X-Used": {}}, 0, false},
		{"negative", http.Header{"X-Used": {"-5"}}, 0, false},
		{"plus", http.Header{"X-Used": {"+5"}}, 0, false},
		{"space", http.Header{"X-Used": {" 5"}}, 0, false},
		{"exponent", http.Header{"X-Used": {"1e3"}}, 0, false},
		{"a trailer prefix alone", http.Header{http.TrailerPrefix: {"5"}}, 0, false},
	} {
		got, ok := ActualCost(c.h, "X-Used")
		if got != c.want || ok != c.ok {
			t.Errorf("%s: ActualCost = %d, %v; want %d, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
