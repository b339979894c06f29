package redisstore

import "strings"

// gcraSource is one GCRA check of one bucket, the same algorithm as
// atomicbucket's greedy buckets, in the rule's units (rule.go).
//
// A bucket is one string key holding its TAT as "seconds units": whole Unix
// seconds, then units within the second. A full bucket is absent: every write
// sets the key to expire when the bucket is full again, so expiry loses
// nothing. A denied check writes nothing, and neither does a check that takes
// nothing, with one exception the local tables share: a new key's first check
// that could take tokens creates its bucket when the rule starts buckets below
// full, so that their initial tokens date from the first request.
//
// Every number stays below 2^53 (Lua numbers are doubles): NewRule bounds
// perSecond + 2·tau, and only the part of the TAT ahead of now is ever
// multiplied. Integer division is done with math.floor and corrected by one
// either way, so that a quotient near an integer cannot round to the wrong
// side. Numbers are written with string.format('%d').
//
// One script checks one bucket or a tier of them, all or nothing, in order:
// the first bucket that cannot take its cost denies the request, and nothing
// is taken from any; when every one can, each takes its cost. That is the
// local tiers' rule (atomicbucket.TierAt: ordered takes, refunded on a
// denial) in one atomic step, so no other request sees a partial take.
//
// KEYS     the buckets, in the tier's order
// ARGV[1]  n, the number of buckets; ARGV[2] take (1, or 0 to decide only)
// ARGV     then, per bucket: emit, tau, debt, perSecond, perMicro, cost
// returns  {allowed (1 or 0), index, ahead, excess}: index (1-based) is the
//
//	bucket whose decision this is (the one that denied, or the one left with
//	the fewest whole tokens, the first on a tie); ahead is how far its TAT is
//	past now after the check, in its units (its time until full); excess, for
//	a denial, is how far the request would have put it beyond tau (its wait).
const gcraSource = `
local n = tonumber(ARGV[1])
local take = ARGV[2] == '1'
local now = {{NOW}}
local nsec = tonumber(now[1])
local usec = tonumber(now[2])

-- floor(a / b) for 0 <= a, 0 < b, both below 2^53.
local function idiv(a, b)
  local q = math.floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

local b = {}
for i = 1, n do
  local o = 2 + (i - 1) * 6
  local r = {
    emit = tonumber(ARGV[o + 1]), tau = tonumber(ARGV[o + 2]), debt = tonumber(ARGV[o + 3]),
    perSecond = tonumber(ARGV[o + 4]), perMicro = tonumber(ARGV[o + 5]), cost = tonumber(ARGV[o + 6]),
  }
  r.nsub = usec * r.perMicro
  r.inc = r.cost * r.emit
  r.ahead = r.debt
  r.fresh = true
  local v = redis.call('GET', KEYS[i])
  if v then
    local sec, sub = string.match(v, '^(%d+) (%d+)$')
    if sec then
      r.fresh = false
      r.ahead = (tonumber(sec) - nsec) * r.perSecond + (tonumber(sub) - r.nsub)
      if r.ahead < 0 then
        r.ahead = 0
      end
    end
  end
  b[i] = r
end

-- write stores bucket i's TAT, ahead of now (> 0 units), and expires the key
-- when the bucket is full again.
local function write(i, ahead)
  local r = b[i]
  local total = r.nsub + ahead
  local q = idiv(total, r.perSecond)
  local perMilli = r.perSecond / 1000
  local ms = idiv(ahead, perMilli)
  if ms * perMilli < ahead then
    ms = ms + 1
  end
  if ms < 1 then
    ms = 1
  end
  ms = ms + {{SLACK}}
  redis.call('SET', KEYS[i], string.format('%d %d', nsec + q, total - q * r.perSecond), 'PX', string.format('%d', ms))
end

-- creates reports whether a check of bucket i makes its key: a new key whose
-- bucket starts below full, by a check that could take tokens (as the local
-- tables make a key on such a check, allowed or not).
local function creates(i)
  local r = b[i]
  return take and r.fresh and r.debt > 0 and r.cost > 0 and r.inc <= r.tau
end

for i = 1, n do
  local r = b[i]
  if r.ahead + r.inc > r.tau then
    for j = 1, i do
      if creates(j) then
        write(j, b[j].debt)
      end
    end
    return {0, i, r.ahead, r.ahead + r.inc - r.tau}
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
return {1, best, b[best].ahead + b[best].inc, 0}
`

// script returns the check's source reading now from Redis's TIME, or, for
// tests, from the last two arguments (seconds, microseconds). Keys expire on
// Redis's own clock, so the explicit-time variant keeps them an hour longer
// than the time until full: a test's times run far ahead of the real ones,
// and a key must not expire before the test's time says the bucket is full.
func script(explicitNow bool) string {
	now, slack := "redis.call('TIME')", "0"
	if explicitNow {
		now, slack = "{ARGV[#ARGV - 1], ARGV[#ARGV]}", "3600000"
	}
	return strings.NewReplacer("{{NOW}}", now, "{{SLACK}}", slack).Replace(gcraSource)
}
