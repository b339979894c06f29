# limitgen — the commands a contributor runs. `make test` is what CI runs.
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

GO        ?= go
FUZZTIME  ?= 10m          # per target, for `make fuzz`
# Inside `make test` the fuzzers run for a number of executions, not a duration:
# a duration budget can end in go1.26's coordinator deadline race (golang/go#75804).
SMOKE_FuzzDifferential ?= 8000x
SMOKE_FuzzRule         ?= 30000x
SMOKE_FuzzNumbers      ?= 9000x
SMOKE_FuzzWindow       ?= 20000x
SMOKE_FuzzInFlight     ?= 20000x
SMOKE_FuzzPolicy       ?= 9000x
SMOKE_FuzzClientIP     ?= 15000x
SMOKE_FuzzHTTP         ?= 8000x
SMOKE_FuzzScript       ?= 1000x
SMOKE_FuzzFunction     ?= 600x
SMOKE_FuzzWindowLease  ?= 300x
SMOKE_FuzzWindowLeasePG ?= 100x
BENCHRUNS ?= 6            # interleaved runs for `make bench` (medians of these)
BENCHTIME ?= 0.5s
FUZZ_TARGETS := FuzzDifferential FuzzRule FuzzNumbers FuzzWindow FuzzInFlight

.PHONY: test check unit servers redis pg prom otel grpc schema examples getting-started fuzz-smoke fuzz bench bench-full bench-smoke generate

## generate: regenerate every generated package and fixture: go generate over
## every module. Each generated package has a generate.go beside it whose
## //go:generate line names its policy; `make check` runs the same lines with
## -check (.ci/generated), so the list is kept in one place.
GEN_MODULES = . bench limitgrpc limitrls limithttp/routertest examples/quickstart examples/envoy
generate:
	for m in $(GEN_MODULES); do (cd $$m && $(GO) generate ./...) || exit 1; done

## test: everything CI checks — formatting, vet, tidy modules, all tests with -race
## (including the committed fuzz corpora), a short run of each fuzz target, and
## a smoke run of the benchmarks. Each stage prints its start.
##
## The stages run one after another: run side by side on 2 cores, the
## CPU-bound stages starved the stores' timing-bound tests (200 ms timeouts,
## 1 s convergence bounds) into failures that were the machine's, not the
## code's.
test: servers check unit redis pg prom otel grpc schema examples getting-started fuzz-smoke bench-smoke
	@echo "== make test passed: $$(date +%T)"

# The servers the stores' tests and benchmarks start for themselves
# (redis-server, PostgreSQL, PgBouncer): installed with apt-get when missing
# where that can be done (root, or sudo without a password); otherwise the
# command to run is printed. .ci/run uses the same script.
servers:
	@echo "== make servers: $$(date +%T)"
	.ci/servers

check:
	@echo "== make check: $$(date +%T)"
	.ci/generated -check
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GO) mod tidy -diff
	cd bench && $(GO) vet ./... && $(GO) mod tidy -diff
	cd schema && $(GO) vet ./... && $(GO) mod tidy -diff
	cd redisstore && $(GO) vet ./... && $(GO) mod tidy -diff
	cd pgstore && $(GO) vet ./... && $(GO) mod tidy -diff
	cd limitprom && $(GO) vet ./... && $(GO) mod tidy -diff
	cd limitotel && $(GO) vet ./... && $(GO) mod tidy -diff
	cd limitgrpc && $(GO) vet ./... && $(GO) mod tidy -diff
	cd limitrls && $(GO) vet ./... && $(GO) mod tidy -diff
	cd rlsserver && $(GO) vet ./... && $(GO) mod tidy -diff
	cd limithttp/routertest && $(GO) vet ./... && $(GO) mod tidy -diff

# Every package under the race detector, but for fuzz's two long random
# differential runs, which check on one goroutine (nothing to race) and take
# 80 s under -race against 11 s without, and gen's TestGeneratedPackagesRun,
# which builds and runs the generated packages in a module of their own (its
# time is the compiler's; 97 s under -race against 60 s without): they run
# once, without it.
LONG_DIFFERENTIAL = ^(TestNumbersRandom|TestDifferentialRandom)$$
NO_RACE = ^(TestNumbersRandom|TestDifferentialRandom|TestGeneratedPackagesRun)$$

