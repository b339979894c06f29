package httplimits

// httplimits.go beside this file is generated from bench/httppolicy.yaml:
// `make generate` regenerates it (go generate, over every module) and `make
// check` fails when it is stale (.ci/generated -check).

//go:generate go run -C ../.. ./gen -policy bench/httppolicy.yaml -out bench/httplimits
