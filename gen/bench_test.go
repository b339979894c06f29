package main

import (
	"fmt"
	"strings"
	"testing"
)

// policyOf returns a policy of n rules, cycling through the features.
func policyOf(n int) []byte {
	var b strings.Builder
	b.WriteString("package: big\nplans: [free, pro]\nrules:\n")
	for i := range n {
		switch i % 4 {
		case 0:
			fmt.Fprintf(&b, "  - {name: R%d, key: string, rate: %d/s, burst: %d, max_keys: 1000}\n", i, i+1, i+2)
		case 1:
			fmt.Fprintf(&b, "  - {name: R%d, key: int64, rate: %d per 10s, refill: interval, burst: %d, initial: 1}\n", i, i+1, i+1)
		case 2:
			fmt.Fprintf(&b, "  - {name: R%d, rate: %d/min, burst: %d, cost: 2}\n", i, i+1, i+2)
		case 3:
			fmt.Fprintf(&b, "  - name: R%d\n    key: string\n    rate: %d/s\n    burst: %d\n    plans:\n      pro: {rate: %d/s, burst: %d}\n", i, i, i, 10*i, 10*i)
		}
	}
	b.WriteString("tiers:\n  - {name: T, rules: [R0, R1, R2, R3]}\n")
	return []byte(b.String())
}

// BenchmarkGenerate measures the whole generator — parse, validate, emit,
// gofmt — for policies of 10 and 100 rules.
func BenchmarkGenerate(b *testing.B) {
	for _, n := range []int{10, 100} {
		src := policyOf(n)
		b.Run(fmt.Sprintf("rules=%d", n), func(b *testing.B) {
			for b.Loop() {
				m, err := compile("big.yaml", src)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := render(m); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
