package main

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestGeneratedMethodsInline builds the checked-in generated package with
// -gcflags=-m and requires the compiler to report every limiter's Allow and
// AllowN as inlinable: a call to a generated limiter costs what the runtime
// call behind it costs (BenchmarkGenerated in bench/ measures it).
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
	for _, r := range m.rules {
		for _, method := range []string{"Allow", "AllowN", "AllowNAt", "PeekAt"} {
			want := fmt.Sprintf("can inline (*%sLimiter).%s\n", r.goName, method)
			if !strings.Contains(string(out), want) {
				t.Errorf("the compiler does not inline %s.%s", r.goName, method)
			}
		}
	}
}
