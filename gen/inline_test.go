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
//   - a greedy global rule's Allow and AllowAt have the runtime's check inlined
//     into them, with the rule's units as constants (folded);
//   - every other method that delegates to the runtime inlines into its caller,
//     so a call to a generated limiter costs what the runtime call costs
//     (BenchmarkGenerated in bench/ measures it).
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
	foldedGlobal := 0
	for _, r := range m.Rules {
		methods := []string{"AllowN", "AllowNAt", "PeekAt"}
		switch {
		case r.Folded() && r.KeyType == "":
			foldedGlobal++
		case r.Folded():
			methods = append(methods, "AllowAt")
		default:
			methods = append(methods, "Allow", "AllowAt")
		}
		for _, method := range methods {
			if want := fmt.Sprintf("can inline (*%sLimiter).%s\n", r.GoName, method); !strings.Contains(text, want) {
				t.Errorf("the compiler does not inline %s.%s", r.GoName, method)
			}
		}
	}
	if foldedGlobal == 0 {
		t.Fatal("policy.yaml has no greedy global rule: nothing shows folding")
	}
	if n := strings.Count(text, "inlining call to atomicbucket.(*Bucket).AllowGreedyAt"); n < 2*foldedGlobal {
		t.Errorf("the bucket check is inlined %d times, want at least %d (Allow and AllowAt of %d folded global rules)", n, 2*foldedGlobal, foldedGlobal)
	}
}
