// Package diff shows how two texts differ, as gen -check prints it.
package diff

import (
	"fmt"
	"strings"
)

// Lines is a unified-style diff of two texts, from their longest common
// subsequence of lines, with two lines of context. Large inputs fall back to the
// first differing line.
func Lines(nameA, nameB, a, b string) string {
	x, y := strings.Split(a, "\n"), strings.Split(b, "\n")
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", nameA, nameB)
	if len(x)*len(y) > 16_000_000 {
		for i := 0; i < min(len(x), len(y)); i++ {
			if x[i] != y[i] {
				fmt.Fprintf(&out, "@@ line %d @@\n-%s\n+%s\n", i+1, x[i], y[i])
				return out.String()
			}
		}
		fmt.Fprintf(&out, "@@ the files differ in length: %d and %d lines @@\n", len(x), len(y))
		return out.String()
	}
	// lcs[i][j] is the LCS length of x[i:] and y[j:].
	lcs := make([][]int32, len(x)+1)
	for i := range lcs {
		lcs[i] = make([]int32, len(y)+1)
	}
	for i := len(x) - 1; i >= 0; i-- {
		for j := len(y) - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []diffLine
	i, j := 0, 0
	for i < len(x) || j < len(y) {
		switch {
		case i < len(x) && j < len(y) && x[i] == y[j]:
			ops = append(ops, diffLine{' ', x[i], i + 1})
			i, j = i+1, j+1
		case i < len(x) && (j == len(y) || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, diffLine{'-', x[i], i + 1})
			i++
		default:
			ops = append(ops, diffLine{'+', y[j], j + 1})
			j++
		}
	}
	const context = 2
	for k := 0; k < len(ops); k++ {
		if ops[k].op == ' ' {
			continue
		}
		start := max(k-context, 0)
		end := k
		for end < len(ops) && (ops[end].op != ' ' || end+1 < len(ops) && nextChange(ops, end) <= context) {
			end++
		}
		end = min(end+context, len(ops))
		fmt.Fprintf(&out, "@@ near line %d @@\n", ops[start].at)
		for _, l := range ops[start:end] {
			fmt.Fprintf(&out, "%c%s\n", l.op, l.text)
		}
		k = end - 1
	}
	return out.String()
}

// diffLine is one line of a diff: ' ' kept, '-' removed, '+' added.
type diffLine struct {
	op   byte
	text string
	at   int // line number in the old text (in the new one for additions)
}

// nextChange is how many unchanged lines follow position k before the next change.
func nextChange(ops []diffLine, k int) int {
	n := 0
	for i := k; i < len(ops); i++ {
		if ops[i].op != ' ' {
			return n
		}
		n++
	}
	return len(ops)
}
