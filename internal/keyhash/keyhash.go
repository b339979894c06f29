// Package keyhash is the one hash of a key's text limitgen uses wherever two
// processes or two stores must agree on it: where a key's interval grid is
// placed (atomicbucket, redisstore, pgstore, generated composite keys), and
// which stripe a key's counters fall in.
package keyhash

// Of is the 64-bit FNV-1a hash of s.
func Of[S string | []byte](s S) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}
