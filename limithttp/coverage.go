package limithttp

import (
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// coverageMethods are the methods a pattern without one is tried with.
var coverageMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete, http.MethodOptions}

// Uncovered returns the patterns, as a service registers them on an
// http.ServeMux, whose requests a policy's routes do not all cover: match
// (a generated middleware's router) reports, for a request, the route that
// covers it, or −1. Each pattern is tried with requests of its shape: its
// method (or each of GET, POST, PUT, PATCH, DELETE and OPTIONS when it names
// none), its host, and its path with each wildcard a sample segment (a
// subtree pattern both at its root and below it). A pattern that does not
// parse is returned too. Sorted, each once.
//
// It is a hint, not a proof: a policy route that covers the sample segment
// but not every value of a wildcard (a literal where the service has a
// wildcard) is taken as covering it.
func Uncovered(patterns []string, match func(*http.Request) int) []string {
	var out []string
	for _, s := range patterns {
		p, err := ParsePattern(s)
		if err != nil {
			out = append(out, s)
			continue
		}
		methods := coverageMethods
		if p.Method != "" {
			methods = []string{p.Method}
		}
		covered := true
		for _, m := range methods {
			for _, path := range samplePaths(p) {
				r := &http.Request{Method: m, Host: p.Host, URL: &url.URL{Path: path}, Header: http.Header{}}
				if p.Host == "" {
					r.Host = "example.com"
				}
				if match(r) < 0 {
					covered = false
				}
			}
		}
		if !covered {
			out = append(out, s)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// samplePaths are request paths of p's shape: each wildcard a sample
// segment, a subtree both at its root and below it.
func samplePaths(p Pattern) []string {
	var b strings.Builder
	for i, s := range p.Segments {
		switch {
		case s.Wild && s.Multi && s.Name == "": // a trailing slash: the subtree
			root := b.String() + "/"
			return []string{root, root + "x"}
		case s.Wild:
			b.WriteString("/x")
		case s.Name == "/" && i == len(p.Segments)-1: // {$}
			return []string{b.String() + "/"}
		default:
			b.WriteString("/" + url.PathEscape(s.Name))
		}
	}
	if b.Len() == 0 {
		return []string{"/"}
	}
	return []string{b.String()}
}
