#!/usr/bin/env bash
# bench/run.sh headline|full RUNS BENCHTIME: the benchmarks `make bench`
# (headline) and `make bench-full` (full) run, RUNS times interleaved (each run
# goes through every implementation once, so a machine's drift affects all
# alike), then a benchstat table with one column per implementation.
#
# headline is each part beside its peers, in a few minutes: the generated
# package beside the runtime under it, the local check (one bucket; a table of
# 1e3 and 1e6 keys, with heap bytes a key at 1e6), a window rule's check beside a bucket's (global and 1e3 keys,
# admitting and denying), an in-flight rule's acquisition and release beside a
# bucket's check and a semaphore per key (1 and 1e3 keys), a settlement beside a check (1 and 1e3
# keys, a bucket's and a window's, and through the HTTP middleware), the HTTP middleware (alone; paired with its peers in 1 ms slices;
# and with a metrics collector read every 10 ms), the gRPC interceptors
# (alone, paired over bufconn, and in a call on loopback), Envoy's rate-limit
# service beside envoyproxy/ratelimit on one redis-server (64 callers), a shared check on
# Redis at 64 callers, a window rule on Redis beside seed 003's sorted-set log
# (64 callers), an in-flight rule on Redis beside a sorted-set semaphore (64 callers), a shared check on PostgreSQL (hot key, 16 callers), and what numbers
# changed at run time cost a generated check (BenchmarkNumbers: a table of its
# own, one column per case of numbers). full is every benchmark of the package
# (about 3 minutes a run on 2 cores).
#
# Each run tells the benchmarks its number (LIMITGEN_BENCH_RUN), by which
# BenchmarkHTTP rotates the order of its implementations. The test binary is
# built once. A run that fails is reported and the others
# go on: the table is printed from what finished, and the command then fails,
# naming what did not.
set -uo pipefail
cd "$(dirname "$0")"
mode=${1:-headline} runs=${2:-6} benchtime=${3:-0.5s}

case $mode in
headline)
  sets=(
    '^BenchmarkGenerated$'
    '^BenchmarkSingle$/^case=allow$'
    '^BenchmarkKeyed$'
    '^BenchmarkWindow$'
    '^BenchmarkInFlight$'
    '^BenchmarkSettle$'
    '^BenchmarkWindowSettle$'
    '^BenchmarkHTTPSettle$'
    '^BenchmarkHTTP$'
    '^BenchmarkHTTPPaired$'
    '^BenchmarkHTTPCollector$'
    '^BenchmarkGRPC$'
    '^BenchmarkGRPCPaired$'
    '^BenchmarkGRPCLoopback$'
    '^BenchmarkRLS$'
    '^BenchmarkRedis$/^callers=64$'
    '^BenchmarkRedisWindow$'
    '^BenchmarkRedisSlots$'
    '^BenchmarkPostgres$/^keys=1$/^callers=16$'
    '^BenchmarkNumbers$'
  ) ;;
full) sets=('.') ;;
*) echo "bench/run.sh: mode is headline or full, not $mode" >&2; exit 2 ;;
esac

mkdir -p results
out=results/bench.txt
: >"$out"
start=$SECONDS
elapsed() { printf '%dm%02ds' $(((SECONDS - start) / 60)) $(((SECONDS - start) % 60)); }

echo "== building the benchmarks"
go test -c -o results/bench.test . || exit 1

failed=()
for i in $(seq "$runs"); do
  for set in "${sets[@]}"; do
    echo "== run $i of $runs, $(elapsed): $set"
    LIMITGEN_BENCH_RUN=$i ./results/bench.test -test.run '^$' -test.bench "$set" -test.benchmem \
      -test.benchtime "$benchtime" -test.count 1 2>&1 | tee -a "$out" |
      { grep -v '^\(goos\|goarch\|pkg\|cpu\|PASS\)' || true; }
    [ "${PIPESTATUS[0]}" -eq 0 ] || failed+=("run $i: $set")
  done
done

echo "== benchstat ($runs runs, $(elapsed))"
{
  go tool benchstat -filter '-.name:(Numbers OR HTTPPaired OR GRPCPaired)' -col /impl "$out"
  if grep -q 'Paired/' "$out"; then
    echo
    echo "== paired (every implementation in one process, in 1 ms slices): <impl>-ns, -B, -allocs are overhead"
    echo "   over the handler alone; <peer>/limitgen is the peer's overhead over limitgen's"
    go tool benchstat -filter '.name:(HTTPPaired OR GRPCPaired)' "$out"
  fi
  if grep -q '^BenchmarkNumbers/' "$out"; then
    echo
    echo "== numbers changed at run time (BenchmarkNumbers: policy = never changed, the folded check)"
    go tool benchstat -filter '.name:Numbers' -col /numbers "$out"
  fi
} | tee results/benchstat.txt
if [ "$mode" = headline ]; then
  # The docs' performance page and figure, from this run (bench/cmd/perfpage).
  go run ./cmd/perfpage -in "$out" -md ../docs/performance.md -svg ../docs/performance.svg || failed+=("perfpage")
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "== these benchmark runs failed (their output is above and in bench/$out):" >&2
  printf '   %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "== done in $(elapsed): bench/$out, bench/results/benchstat.txt, docs/performance.md"