# gen's tests render simulate's page in headless Chromium (.ci/servers chromium).
unit:
	@echo "== make unit: $$(date +%T)"
	.ci/servers chromium
	$(GO) test -race -count=1 -skip '$(NO_RACE)' ./...
	$(GO) test -count=1 -run '$(LONG_DIFFERENTIAL)' ./fuzz
	$(GO) test -count=1 -run '^TestGeneratedPackagesRun$$' ./gen
	cd limithttp/routertest && $(GO) test -race -count=1 ./...

# The Redis store, against redis-servers its tests start on 127.0.0.1 (never
# skipped: without redis-server the target says how to install it).
redis:
	@echo "== make redis: $$(date +%T)"
	.ci/servers redis
	cd redisstore && $(GO) test -race -count=1 ./...

# The PostgreSQL store, against PostgreSQL servers its tests start on
# 127.0.0.1 (never skipped: without initdb the target says how to install it).
pg:
	@echo "== make pg: $$(date +%T)"
	.ci/servers postgres pgbouncer
	cd pgstore && $(GO) test -race -count=1 ./...

# The Prometheus collector (module limitprom), scraped over HTTP, with a
# PostgreSQL store its test starts on 127.0.0.1.
prom:
	@echo "== make prom: $$(date +%T)"
	.ci/servers postgres
	cd limitprom && $(GO) test -race -count=1 ./...

# The OpenTelemetry instruments (module limitotel), read through the SDK's
# manual reader, with a PostgreSQL store its test starts on 127.0.0.1.
otel:
	@echo "== make otel: $$(date +%T)"
	.ci/servers postgres
	cd limitotel && $(GO) test -race -count=1 ./...

# The gRPC interceptors (module limitgrpc), generated from
# limitgrpc/testdata/policy.yaml, between a real gRPC server and client on
# 127.0.0.1, with a PostgreSQL store its test starts for the shared rule.
grpc:
	@echo "== make grpc: $$(date +%T)"
	.ci/servers postgres
	cd limitgrpc && $(GO) test -race -count=1 ./...
	cd limitrls && $(GO) test -race -count=1 ./...
	cd rlsserver && $(GO) test -race -count=1 ./...

# The JSON Schema for editors, checked against the repository's policies.
schema:
	@echo "== make schema: $$(date +%T)"
	cd schema && $(GO) test -count=1 ./...

# The example user modules (examples/quickstart; examples/envoy, Envoy's
# rate-limit service run on each store): through their go.mod tool line (the command its
# go:generate directive runs), check that its generated package matches its
# policy; then vet and test it.
examples:
	@echo "== make examples: $$(date +%T)"
	.ci/servers redis postgres
	cd examples/quickstart && $(GO) tool gen -policy policy.yaml -out limits -main cmd/ratelimit -check && \
	  $(GO) tool gen -policy readme/policy.yaml -out readme/limits -check && \
	  $(GO) tool gen -policy twostores.yaml -out twostores -check && \
	  $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -count=1 ./...
	cd examples/envoy && $(GO) tool gen -policy policy.yaml -out limits -main cmd/ratelimit -check && \
	  (cd translated && $(GO) tool gen envoy -package limits ratelimit.yaml | diff -u policy.yaml -) && \
	  $(GO) tool gen -policy translated/policy.yaml -out translated/limits -main translated/cmd/ratelimit -check && \
	  $(GO) mod tidy -diff && $(GO) vet ./... && $(GO) test -count=1 ./...

# The README's first steps on a new module that points at this checkout.
getting-started:
	@echo "== make getting-started: $$(date +%T)"
	examples/getting-started.sh

