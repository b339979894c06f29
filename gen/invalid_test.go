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
var positioned = regexp.MustCompile(`^[a-z_]+\.yaml:\d+(:\d+)?: .+`)

// TestInvalidPolicies runs every policy in testdata/invalid: each must be refused
// with the messages its "# want: LINE:COL: text" lines give (a line of the
// error that starts with file:LINE:COL: and contains text; "-" for a problem
// with no place to point at), every message must carry its position unless the
// policy has none, and the generator must write nothing. A policy with a line
// "# exactly" must get those messages and no others.
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
				pos, text, ok := strings.Cut(w, ": ")
				if !ok {
					t.Fatalf("# want: %q is not LINE:COL: text", w)
				}
				prefix := name + ":" + pos + ": "
				if pos == "-" {
					prefix = name + ": "
				}
				found := false
				for _, line := range strings.Split(msg, "\n") {
					found = found || strings.HasPrefix(line, prefix) && strings.Contains(line, text)
				}
				if !found {
					t.Errorf("error does not say %q at %s; it says:\n%s", text, pos, msg)
				}
			}
			if strings.Contains(string(raw), "\n# exactly\n") {
				if n := len(strings.Split(msg, "\n")); n != len(wants) {
					t.Errorf("%d messages, want exactly the %d above (each mistake once):\n%s", n, len(wants), msg)
				}
			}
			for _, line := range strings.Split(msg, "\n") {
				if !positioned.MatchString(line) && name != "empty.yaml" {
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
