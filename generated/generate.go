package limits

// limits.go beside this file is generated from the repository's policy.yaml:
// `make generate` regenerates it (go generate, over every module) and `make
// check` fails when it is stale (.ci/generated -check).

//go:generate go run -C .. ./gen -policy policy.yaml -out generated
