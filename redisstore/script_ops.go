package redisstore

import "strings"

// The operations' ends of the bucket scripts (script.go has their prelude
// and the reading of the buckets), and the two argument layouts.
const (
	checkSource = `for i = 1, n do
  local r = b[i]
  if r.ahead + r.inc > r.tau then
    for j = 1, i do
      if creates(j) then
        write(j, b[j].debt)
      end
    end
    return {0, i, r.ahead, r.ahead + r.inc - r.tau, r.since}
  end
end
local best, bestLeft = 1, nil
for i = 1, n do
  local r = b[i]
  local after = r.ahead + r.inc
  if take and r.inc > 0 then
    write(i, after)
  elseif creates(i) then
    write(i, r.debt)
  end
  local left = idiv(r.tau - after, r.emit)
  if bestLeft == nil or left < bestLeft then
    best, bestLeft = i, left
  end
end
return {1, best, b[best].ahead + b[best].inc, 0, b[best].since}`
	refundSource = `-- Give each bucket its cost back, never beyond full (a full bucket is absent).
for i = 1, n do
  local r = b[i]
  local after = r.ahead - r.inc
  if after < (r.hc + r.hp) * r.emit then
    after = (r.hc + r.hp) * r.emit -- what leases hold does not come back
  end
  if after <= 0 then
    after = 0
    if not r.fresh then
      redis.call('DEL', KEYS[i])
    end
  else
    write(i, after)
  end
  r.inc = -r.ahead + after
end
return {1, 1, b[1].ahead + b[1].inc, 0, b[1].since}
`
	oweSource = `-- Charge the one bucket's cost as debt (a settlement's excess: ModeOwe):
-- its TAT moves ahead by the cost, beyond what a check may take, but never
-- past bound units ahead of now (the value after the bucket's), and never
-- back. Returns {1, 1, ahead, the units it could not charge, since}.
local r = b[1]
local room = tonumber(A[3 + 10 * n]) - r.ahead
if room <= 0 then
  return {1, 1, r.ahead, r.inc, r.since}
end
local c = r.inc
if c > room then
  c = room
end
write(1, r.ahead + c)
return {1, 1, r.ahead + c, r.inc - c, r.since}
`
	leaseSource = `-- A lease of one bucket (Lease in lease.go). First the lessee's previous
-- grant is settled (ARGV: its second, its size, the tokens it did not
-- spend): while the grant is valid, what was not spent goes back and the
-- grant is no longer held; an expired grant is already accounted for. Then
-- the lessee gets at least its cost and up to want tokens, never more than
-- half of what the bucket holds beyond its cost, so that one instance
-- cannot drain a bucket others share; want 0 asks for nothing (a release).
-- Returns {allowed, 1, ahead, granted (or the excess), since, second, µs}:
-- the grant is valid until the start of Redis's second after next.
local r = b[1]
local want = tonumber(A[3 + 10 * n])
local se, sg, sr = tonumber(A[4 + 10 * n]), tonumber(A[5 + 10 * n]), tonumber(A[6 + 10 * n])
local changed = false
if sg > 0 and (se == r.E or se == r.E - 1) then
  if se == r.E then
    r.hc = r.hc - math.min(sg, r.hc)
  else
    r.hp = r.hp - math.min(sg, r.hp)
  end
  r.ahead = r.ahead - math.min(sr, sg) * r.emit
  if r.ahead < 0 then
    r.ahead = 0
  end
  if (r.hc + r.hp) * r.emit > r.ahead then
    r.ahead = (r.hc + r.hp) * r.emit
  end
  changed = true
end
if want == 0 then
  if changed then
    if r.ahead > 0 or r.hc + r.hp > 0 then
      write(1, r.ahead)
    else
      redis.call('DEL', KEYS[1])
    end
  end
  return {1, 1, r.ahead, 0, r.since, r.E, usec}
end
if r.ahead + r.inc > r.tau then
  if changed or creates(1) then
    write(1, r.ahead)
  end
  return {0, 1, r.ahead, r.ahead + r.inc - r.tau, r.since, r.E, usec}
end
local spare = idiv(r.tau - r.ahead - r.inc, r.emit)
local extra = idiv(spare, 2)
if extra > want - r.cost then
  extra = want - r.cost
end
if extra < 0 then
  extra = 0
end
local grant = r.cost + extra
local after = r.ahead + grant * r.emit
r.hc = r.hc + grant
if grant > 0 or changed then
  write(1, after)
end
return {1, 1, after, grant, r.since, r.E, usec}
`
	batchSource = `-- Independent checks (coalesced requests of many callers), each decided
-- and taking its cost as if alone, in order; checks of one bucket see each
-- other's takes. They come as runs (a bucket, a cost, how many checks in a
-- row), each decided at once. A bucket is written once, after its last run.
local runs = tonumber(A[checksAt])
local out = {}
for j = 1, runs do
  local i = tonumber(A[checksAt + 3 * j - 2])
  local cost = tonumber(A[checksAt + 3 * j - 1])
  local k = tonumber(A[checksAt + 3 * j])
  local r = b[i]
  local inc, a = cost * r.emit, r.ahead
  local took = admitted(a, inc, r.tau, k)
  if took > 0 and inc > 0 then
    r.ahead = a + took * inc
    r.dirty = true
    r.fresh = false
  elseif took < k and r.fresh and r.debt > 0 and cost > 0 and inc <= r.tau then
    r.dirty = true -- a new bucket below full starts with its first check
    r.fresh = false
  end
  out[2 * j - 1], out[2 * j] = a, took
end
for i = 1, n do
  out[2 * runs + i] = b[i].since
  if b[i].dirty then
    write(i, b[i].ahead)
  end
end
return out
`
	tierLayout = `local ruleAt = function(i) return 2 + (i - 1) * 10 end
local phaseAt = function(i) return 2 + (i - 1) * 10 + 9 end
local costAt = function(i) return 2 + (i - 1) * 10 + 10 end
`
	batchLayout = `local m = tonumber(A[3])
local base = 3 + m * 8
local ruleAt = function(i) return 3 + (tonumber(A[base + (i - 1) * 2 + 1]) - 1) * 8 end
local phaseAt = function(i) return base + (i - 1) * 2 + 2 end
local costAt = function(i) return nil end
local checksAt = base + n * 2 + 1
`
)

