package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGeneratedMethodsInline builds the checked-in generated package with
// -gcflags=-m and checks what the compiler does with it:
//   - a greedy global rule's Allow and AllowAt call the runtime's check
//     with the rule's units as constants (folded);
//   - every other method that delegates to the runtime inlines into its caller
//     (for a rule without plans, genimpl.Keyed's or Global's methods,
//     which its limiter embeds), so a call to a generated limiter costs what the runtime
//     call costs (BenchmarkGenerated in bench/ measures it).
func TestGeneratedMethodsInline(t *testing.T) {
	raw, err := os.ReadFile("../policy.yaml")
	must(t, err)
	m, err := compile("policy.yaml", raw)
	must(t, err)
	cmd := exec.Command("go", "build", "-gcflags=-m", ".")
	cmd.Dir = "../generated"
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m: %v\n%s", err, out)
	}
	text := string(out)
	// genimpl.Global is not generic: whether its methods inline is in
	// the runtime's own build.
	cmd = exec.Command("go", "build", "-gcflags=-m", ".")
	cmd.Dir = "../genimpl"
	rtOut, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -gcflags=-m ../genimpl: %v\n%s", err, rtOut)
	}
	foldedGlobal := 0
	embedded := 0
	for _, r := range m.Rules {
		if r.IsInFlight() {
			continue // atomicslot's Acquire: the hot path's own tests and benchmark hold it
		}
		methods := []string{"AllowN", "AllowNAt", "PeekAt"}
		if r.Planned {
			// The runtime's AllowN takes the time: a planned limiter's AllowN
			// reads the clock and calls it, one call deep as before.
			methods = methods[1:]
		}
		switch {
		case r.Folded() && r.KeyType == "":
			foldedGlobal++
		case r.Folded():
			methods = append(methods, "AllowAt")
		default:
			methods = append(methods, "Allow", "AllowAt")
		}
		for _, method := range methods {
			want := fmt.Sprintf("can inline (*%sLimiter).%s\n", r.GoName, method)
			if r.KeyType == "" && !r.Planned {
				// genimpl.Global's, which the limiter embeds (a folded
				// rule's Allow and AllowAt are its own: counted below).
				embedded++
				if !strings.Contains(string(rtOut), fmt.Sprintf("can inline Global.%s\n", method)) {
					t.Errorf("the compiler does not inline genimpl.Global.%s (%s's)", method, r.GoName)
				}
				continue
			} else if r.KeyType != "" && !r.Planned && (!r.Folded() || method != "AllowAt") {
				// The method is genimpl.Keyed's, which the limiter
				// embeds: the runtime's must inline for this key type.
				embedded++
				want = fmt.Sprintf("can inline genimpl.Keyed[go.shape.%s].%s\n", r.KeyType, method)
				if r.Composite() {
					continue // a struct's shape is spelled with its fields; the basic key types check the method
				}
			}
			if !strings.Contains(text, want) {
				t.Errorf("the compiler does not inline %s.%s (want %q)", r.GoName, method, want)
			}
		}
	}
	if embedded == 0 {
		t.Fatal("policy.yaml has no keyed rule without plans: nothing shows genimpl.Keyed's methods inline")
	}
	if foldedGlobal == 0 {
		t.Fatal("policy.yaml has no greedy global rule: nothing shows folding")
	}
	// A folded global rule's check is the runtime's greedy check with the
	// rule's units as constants. It is called, not inlined: recording the
	// time of an admission (Bucket.seen, docs/guarantees.md "Out-of-order
	// times") takes it past the inliner's budget (bench/against.sh against
	// the commit before: +3.4% on BenchmarkGenerated/case=global).
	src, err := os.ReadFile("../generated/limits.go")
	must(t, err)
	if n := strings.Count(string(src), "Bucket().AllowGreedyAt(now, "); n < 2*foldedGlobal {
		t.Errorf("the folded bucket check is called %d times, want at least %d (Allow and AllowAt of %d folded global rules)", n, 2*foldedGlobal, foldedGlobal)
	}
}
