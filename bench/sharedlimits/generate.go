package sharedlimits

// sharedlimits.go beside this file is generated from bench/sharedpolicy.yaml:
// `make generate` regenerates it (go generate, over every module) and `make
// check` fails when it is stale (.ci/generated -check).

//go:generate go run -C ../.. ./gen -policy bench/sharedpolicy.yaml -out bench/sharedlimits