// op is a bucket script's operation.
type op uint8

const (
	opCheck  op = iota // a bucket or a tier, taking (ARGV[2] 1) or deciding only (0)
	opRefund           // each bucket's cost back
	opLease            // a lease of one bucket
	opBatch            // coalesced checks, each on its own
	opOwe              // one bucket's cost owed as debt
)

// scriptFor returns the source of operation o, reading now from Redis's TIME,
// or, for tests, from the last two arguments (seconds, microseconds). Keys
// expire on Redis's own clock, so the explicit-time variant keeps them an hour
// longer than the time until full: a test's times run far ahead of the real
// ones, and a key must not expire before the test's time says the bucket is
// full.
func scriptFor(o op, explicitNow bool) string {
	now, slack := "redis.call('TIME')", "0"
	if explicitNow {
		now, slack = "{ARGV[#ARGV - 1], ARGV[#ARGV]}", "3600000"
	}
	flags, layout, fast, end := "local take, lease = A[2] == '1', false", tierLayout, checkFastSource, checkSource
	switch o {
	case opRefund:
		flags, fast, end = "local take, lease = false, false", "", refundSource
	case opLease:
		flags, fast, end = "local take, lease = false, true", "", leaseSource
	case opBatch:
		flags, layout, fast, end = "local take, lease = true, false", batchLayout, batchFastSource, batchSource
	case opOwe:
		flags, fast, end = "local take, lease = false, false", "", oweSource
	}
	general := strings.NewReplacer("{{FLAGS}}", flags, "{{LAYOUT}}", layout).Replace(generalSource)
	return strings.NewReplacer("{{NOW}}", now, "{{SLACK}}", slack).Replace(preludeSource + fast + general + end)
}
