package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestHugePoliciesRefused: the hostile trial's 50 MB rule name (12 GB and a
// panic in go/printer) and 10,000 rules (a 78 MB file the compiler could not
// build) are refused with a message, before anything is emitted.
func TestHugePoliciesRefused(t *testing.T) {
	for _, c := range []struct {
		name, policy, want string
	}{
		{"50 MB name", "package: limits\nrules:\n  - {name: " + strings.Repeat("A", 50<<20) + ", rate: 1/s, burst: 1}\n",
			"a policy may be at most 1048576 (1 MiB)"},
		{"10,000 rules", "package: limits\nrules:\n" + manyRules(10_000), "10000 rules; a policy may have at most 256"},
		{"plans times rules", "package: limits\nplans: [" + planList(255) + "]\nrules:\n" + manyPlannedRules(9),
			"make more than 2048 bucket sets"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := compile("huge.yaml", []byte(c.policy))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an error saying %q", err, c.want)
			}
		})
	}
}

func manyRules(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - {name: R%d, rate: 1/s, burst: 1}\n", i)
	}
	return b.String()
}

func planList(n int) string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("p%d", i)
	}
	return strings.Join(names, ", ")
}

func manyPlannedRules(n int) string {
	var b strings.Builder
	for i := range n {
		fmt.Fprintf(&b, "  - {name: R%d, key: string, rate: 1/s, burst: 1, plans: {p0: {burst: 2}}}\n", i)
	}
	return b.String()
}
