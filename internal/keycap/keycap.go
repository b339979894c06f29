// Package keycap counts the keys of a table that has a cap on them: the
// bucket tables of atomicbucket and the window tables of atomicwindow.
package keycap

import "sync/atomic"

// Claim counts a new key in keys, unless that would take it past maxKeys
// (0 or less: no cap), and reports whether it did.
func Claim(keys *atomic.Int64, maxKeys int64) bool {
	if maxKeys <= 0 {
		keys.Add(1)
		return true
	}
	for {
		n := keys.Load()
		if n >= maxKeys {
			return false
		}
		if keys.CompareAndSwap(n, n+1) {
			return true
		}
	}
}
