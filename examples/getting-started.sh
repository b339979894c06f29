#!/usr/bin/env bash
# Follows the README's "Install" and "Five minutes" on a new module, as a
# newcomer would before limitgen is published: the module points at a local
# checkout of limitgen with a replace directive, `go get -tool` adds the
# generator, `go generate` writes the package, and a small program uses it.
# `make test` runs it; it leaves nothing behind.
set -euo pipefail
checkout=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

go mod init example.com/svc >/dev/null 2>&1
# Until limitgen is published, `go get -tool github.com/limitgen/limitgen/gen`
# has nothing to fetch; point the module at a checkout instead: require the
# module at the zero version, replace it with the checkout, add the tool line.
go mod edit -require github.com/limitgen/limitgen@v0.0.0-00010101000000-000000000000 \
  -replace github.com/limitgen/limitgen="$checkout" \
  -tool github.com/limitgen/limitgen/gen
go mod tidy

cat > policy.yaml <<'YAML'
package: limits
plans: [free, pro]
rules:
  - name: PerUser
    key: string
    rate: 10/min
    burst: 10
    max_keys: 100000
    plans:
      pro: {rate: 100/min, burst: 100}
  - name: Global
    rate: 1000/s
    burst: 2000
tiers:
  - name: Request
    rules: [PerUser, Global]
http:
  missing_key: 401
  plan: {from: "func:PlanOf", default: free}
  keys:
    PerUser: ["func:UserID"]
  routes:
    - pattern: "GET /hello"
      tier: Request
YAML

cat > main.go <<'GO'
package main

//go:generate go tool gen -policy policy.yaml -out limits

import (
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"

	"example.com/svc/limits"
)

func main() {
	user := func(r *http.Request) (string, bool) { u := r.Header.Get("X-User"); return u, u != "" } // stands for your auth
	mw, err := limits.NewMiddleware(limits.New(), limits.Hooks{
		UserID: user,
		PlanOf: func(r *http.Request) (limits.Plan, bool) { return limits.PlanFree, true },
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := mw.NewServeMux()
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	for i, u := range []string{"alice", "alice", "alice", "alice", "alice", "alice", "alice", "alice", "alice", "alice", "alice", ""} {
		r := httptest.NewRequest("GET", "/hello", nil)
		r.Header.Set("X-User", u)
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != http.StatusOK {
			fmt.Printf("request %d: %d RateLimit %s Retry-After %q\n", i+1, w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
		}
	}
	d := limits.Request(limits.PlanPro, "bob") // the limiters without HTTP
	fmt.Println("bob:", d.Allowed, d.Remaining)
}
GO

go generate ./...
go mod tidy
go vet ./...
out=$(go run .)
want='request 11: 429 RateLimit "PerUser";r=0;t=6 Retry-After "6"
request 12: 401 RateLimit  Retry-After ""
bob: true 99'
if [ "$out" != "$want" ]; then
  echo "getting-started: the program printed:"; echo "$out"; echo "want:"; echo "$want"; exit 1
fi
go tool gen -policy policy.yaml -out limits -check >/dev/null

# The README's second block: the nested modules a policy's other sections
# import (here an rls: section and its ready server, which imports rlsserver,
# and through it limitrls, both stores' modules and limitprom), each pointed at the
# checkout. Without those replace lines the go mod tidy below fails to find them.
for m in limitgrpc limitrls rlsserver redisstore pgstore limitprom limitotel; do
  go mod edit -replace github.com/limitgen/limitgen/$m="$checkout/$m"
done
mkdir edge
cat > edge/policy.yaml <<'YAML'
package: edge
rules:
  - {name: PerCaller, key: string, limit: 10, window: 1s}
rls:
  domains:
    - domain: edge
      descriptors:
        - {entries: [caller], rule: PerCaller}
YAML
go tool gen -policy edge/policy.yaml -out edge/limits -main edge/cmd/ratelimit >/dev/null
go mod tidy
go vet ./...
go tool gen -policy edge/policy.yaml -out edge/limits -main edge/cmd/ratelimit -check >/dev/null
echo "getting-started: a new module built and ran the README's steps against $checkout"