# A failing input is still minimized (for up to 2 s) before it is written.
fuzz-smoke: export FUZZMINIMIZE := 2s
fuzz-smoke:
	@echo "== make fuzz-smoke: $$(date +%T)"
	fuzz/run.sh FuzzDifferential $(SMOKE_FuzzDifferential)
	fuzz/run.sh FuzzRule $(SMOKE_FuzzRule)
	fuzz/run.sh FuzzNumbers $(SMOKE_FuzzNumbers)
	fuzz/run.sh FuzzWindow $(SMOKE_FuzzWindow)
	fuzz/run.sh FuzzInFlight $(SMOKE_FuzzInFlight)
	fuzz/run.sh FuzzPolicy $(SMOKE_FuzzPolicy) ./gen
	fuzz/run.sh FuzzClientIP $(SMOKE_FuzzClientIP) ./clientip
	fuzz/run.sh FuzzQueryValue $(SMOKE_FuzzHTTP) ./limithttp
	fuzz/run.sh FuzzParseIPv4 $(SMOKE_FuzzHTTP) ./clientip
	fuzz/run.sh FuzzRouter $(SMOKE_FuzzHTTP) ./limithttp
	fuzz/run.sh FuzzDispatch $(SMOKE_FuzzHTTP) ./limithttp/routertest
	fuzz/run.sh FuzzMiddleware $(SMOKE_FuzzHTTP) ./generated
	fuzz/run.sh FuzzScript $(SMOKE_FuzzScript) ./redisstore
	fuzz/run.sh FuzzFunction $(SMOKE_FuzzFunction) ./pgstore
	fuzz/run.sh FuzzWindowLease $(SMOKE_FuzzWindowLease) ./redisstore
	fuzz/run.sh FuzzWindowLease $(SMOKE_FuzzWindowLeasePG) ./pgstore
	fuzz/run.sh FuzzParseFile $(SMOKE_FuzzHTTP) ./overlay/yamlfile

# The bench module's tests (each peer decides and sends what it says; a fixed
# window admits twice its limit across its edge, limitgen never more than its
# envelope), then every benchmark a few hundred times: it proves they build,
# set up and admit (each keyed table checks that it admits before timing), not
# how fast they are; -short keeps the setups small (1e3-key tables, not 1e6).
bench-smoke:
	@echo "== make bench-smoke: $$(date +%T)"
	.ci/servers redis postgres
	cd bench && $(GO) test -short -count=1 -run . -bench . -benchtime 200x ./...

## fuzz: run each fuzz target for FUZZTIME (default 10 minutes).
fuzz:
	for t in $(FUZZ_TARGETS); do fuzz/run.sh $$t $(FUZZTIME); done
	fuzz/run.sh FuzzPolicy $(FUZZTIME) ./gen
	fuzz/run.sh FuzzClientIP $(FUZZTIME) ./clientip
	fuzz/run.sh FuzzQueryValue $(FUZZTIME) ./limithttp
	fuzz/run.sh FuzzParseIPv4 $(FUZZTIME) ./clientip
	fuzz/run.sh FuzzRouter $(FUZZTIME) ./limithttp
	fuzz/run.sh FuzzDispatch $(FUZZTIME) ./limithttp/routertest
	fuzz/run.sh FuzzMiddleware $(FUZZTIME) ./generated
	fuzz/run.sh FuzzScript $(FUZZTIME) ./redisstore
	fuzz/run.sh FuzzFunction $(FUZZTIME) ./pgstore
	fuzz/run.sh FuzzWindowLease $(FUZZTIME) ./redisstore
	fuzz/run.sh FuzzWindowLease $(FUZZTIME) ./pgstore
	fuzz/run.sh FuzzParseFile $(FUZZTIME) ./overlay/yamlfile

## bench: the main job. Regenerate, then the headline comparison (the local
## check, HTTP, Redis, PostgreSQL, each beside its peers): BENCHRUNS
## interleaved runs, progress as it goes, then a benchstat table with one
## column per implementation (bench/run.sh). About 11 minutes on 2 cores.
bench: generate
	.ci/servers redis postgres
	bench/run.sh headline $(BENCHRUNS) $(BENCHTIME)

## bench-full: every benchmark (1e6-key tables, 1/16/64 callers, tiers,
## leases, fsync on), the same way. About 20 minutes on 2 cores.
bench-full: generate
	.ci/servers redis postgres
	bench/run.sh full $(BENCHRUNS) $(BENCHTIME)
