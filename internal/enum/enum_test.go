package enum

import "testing"

type color uint8

func TestName(t *testing.T) {
	for _, c := range []struct {
		v    color
		want string
	}{{0, "red"}, {1, "green"}, {2, "color(2)"}, {255, "color(255)"}} {
		if got := Name(c.v, "color", "red", "green"); got != c.want {
			t.Errorf("Name(%d) = %q, want %q", c.v, got, c.want)
		}
	}
}
