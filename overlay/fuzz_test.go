package overlay_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/overlay"
)

// FuzzParseFile: any input is parsed or refused with ErrInvalid, never a
// panic; what is parsed has a whole rate above zero and a burst of at least
// one, and a position in the file.
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(goodFile))
	f.Add([]byte("rules:\n  A: {rate: 0.5/s, burst: 3}\n"))
	f.Add([]byte("rules:\n  A:\n    keys: {\"\": {rps: 1e3, burst: 1_000}}\n"))
	f.Add([]byte("rules: {A: &x {rate: 1/s, burst: 1}, B: *x}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		set, err := overlay.ParseFile("f.yaml", src)
		if err != nil {
			if !errors.Is(err, overlay.ErrInvalid) {
				t.Fatalf("an error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		for _, e := range set {
			if e.Numbers.Tokens < 1 || e.Numbers.Period < 1 || e.Numbers.Burst < 1 || !strings.HasPrefix(e.Pos, "f.yaml:") {
				t.Fatalf("parsed %+v from %q", e, src)
			}
		}
	})
}
