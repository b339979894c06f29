// Package translated is envoyproxy/ratelimit's configuration in
// ratelimit.yaml, taken over by limitgen: `gen envoy` translates it into
// policy.yaml (shared window rules, in namespace rl), and the generator
// writes the package and the ready server from that. The tests of package
// envoy run two servers on one redis-server, as two envoyproxy/ratelimit
// instances share one Redis.
package translated

//go:generate go tool gen envoy -package limits -o policy.yaml ratelimit.yaml
//go:generate go tool gen -policy policy.yaml -out limits -main cmd/ratelimit
