package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// positioned is a problem line: file:line:col: message.
var positioned = regexp.MustCompile(`^[a-z_]+\.yaml:\d+:\d+: .+`)

// TestInvalidPolicies runs every policy in testdata/invalid: each must be refused
// with the messages its "# want:" lines give, every message must carry its
// position (file:line:col) unless the policy has none to point at, and the
// generator must write nothing.
func TestInvalidPolicies(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid/*.yaml")
	if len(files) < 30 {
		t.Fatalf("%d invalid policies, want at least 30", len(files))
	}
	for _, path := range files {
		name := filepath.Base(path)
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			for _, line := range strings.Split(string(raw), "\n") {
				if w, ok := strings.CutPrefix(line, "# want: "); ok {
					wants = append(wants, w)
				}
			}
			if len(wants) == 0 {
				t.Fatal("no # want: line")
			}
			_, err = compile(name, raw)
			if err == nil {
				t.Fatal("accepted, want an error")
			}
			msg := err.Error()
			for _, w := range wants {
				if !strings.Contains(msg, w) {
					t.Errorf("error does not say %q; it says:\n%s", w, msg)
				}
			}
			for _, line := range strings.Split(msg, "\n") {
				if !positioned.MatchString(line) && name != "empty.yaml" && name != "not_yaml.yaml" {
					t.Errorf("message without a position: %q", line)
				}
			}
			t.Log(msg)

			out := t.TempDir()
			var stderr bytes.Buffer
			if code := run([]string{"-policy", path, "-out", out}, &bytes.Buffer{}, &stderr); code != 1 {
				t.Fatalf("gen exited %d, want 1", code)
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Fatalf("gen wrote %d files for an invalid policy", len(entries))
			}
		})
	}
}
