package policy

import (
	"fmt"
	"sort"
	"strings"
)

// Diag is one problem in a policy, at a position, saying what is wrong and what
// would be right.
type Diag struct {
	File      string
	Line, Col int
	Msg       string
}

func (d Diag) String() string {
	if d.Line == 0 {
		return fmt.Sprintf("%s: %s", d.File, d.Msg)
	}
	if d.Col == 0 {
		return fmt.Sprintf("%s:%d: %s", d.File, d.Line, d.Msg)
	}
	return fmt.Sprintf("%s:%d:%d: %s", d.File, d.Line, d.Col, d.Msg)
}

// Diags collects every problem found, so that one run reports them all.
type Diags []Diag

func (ds Diags) Error() string {
	sorted := append(Diags(nil), ds...)
	sort.SliceStable(sorted, func(i, j int) bool {
		if sorted[i].Line != sorted[j].Line {
			return sorted[i].Line < sorted[j].Line
		}
		return sorted[i].Col < sorted[j].Col
	})
	lines := make([]string, len(sorted))
	for i, d := range sorted {
		lines[i] = d.String()
	}
	return strings.Join(lines, "\n")
}

// didYouMean returns the known word closest to s, when it is close enough to be
// a likely typo.
func didYouMean(s string, known []string) string {
	best, bestDist := "", len(s)/2+2
	for _, k := range known {
		if d := editDistance(strings.ToLower(s), strings.ToLower(k)); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
