#!/usr/bin/env bash
# bench/against.sh REV [PATTERN] [RUNS]: the benchmarks matching PATTERN
# (^BenchmarkGenerated$ by default) built at git revision REV and at the
# working tree, run RUNS times (6) interleaved, then benchstat old → new.
# It is how a change to the check is held to the check before it in one run
# (the runtime-numbers work: within 5% of the folded check before it).
set -euo pipefail
rev=$1 pattern=${2:-'^BenchmarkGenerated$'} runs=${3:-6}
cd "$(dirname "$0")"
work=$(mktemp -d)
trap 'git worktree remove --force "$work/old" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
git worktree add -q --detach "$work/old" "$rev"
(cd "$work/old/bench" && go test -c -o "$work/old.test" .)
go test -c -o "$work/new.test" .
mkdir -p results
old=results/against-old.txt new=results/against-new.txt
: >"$old"
: >"$new"
for i in $(seq "$runs"); do
  echo "== run $i of $runs"
  "$work/old.test" -test.run '^$' -test.bench "$pattern" -test.benchmem -test.benchtime 0.5s | grep '^Benchmark' >>"$old"
  "$work/new.test" -test.run '^$' -test.bench "$pattern" -test.benchmem -test.benchtime 0.5s | grep '^Benchmark' >>"$new"
done
go tool benchstat "$old" "$new"
