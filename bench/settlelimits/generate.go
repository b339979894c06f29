package settlelimits

// settlelimits.go beside this file is generated from bench/settlepolicy.yaml:
// `make generate` regenerates it (go generate, over every module) and `make
// check` fails when it is stale (.ci/generated -check).

//go:generate go run -C ../.. ./gen -policy bench/settlepolicy.yaml -out bench/settlelimits
