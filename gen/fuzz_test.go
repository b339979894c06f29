package main

import (
	goparser "go/parser"
	"go/token"
	"os"
	"path/filepath"
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
			if err.Error() == "" {
				t.Fatal("refused with an empty message")
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
