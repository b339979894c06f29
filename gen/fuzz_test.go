package main

import (
	"github.com/limitgen/limitgen/gen/internal/policy"
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzPolicy feeds arbitrary bytes to the generator's front end. It must never
// panic; what it refuses must be refused with positioned messages; what it
// accepts must render (gofmt'd, through jennifer) into Go source that parses.
// TestGeneratedPackagesRun builds and runs a sample of accepted policies.
func FuzzPolicy(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/*/*.yaml")
	seeds = append(seeds, "../policy.yaml")
	for _, s := range seeds {
		b, err := os.ReadFile(s)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		m, err := compile("fuzz.yaml", src)
		if err != nil {
			ds, ok := err.(policy.Diags)
			if !ok || len(ds) == 0 {
				t.Fatalf("refused without diagnostics: %v", err)
			}
			for _, d := range ds {
				if d.Msg == "" || d.Line == 0 && !unplaced(d.Msg) {
					t.Fatalf("a problem reported without a position: %q", d.String())
				}
			}
			return
		}
		out, err := render(m)
		if err != nil {
			t.Fatalf("accepted policy does not render: %v", err)
		}
		if _, err := goparser.ParseFile(token.NewFileSet(), "out.go", out, goparser.AllErrors); err != nil {
			t.Fatalf("accepted policy renders code that does not parse: %v\n%s", err, out)
		}
	})
}

// unplaced reports whether a message is about the whole file, which has no
// line to point at.
func unplaced(msg string) bool {
	return strings.HasPrefix(msg, "the policy is empty") || strings.HasPrefix(msg, "the policy is ") && strings.Contains(msg, "bytes; a policy may be at most")
}
