// Command gen is limitgen's generator: it reads a rate-limit policy (YAML),
// validates it, and writes a Go package with one typed limiter per rule over
// the atomicbucket runtime.
//
//	go run github.com/limitgen/limitgen/gen -policy policy.yaml -out generated
//	go run github.com/limitgen/limitgen/gen -policy policy.yaml -out generated -check
//	go run github.com/limitgen/limitgen/gen simulate -policy policy.yaml -rule API -plan free < requests.csv
//	go run github.com/limitgen/limitgen/gen envoy -o policy.yaml config/*.yaml
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
	"fmt"
	goparser "go/parser"
	"go/token"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/limitgen/limitgen/gen/internal/cli"
	"github.com/limitgen/limitgen/gen/internal/diff"
	"github.com/limitgen/limitgen/gen/internal/emit"
	"github.com/limitgen/limitgen/gen/internal/envoy"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/gen/internal/numbers"
	"github.com/limitgen/limitgen/gen/internal/policy"
	"github.com/limitgen/limitgen/gen/internal/simulate"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "simulate" {
		return simulate.Main(args[1:], os.Stdin, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "numbers" {
		return numbers.Main(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "envoy" {
		return envoy.Main(args[1:], stdout, stderr)
	}
	fs := cli.FlagSet("gen", stderr,
		"usage: gen [-policy policy.yaml] [-out generated] [-main cmd/ratelimit] [-check]",
		"       gen simulate -policy policy.yaml -rule RULE|TIER [-plan PLAN] < requests",
		"Generates a Go package of rate limiters from a policy; -check compares instead of writing.",
		"       gen numbers -policy policy.yaml numbers.yaml...",
		"       gen envoy [-package limits] [-o policy.yaml] config.yaml...",
		"simulate replays a request log through a rule or tier (gen simulate -h for more);",
		"numbers checks overlay files of numbers against the policy (gen numbers -h);",
		"envoy translates envoyproxy/ratelimit's configuration into a policy (gen envoy -h).",
	)
	policy := fs.String("policy", "policy.yaml", "the policy file")
	out := fs.String("out", "generated", "the directory of the generated package")
	check := fs.Bool("check", false, "write nothing; exit 1 with a diff when -out is not what the policy generates")
	mainDir := fs.String("main", "", "also write a ready server of the policy's rls: section (a main package) into this directory, such as cmd/ratelimit")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	name, src, err := generateFile(*policy)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	path := filepath.Join(*out, name)
	var mainSrc []byte
	if *mainDir != "" {
		if mainSrc, err = generateMain(*policy, *out); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	if *check {
		code := checkDir(*out, path, src, stdout, stderr)
		if mainSrc != nil {
			mc := checkDir(*mainDir, filepath.Join(*mainDir, "main.go"), mainSrc, stdout, stderr)
			if mc == 0 && code == 0 {
				mc = buildMain(*mainDir, stderr)
			}
			code = max(code, mc)
		}
		return code
	}
	if err := writeDir(*out, path, pkgOf(src), src, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if mainSrc != nil {
		if err := writeDir(*mainDir, filepath.Join(*mainDir, "main.go"), "main", mainSrc, stdout); err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
	}
	return 0
}

// generateMain is the ready server of the policy's rls: section, importing
// the package generated into out: its import path is the path of out below
// the module that holds it (its go.mod's module line).
func generateMain(policyPath, out string) ([]byte, error) {
	m, err := policy.Load(policyPath, filepath.Base(policyPath))
	if err != nil {
		return nil, err
	}
	if names := m.StoreNames(); len(names) > 0 {
		return nil, fmt.Errorf("-main: the ready server keeps the shared rules in the one store its flags name, and the policy puts rules on stores of their own (%s): write your own main with WithStoreFor, or drop the rules' store: fields", strings.Join(names, ", "))
	}
	abs, err := filepath.Abs(out)
	if err != nil {
		return nil, err
	}
	for dir := abs; ; dir = filepath.Dir(dir) {
		if gomod, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil {
			mod := modulePath(gomod)
			if mod == "" {
				return nil, fmt.Errorf("%s: no module line", filepath.Join(dir, "go.mod"))
			}
			rel, err := filepath.Rel(dir, abs)
			if err != nil {
				return nil, err
			}
			imp := mod
			if rel != "." {
				imp += "/" + filepath.ToSlash(rel)
			}
			return emit.RenderMain(m, imp)
		}
		if filepath.Dir(dir) == dir {
			return nil, fmt.Errorf("-main: no go.mod holds %s: the server imports the generated package by its module's path", out)
		}
	}
}

// buildMain builds the ready server in dir (go build, output discarded), so
// that -check fails on a server that matches its policy but does not build:
// a module that lacks a requirement it imports (limitrls, the stores'
// modules, their replace lines before they are published), or a generator
// bug. It reports go build's own words.
func buildMain(dir string, stderr io.Writer) int {
	cmd := exec.Command("go", "build", "-o", os.DevNull, ".")
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		fmt.Fprintf(stderr, "%s does not build (go build: %v):\n%s", dir, err, out)
		return 1
	}
	return 0
}

// modulePath is a go.mod's module path.
func modulePath(gomod []byte) string {
	for _, line := range strings.Split(string(gomod), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" {
			return strings.Trim(f[1], `"`)
		}
	}
	return ""
}

// pkgOf is the package name of generated source.
func pkgOf(src []byte) string {
	f, err := goparser.ParseFile(token.NewFileSet(), "", src, goparser.PackageClauseOnly)
	if err != nil {
		return ""
	}
	return f.Name.Name
}

// generated reports whether the file at path was written by limitgen: its
// first line is the generated-code emit.Header.
func generated(path string) (bool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return false, err
	}
	first, _, _ := bytes.Cut(b, []byte("\n"))
	return string(bytes.TrimSuffix(first, []byte("\r"))) == "// "+emit.Header, nil
}

// writeDir writes the generated file at path in dir, which holds package pkg,
// after checking that doing so destroys nothing a person wrote and leaves a
// package that builds:
//   - a file at path without the generated-code emit.Header is never overwritten;
//   - other Go files in dir must be of package pkg (a generated package needs a
//     directory of its own, not a program's);
//   - other files with the emit.Header are ones an earlier policy produced and this
//     one no longer does: they are removed, and said so.
//
// The file is written to a temporary file in dir and renamed over path, so a
// failed write leaves the old file whole.
func writeDir(dir, path, pkg string, src []byte, stdout io.Writer) error {
	if gen, err := generated(path); err == nil && !gen {
		return fmt.Errorf("%s exists and was not generated by limitgen (its first line is not %q): it is left as it is; move it, or give -out a directory of its own", path, "// "+emit.Header)
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var stale []string
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == path || e.IsDir() || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		if gen, err := generated(p); err == nil && gen {
			stale = append(stale, p)
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if other := pkgOf(b); other != "" && other != pkg && other != pkg+"_test" {
			return fmt.Errorf("%s is package %s, and the generated package is %s: a generated package needs a directory of its own, such as -out %s",
				p, other, pkg, filepath.Join(dir, pkg))
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, ".limitgen-*.tmp")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(src); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	for _, p := range stale {
		if err := os.Remove(p); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "removed %s: generated from an earlier policy, which this one no longer produces\n", p)
	}
	return nil
}

// generateFile reads, validates and renders a policy: the file name to write and
// its contents. The error lists every problem in the policy.
func generateFile(policyPath string) (string, []byte, error) {
	m, err := policy.Load(policyPath, filepath.Base(policyPath))
	if err != nil {
		return "", nil, err
	}
	src, err := render(m)
	if err != nil {
		return "", nil, err
	}
	return m.Pkg + ".go", src, nil
}

// compile parses and validates a policy into its model (policy.Compile).
func compile(name string, raw []byte) (*model.Model, error) { return policy.Compile(name, raw) }

// render prints a model as Go source (emit.Render).
func render(m *model.Model) ([]byte, error) { return emit.Render(m) }

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
		fmt.Fprint(stderr, diff.Lines(path+" (on disk)", path+" (from the policy)", string(got), string(want)))
		stale = true
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if p == path || !strings.HasSuffix(e.Name(), ".go") {
			continue
		}
		if gen, err := generated(p); err == nil && gen {
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
