package memo

import "testing"

// A Table hands back the entry stored in a hash's slot, and its slots are
// made once.
func TestMemo(t *testing.T) {
	var m Table[int]
	p := struct{ name string }{"R"}
	h := Hash(&p, 3, 4, 0)
	if m.Slot(h).Load() != nil {
		t.Fatal("a new Table holds an entry")
	}
	v := 7
	m.Slot(h).Store(&v)
	if got := m.Slot(h).Load(); got != &v {
		t.Fatalf("slot holds %v, want the stored entry", got)
	}
	if Hash(&p, 3, 4, 0) == Hash(&p, 4, 3, 0) || Hash(&p, 3, 4, 0) == Hash(&p, 3, 4, 1) {
		t.Error("Hash ignores an argument")
	}
}
