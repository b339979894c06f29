package rlslimits

// rlslimits.go beside this file is generated from
// limitrls/testdata/policy.yaml: `make generate` regenerates it (go generate,
// over every module) and `make check` fails when it is stale (.ci/generated
// -check).

//go:generate go run -C ../../.. ./gen -policy limitrls/testdata/policy.yaml -out limitrls/internal/rlslimits
