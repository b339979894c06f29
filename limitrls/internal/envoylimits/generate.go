package envoylimits

// envoylimits.go beside this file is generated from
// limitrls/testdata/envoy.policy.yaml, which gen envoy translates from
// envoyproxy/ratelimit's limitrls/testdata/envoy/rl.yaml: `make generate`
// regenerates both (go generate, over every module) and `make check` fails
// when either is stale (.ci/generated -check; gen's envoy tests).

//go:generate go run -C ../../.. ./gen envoy -local -package envoylimits -o limitrls/testdata/envoy.policy.yaml limitrls/testdata/envoy/rl.yaml
//go:generate go run -C ../../.. ./gen -policy limitrls/testdata/envoy.policy.yaml -out limitrls/internal/envoylimits
