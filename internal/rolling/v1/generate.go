package rollingv1

// rollingv1.go beside this file is generated from storetest/rolling/v1.yaml:
// `make generate` regenerates it (go generate, over every module) and `make
// check` fails when it is stale (.ci/generated -check).

//go:generate go run -C ../../.. ./gen -policy storetest/rolling/v1.yaml -out internal/rolling/v1
