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
// KEYS[1]  the bucket
// ARGV     emit, tau, debt, perSecond, perMicro, cost, take (1 or 0)
// returns  {allowed (1 or 0), ahead, excess}: ahead is how far the TAT is
//
//	past now after the check, in units (the time until full); excess, for a
//	denial, is how far the request would have put it beyond tau (its wait).
const gcraSource = `
local emit = tonumber(ARGV[1])
local tau = tonumber(ARGV[2])
local debt = tonumber(ARGV[3])
local perSecond = tonumber(ARGV[4])
local perMicro = tonumber(ARGV[5])
local cost = tonumber(ARGV[6])
local take = ARGV[7] == '1'
local now = {{NOW}}
local nsec = tonumber(now[1])
local nsub = tonumber(now[2]) * perMicro

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

-- write stores a TAT ahead of now (> 0 units) and expires the key when the
-- bucket is full again.
local function write(ahead)
  local total = nsub + ahead
  local q = idiv(total, perSecond)
  local perMilli = perSecond / 1000
  local ms = idiv(ahead, perMilli)
  if ms * perMilli < ahead then
    ms = ms + 1
  end
  if ms < 1 then
    ms = 1
  end
  ms = ms + {{SLACK}}
  redis.call('SET', KEYS[1], string.format('%d %d', nsec + q, total - q * perSecond), 'PX', string.format('%d', ms))
end

local ahead = debt
local v = redis.call('GET', KEYS[1])
if v then
  local sec, sub = string.match(v, '^(%d+) (%d+)$')
  if sec then
    ahead = (tonumber(sec) - nsec) * perSecond + (tonumber(sub) - nsub)
    if ahead < 0 then
      ahead = 0
    end
  end
end
local inc = cost * emit
if ahead + inc > tau then
  if not v and take and cost > 0 and debt > 0 then
    -- A new key's first check that could take tokens creates its bucket, as
    -- the local tables do: its initial tokens date from now.
    write(debt)
  end
  return {0, ahead, ahead + inc - tau}
end
if not take or inc == 0 then
  return {1, ahead + inc, 0}
end
write(ahead + inc)
return {1, ahead + inc, 0}
`

// script returns the check's source reading now from Redis's TIME, or, for
// tests, from ARGV[8] and ARGV[9] (seconds, microseconds). Keys expire on
// Redis's own clock, so the explicit-time variant keeps them an hour longer
// than the time until full: a test's times run far ahead of the real ones,
// and a key must not expire before the test's time says the bucket is full.
func script(explicitNow bool) string {
	now, slack := "redis.call('TIME')", "0"
	if explicitNow {
		now, slack = "{ARGV[8], ARGV[9]}", "3600000"
	}
	return strings.NewReplacer("{{NOW}}", now, "{{SLACK}}", slack).Replace(gcraSource)
}
