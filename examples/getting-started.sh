#!/usr/bin/env bash
# Follows the README's "Using it in your service" on a new module, as a
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
    rate: 5/s
    burst: 10
    max_keys: 100000
    plans:
      pro: {rate: 50/s, burst: 100}
  - name: Global
    rate: 1000/s
    burst: 2000
tiers:
  - name: Request
    rules: [PerUser, Global]
YAML

cat > main.go <<'GO'
package main

//go:generate go tool gen -policy policy.yaml -out limits

import (
	"fmt"

	"example.com/svc/limits"
)

func main() {
	lims := limits.New()
	for i := range 11 {
		d := lims.Request(limits.PlanFree, "alice")
		if !d.Allowed {
			v, _ := d.RetryAfterHeader()
			fmt.Printf("request %d: denied by %s, Retry-After %s\n", i+1, d.DeniedBy, v)
		}
	}
}
GO

go generate ./...
go mod tidy
go vet ./...
out=$(go run .)
want="request 11: denied by PerUser, Retry-After 1"
if [ "$out" != "$want" ]; then
  echo "getting-started: the program printed:"; echo "$out"; echo "want:"; echo "$want"; exit 1
fi
go tool gen -policy policy.yaml -out limits -check >/dev/null
echo "getting-started: a new module built and ran the README's steps against $checkout"
