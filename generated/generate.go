package limits

// limits.go beside this file is generated from the repository's policy.yaml;
// `go generate ./...` regenerates it and `go run ./gen -check` (run by make test)
// fails when it is stale.

//go:generate go run ../gen -policy ../policy.yaml -out .
