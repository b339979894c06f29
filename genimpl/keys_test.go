package genimpl

import (
	"math/rand/v2"
	"strings"
	"testing"
)

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

// A composite key's text form is read back to its fields, and distinct
// fields make distinct forms, whatever bytes the strings hold; a form that
// is not one is refused.
func TestKeyFields(t *testing.T) {
	form := func(fields ...string) string {
		var b []byte
		for i, f := range fields {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendKeyField(b, f)
		}
		return string(b)
	}
	if got := form("acme,eu", "42%", "#1"); got != "acme%2Ceu,42%25,%231" {
		t.Errorf("the form of (acme,eu | 42%% | #1): %q", got)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[string][3]string{}
	alphabet := "a,%#2C5"
	for range 20000 {
		var k [3]string
		for i := range k {
			b := make([]byte, rng.IntN(4))
			for j := range b {
				b[j] = alphabet[rng.IntN(len(alphabet))]
			}
			k[i] = string(b)
		}
		s := form(k[:]...)
		if prev, dup := seen[s]; dup && prev != k {
			t.Fatalf("%q and %q have one form, %q", prev, k, s)
		}
		seen[s] = k
		got, ok := KeyFields(s, 3)
		if !ok || [3]string(got) != k {
			t.Fatalf("KeyFields(%q) = %q, %v; want %q", s, got, ok, k)
		}
	}
	for _, bad := range []string{"a", "a,b,c,d", "a%2,b,c", "a%,b,c", "a%41,b,c", "#x,b,c", "a,b%2", "a,b,%"} {
		if got, ok := KeyFields(bad, 3); ok {
			t.Errorf("KeyFields(%q, 3) = %q, want it refused", bad, got)
		}
	}
}
