// Package bench measures limitgen against the floor of what a lock-free
// bucket can cost and against the Go rate limiters people use. It is its own
// module so that the peers never become dependencies of limitgen.
//
// Run it through `make bench` at the repository root, which interleaves runs
// and prints a benchstat table.
package bench
