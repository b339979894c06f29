package shared

import (
	"errors"
	"strings"
	"testing"
)

// fakeStore binds by panicking on a nil receiver, as a store whose Bind reads
// its fields does.
type fakeStore struct{ name string }

func (s *fakeStore) Bind(rules []Rule) (Bound, error) {
	if s.name == "panics" {
		panic("boom")
	}
	return nil, errors.New("refused: " + s.name)
}

// Bind refuses a nil store, a typed nil in the interface and a panicking
// Bind with an error, never a panic (before, WithStore((*redisstore.Store)(nil))
// panicked inside a generated New).
func TestBindRefusesNilStores(t *testing.T) {
	var typedNil *fakeStore
	for _, c := range []struct {
		store Store
		want  string
	}{
		{nil, "no store"},
		{typedNil, "no store: a nil *shared.fakeStore"},
		{&fakeStore{"panics"}, "the store's Bind panicked: boom"},
		{&fakeStore{"x"}, "refused: x"},
	} {
		b, err := Bind(c.store, nil)
		if b != nil || err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Bind(%#v) = %v, %v; want an error saying %q", c.store, b, err, c.want)
		}
	}
}
