package routes

// routes.go beside this file is generated from
// limithttp/routertest/policy.yaml: `make generate` regenerates it (go
// generate, over every module) and `make check` fails when it is stale
// (.ci/generated -check).

//go:generate go run -C ../../.. ./gen -policy limithttp/routertest/policy.yaml -out limithttp/routertest/routes
