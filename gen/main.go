// Command gen is limitgen's generator: it reads a rate-limit policy (YAML),
// validates it, and writes a Go package with one typed limiter per rule over
// the atomicbucket runtime.
//
//	go run github.com/limitgen/limitgen/gen -policy policy.yaml -out generated
//	go run github.com/limitgen/limitgen/gen -policy policy.yaml -out generated -check
//	go run github.com/limitgen/limitgen/gen simulate -policy policy.yaml -rule API -plan free < requests.csv
//
// With -check it writes nothing and exits 1, showing a diff, when the files in
// -out are not what the policy generates. On any error in the policy it reports
// every problem as file:line:col and writes nothing. simulate replays a request
// log through a rule or tier and prints what the policy would have decided (see
// simulate.go).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "simulate" {
		return simulate(args[1:], os.Stdin, stdout, stderr)
	}
	fs := flag.NewFlagSet("gen", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "policy.yaml", "the policy file")
	out := fs.String("out", "generated", "the directory of the generated package")
	check := fs.Bool("check", false, "write nothing; exit 1 with a diff when -out is not what the policy generates")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	name, src, err := generateFile(*policy)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	path := filepath.Join(*out, name)
	if *check {
		return checkDir(*out, path, src, stdout, stderr)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if err := os.WriteFile(path, src, 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// generateFile reads, validates and renders a policy: the file name to write and
// its contents. The error lists every problem in the policy.
func generateFile(policyPath string) (string, []byte, error) {
	raw, err := os.ReadFile(policyPath)
	if err != nil {
		return "", nil, err
	}
	m, err := compile(filepath.Base(policyPath), raw)
	if err != nil {
		return "", nil, err
	}
	src, err := render(m)
	if err != nil {
		return "", nil, err
	}
	return m.pkg + ".go", src, nil
}

// compile parses and validates a policy into its model.
func compile(name string, raw []byte) (*model, error) {
	p := &parser{file: name}
	doc := p.parse(raw)
	if doc == nil {
		return nil, p.diags
	}
	m := p.validate(doc)
	if len(p.diags) > 0 {
		return nil, p.diags
	}
	return m, nil
}

// render prints the model through jennifer, which gofmts it. When formatting
// fails, the error carries the unformatted source so that the bug can be seen.
func render(m *model) ([]byte, error) {
	f := emit(m)
	var buf bytes.Buffer
	if err := f.Render(&buf); err != nil {
		f.NoFormat = true
		var raw bytes.Buffer
		_ = f.Render(&raw)
		return nil, fmt.Errorf("generator bug: the emitted code does not format: %v\n%s", err, raw.String())
	}
	return buf.Bytes(), nil
}

// checkDir compares the generated file with the one on disk and looks for other
// generated files in dir that the policy no longer produces.
func checkDir(dir, path string, want []byte, stdout, stderr io.Writer) int {
	stale := false
	got, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		fmt.Fprintf(stderr, "%s is missing: run go generate ./...\n", path)
		stale = true
	case err != nil:
		fmt.Fprintln(stderr, err)
		return 1
	case !bytes.Equal(got, want):
		fmt.Fprintf(stderr, "%s does not match the policy: run go generate ./...\n", path)
		fmt.Fprint(stderr, lineDiff(path+" (on disk)", path+" (from the policy)", string(got), string(want)))
		stale = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == path || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		if b, err := os.ReadFile(p); err == nil && bytes.HasPrefix(b, []byte("// "+header)) {
			fmt.Fprintf(stderr, "%s is a generated file the policy no longer produces: delete it\n", p)
			stale = true
		}
	}
	if stale {
		return 1
	}
	fmt.Fprintf(stdout, "%s is up to date\n", path)
	return 0
}
