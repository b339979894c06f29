package atomicwindow

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// TestPeekWaitsForARewrite: while a window's head is marked dead (an exact
// window's give-back rewriting its ring in place), a Peek waits and then
// answers from the window as rewritten, never from a dead word's zeros (a
// window that looks empty).
func TestPeekWaitsForARewrite(t *testing.T) {
	now := atomicbucket.Time(time.Hour)
	g := NewWindow(MustRule(10, time.Minute))
	tbl := NewTable[string](MustRule(10, time.Minute), atomicbucket.TableOptions{})
	for range 3 {
		g.AllowNAt(now, 1)
		tbl.AllowNAt("k", now, 1)
	}
	st, _ := tbl.m.Load("k")
	for _, c := range []struct {
		name string
		w    []atomic.Uint64
		peek func() atomicbucket.Decision
	}{
		{"global", g.st.Load().w, func() atomicbucket.Decision { return g.PeekAt(now, 1) }},
		{"table", st.w, func() atomicbucket.Decision { return tbl.PeekAt("k", now, 1) }},
	} {
		h := c.w[0].Load()
		c.w[0].Store(h | deadWindow)
		got := make(chan atomicbucket.Decision, 1)
		go func() { got <- c.peek() }()
		select {
		case d := <-got:
			t.Fatalf("%s: Peek answered %+v while the window was being rewritten", c.name, d)
		case <-time.After(20 * time.Millisecond):
		}
		c.w[0].Store(h)
		if d := <-got; !d.Allowed || d.Remaining != 6 {
			t.Fatalf("%s: Peek after the rewrite: %+v, want allowed with 6 left", c.name, d)
		}
	}
}
