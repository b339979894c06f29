package rollingv2

// rollingv2.go beside this file is generated from storetest/rolling/v2.yaml:
// `make generate` regenerates it (go generate, over every module) and `make
// check` fails when it is stale (.ci/generated -check).

//go:generate go run -C ../../.. ./gen -policy storetest/rolling/v2.yaml -out internal/rolling/v2
