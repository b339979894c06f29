// Package routertest holds the HTTP middleware to its promise under the
// routers it is documented with (http.ServeMux, chi, gorilla/mux), each the
// real one: every request a router hands to a handler of a policy route was
// decided by that route's rule, whatever its path (dot segments, escapes,
// repeated slashes). It is a module of its own, so that the routers stay out
// of limitgen's go.mod; package routes is generated from policy.yaml.
package routertest
