package main

import (
	"bytes"
	"path/filepath"
	"testing"
)

// TestGeneratedBudgets holds what the simplest policies generate to their
// budgets: what is the same for every policy belongs in the runtime
// (genimpl, sharedimpl, limithttp.Door), not printed into each package.
func TestGeneratedBudgets(t *testing.T) {
	for _, tc := range []struct {
		policy string
		lines  int
	}{
		{"local.yaml", 200},  // one local rule, one HTTP route
		{"shared.yaml", 250}, // one shared rule
	} {
		_, src, err := generateFile(filepath.Join("testdata", "budget", tc.policy))
		if err != nil {
			t.Fatalf("%s: %v", tc.policy, err)
		}
		n := bytes.Count(src, []byte("\n"))
		if n > tc.lines {
			t.Errorf("%s generates %d lines, over its budget of %d", tc.policy, n, tc.lines)
		}
		t.Logf("%s: %d lines (budget %d)", tc.policy, n, tc.lines)
	}
}
