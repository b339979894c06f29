package rlslimits

// rlslimits.go beside this file is generated from bench/rlspolicy.yaml: `make
// generate` regenerates it (go generate, over every module) and `make check`
// fails when it is stale (.ci/generated -check).

//go:generate go run -C ../.. ./gen -policy bench/rlspolicy.yaml -out bench/rlslimits
