package redisstore

// The bucket scripts are GCRA checks of buckets, the same algorithm as
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
// There is one script an operation (scriptFor): check, refund, lease and
// batch, each the same prelude of helpers and reading of buckets, and the
// code of its operation; no script switches on a mode. A check decides one
// bucket or a tier of them, all or nothing, in order:
// the first bucket that cannot take its cost denies the request, and nothing
// is taken from any; when every one can, each takes its cost. That is the
// local tiers' rule (tier.At: ordered takes, refunded on a
// denial) in one atomic step, so no other request sees a partial take.
//
// Tokens that leases hold outside Redis are kept in the bucket's value too
// ("seconds units E hc hp": the grants of Redis's second E and of E − 1, each
// valid until the start of the second after next), and the bucket never holds
// more than its burst minus them (the function held below).
//
// A value ends with the numbers it was written with, as their arguments
// spell them: "g emit tau perSecond" or "i tokens tau period p b g phase".
// A check with other numbers (another version of the rule, during a rolling
// deploy) reads the bucket by the numbers it was written with, and carries
// the tokens it holds now into its own numbers, never beyond its own burst
// (convert, below): held units × emit / the writer's emit, rounded down, so
// that a bucket converted back and forth never gains. A denied check writes
// nothing, so until another check writes it, the bucket goes on refilling by
// its writer's numbers. An interval bucket converts what the bucket held at
// its grid's last boundary, since its next boundary adds a period's tokens.
// A check that converts a bucket keeps its key at least until the bucket is
// full by the checker's numbers too, written or not: expired when full by a
// smaller burst, it would be new, and full, to a version with a larger one.
// A value without numbers (written by an earlier version of limitgen) is
// read by the checker's.
//
// Greedy buckets count in the rule's units (a fraction of a microsecond) and
// store their TAT as "seconds units". Interval buckets count token slots, with
// now quantised to the last boundary of the key's grid (boundaries at the Unix
// times ≡ phase mod period, as the local tables place them), and store their
// TAT as "period-index slot". Either way only the part of the TAT ahead of now
// is ever multiplied, and it is at most a burst's worth.
//
// The common check, one greedy bucket taking its cost, has a short argument
// list and a path of its own at the top (ARGV 'g', emit, tau, debt,
// perSecond, perMicro, cost): the same decision and the same value written as
// the general code's, without its tables and closures (a call a check costs
// about a third less of Redis's time). A value it cannot read that way (other
// numbers, a lease's grants, an earlier version's) goes on to the general
// code, its arguments laid out as below.
//
// A tier of greedy buckets taking their costs, their values absent or written
// with the same numbers and no lease, has a path of its own too, and so has
// the batch (coalesced checks) when its rules are all greedy and whose buckets'
// values are absent or written with the same numbers and no lease, after that
// one: the same decisions and values, without the
// general code's tables and closures. Either path decides a run of checks of
// one bucket and cost at once (how many it admits, in closed form), so a hot
// key's batch of 18 costs Redis 37 µs a call where one check costs 26 µs
// (redis-benchmark, 8 clients; the general code took 80 µs for it).
//
// KEYS     the buckets, in the tier's order
// ARGV[1]  n, the number of buckets; ARGV[2], for the check, take (1) or
//
//	decide only (0); the other scripts do not read it (refund: give each
//	bucket its cost back, never beyond full; lease: one bucket, after its 10
//	values want, then the lessee's previous grant's second, size and unspent
//	tokens, returning 7 values, see below; batch: many checks each decided on
//	its own, coalesced requests, whose arguments are a table of m rules of 8 values, then rule and phase a
//	bucket, then the number of runs and, a run, bucket, cost and how many
//	checks in a row; each bucket is read once and written once, and it
//	returns, a run, how far its bucket was ahead before it and how many of
//	its checks were admitted, then each bucket's since; coalesce.go turns
//	them into each check's decision)
//
// ARGV     then, per bucket, 10 values:
//
//	greedy (1), emit, tau, debt, perSecond, perMicro, 0, 0, 0, cost
//	interval (2), tokens, tau, debt, period, p, b, g, phase, cost
//	(period = g·p ns, a second = g·b ns: the period's index is computed from
//	the seconds and microseconds without a product beyond 2^53)
//
// returns  {allowed (1 or 0), index, ahead, excess, sinceBoundary}: index
//
//	(1-based) is the bucket whose decision this is (the one that denied, or
//	the one left with the fewest whole tokens, the first on a tie); ahead is
//	how far its TAT is past now after the check, in its units (slots for an
//	interval bucket); excess, for a denial, is how far the request would have
//	put it beyond tau; sinceBoundary is, for an interval bucket, the ns since
//	its grid's last boundary (the caller turns slots into waits with it).
//
// The scripts' parts (scriptFor puts them together): the helpers every
// script has, the check's and the batch's own paths for greedy buckets, the
// general reading of the buckets (with each script's flags and argument
// layout), and each operation's end.
const (
	preludeSource = `
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

-- admitted is how many of a run of k checks of inc units each a bucket
-- ahead units past now admits, of tau: each admitted check takes inc, and
-- once one is denied the rest see the same bucket and are denied too.
local function admitted(ahead, inc, tau, k)
  if ahead + inc > tau then
    return 0
  end
  if inc == 0 then
    return k
  end
  local q = idiv(tau - ahead, inc)
  if q > k then
    return k
  end
  return q
end

-- ceilMs is ceil(a / b) for 0 <= a, 0 < b, at least 1: a key's time to
-- live in ms, from a time in units of which b make a ms.
local function ceilMs(a, b)
  local q = idiv(a, b)
  if q * b < a then
    q = q + 1
  end
  if q < 1 then
    q = 1
  end
  return q
end

-- fullMs is how long (ms, at least 1) a greedy bucket perSecond units a
-- second takes to be full from ahead units past now (fullIn, below).
local function fullMs(ahead, perSecond)
  return ceilMs(ahead, perSecond / 1000)
end

-- greedyValue reads a greedy bucket's value as setGreedy writes it with
-- numbers e, t, p (emit, tau, perSecond as the arguments spell them): its
-- TAT (seconds, units), or nil for any other value (other numbers, a lease's
-- grants, an earlier version's), which the general code reads.
local function greedyValue(v, e, t, p)
  local hi, lo, ve, vt, vp = string.match(v, '^(%d+) (%d+) g (%d+) (%d+) (%d+)$')
  if hi and ve == e and vt == t and vp == p then
    return tonumber(hi), tonumber(lo)
  end
  return nil
end

-- greedyAhead is how far a greedy bucket with TAT (hi, lo) is past now
-- (nsec, usec), never below 0, as the general code reads it.
local function greedyAhead(hi, lo, nsec, usec, perSecond, perMicro)
  local ahead = (hi - nsec) * perSecond + (lo - usec * perMicro)
  if ahead < 0 then
    return 0
  end
  return ahead
end

-- setGreedy is the general code's write (below) of a greedy bucket no lease
-- holds tokens of, ahead units past now, with numbers e, t, p and perMicro.
local function setGreedy(key, nsec, usec, ahead, e, t, p, perMicro)
  local perSecond = tonumber(p)
  local total = usec * perMicro + ahead
  local q = idiv(total, perSecond)
  redis.call('SET', key, string.format('%d %d g %s %s %s', nsec + q, total - q * perSecond, e, t, p),
    'PX', string.format('%d', fullMs(ahead, perSecond) + {{SLACK}}))
end

local A = ARGV

-- greedyValues reads every bucket of KEYS in one MGET (at most 1,024 keys:
-- Lua unpacks at most 8,000), bucket i's numbers at A[o + 2], A[o + 3] and
-- A[o + 5] for o = at(i): the TATs of those it finds (hi, lo), or nil when a
-- value is not one greedyValue reads.
local function greedyValues(at)
  local vals = redis.call('MGET', unpack(KEYS))
  local hi, lo = {}, {}
  for i = 1, #KEYS do
    if vals[i] then
      local o = at(i)
      hi[i], lo[i] = greedyValue(vals[i], A[o + 2], A[o + 3], A[o + 5])
      if not hi[i] then
        return nil
      end
    end
  end
  return hi, lo
end

-- allGreedy reports whether the count rules whose values start at A[first]
-- and every step after it are all greedy (their kind, A[o + 1], is 1).
local function allGreedy(first, step, count)
  for o = first, first + (count - 1) * step, step do
    if A[o + 1] ~= '1' then
      return false
    end
  end
  return true
end

`
	checkFastSource = `if A[1] == 'g' then
  -- The common check, decided without the general code below: one greedy
  -- bucket, taking, its value absent or written with the same numbers and
  -- no lease. ARGV: 'g', emit, tau, debt, perSecond, perMicro, cost. Any
  -- other value goes on to the general code, in its argument layout.
  local v = redis.call('GET', KEYS[1])
  local hi, lo
  if v then
    hi, lo = greedyValue(v, A[2], A[3], A[5])
  end
  if hi or not v then
    local now = {{NOW}}
    local nsec, usec = tonumber(now[1]), tonumber(now[2])
    local emit, tau, perMicro = tonumber(A[2]), tonumber(A[3]), tonumber(A[6])
    local inc = tonumber(A[7]) * emit
    local ahead = tonumber(A[4])
    if hi then
      ahead = greedyAhead(hi, lo, nsec, usec, tonumber(A[5]), perMicro)
    end
    local after = ahead + inc
    if after > tau then
      if hi or not (ahead > 0 and inc > 0 and inc <= tau) then
        return {0, 1, ahead, after - tau, 0}
      end
      after = ahead -- a new bucket below full starts with its first check
    elseif inc == 0 then
      return {1, 1, after, 0, 0}
    end
    setGreedy(KEYS[1], nsec, usec, after, A[2], A[3], A[5], perMicro)
    if after == ahead then
      return {0, 1, ahead, ahead + inc - tau, 0}
    end
    return {1, 1, after, 0, 0}
  end
  A = {'1', '1', '1', A[2], A[3], A[4], A[5], A[6], '0', '0', '0', A[7]}
elseif A[2] == '1' and tonumber(A[1]) > 1 and tonumber(A[1]) <= 1024 then
  -- A tier of greedy buckets, taking, their values absent or written with
  -- the same numbers and no lease: decided without the general code below,
  -- as it would decide it (else on to it). Its MGET unpacks the keys: Lua
  -- unpacks at most 8,000.
  local n = tonumber(A[1])
  local hi, lo
  if allGreedy(2, 10, n) then
    hi, lo = greedyValues(function(i) return 2 + (i - 1) * 10 end)
  end
  if hi then
    local now = {{NOW}}
    local nsec, usec = tonumber(now[1]), tonumber(now[2])
    local ahead, inc, tau, debt, cost = {}, {}, {}, {}, {}
    for i = 1, n do
      local o = 2 + (i - 1) * 10
      tau[i], debt[i], cost[i] = tonumber(A[o + 3]), tonumber(A[o + 4]), tonumber(A[o + 10])
      inc[i] = cost[i] * tonumber(A[o + 2])
      ahead[i] = debt[i]
      if hi[i] then
        ahead[i] = greedyAhead(hi[i], lo[i], nsec, usec, tonumber(A[o + 5]), tonumber(A[o + 6]))
      end
    end
    -- creates(i), below, for this case
    local function creates(i)
      return not hi[i] and debt[i] > 0 and cost[i] > 0 and inc[i] <= tau[i]
    end
    local function set(i, a)
      local o = 2 + (i - 1) * 10
      setGreedy(KEYS[i], nsec, usec, a, A[o + 2], A[o + 3], A[o + 5], tonumber(A[o + 6]))
    end
    for i = 1, n do
      if ahead[i] + inc[i] > tau[i] then
        for j = 1, i do
          if creates(j) then
            set(j, debt[j])
          end
        end
        return {0, i, ahead[i], ahead[i] + inc[i] - tau[i], 0}
      end
    end
    local best, bestLeft = 1, nil
    for i = 1, n do
      local after = ahead[i] + inc[i]
      if inc[i] > 0 then
        set(i, after)
      elseif creates(i) then
        set(i, debt[i])
      end
      local left = idiv(tau[i] - after, tonumber(A[2 + (i - 1) * 10 + 2]))
      if bestLeft == nil or left < bestLeft then
        best, bestLeft = i, left
      end
    end
    return {1, best, ahead[best] + inc[best], 0, 0}
  end
end
`
	batchFastSource = `do
  -- Coalesced checks (mode 4) whose rules are all greedy and whose buckets'
  -- values are absent or written with the same numbers and no lease, decided
  -- without the general code below, as it would decide them (else on to it).
  local n, m = tonumber(A[1]), tonumber(A[3])
  local base = 3 + m * 8
  local ro, hi, lo = {}, nil, nil
  for i = 1, n do
    ro[i] = 3 + (tonumber(A[base + 2 * i - 1]) - 1) * 8
  end
  if n <= 1024 and allGreedy(3, 8, m) then -- its MGET unpacks the keys: Lua unpacks at most 8,000
    hi, lo = greedyValues(function(i) return ro[i] end)
  end
  if hi then
    local now = {{NOW}}
    local nsec, usec = tonumber(now[1]), tonumber(now[2])
    local ahead, fresh, dirty = {}, {}, {}
    for i = 1, n do
      local o = ro[i]
      ahead[i], fresh[i] = tonumber(A[o + 4]), true
      if hi[i] then
        ahead[i], fresh[i] = greedyAhead(hi[i], lo[i], nsec, usec, tonumber(A[o + 5]), tonumber(A[o + 6])), false
      end
    end
    local at = base + n * 2 + 1
    local runs = tonumber(A[at])
    local out = {}
    for j = 1, runs do
      local i, cost, k = tonumber(A[at + 3 * j - 2]), tonumber(A[at + 3 * j - 1]), tonumber(A[at + 3 * j])
      local o = ro[i]
      local emit, tau = tonumber(A[o + 2]), tonumber(A[o + 3])
      local inc, a = cost * emit, ahead[i]
      local took = admitted(a, inc, tau, k)
      if took > 0 and inc > 0 then
        ahead[i] = a + took * inc
        dirty[i], fresh[i] = true, false
      elseif took < k and fresh[i] and tonumber(A[o + 4]) > 0 and cost > 0 and inc <= tau then
        dirty[i], fresh[i] = true, false -- a new bucket below full starts with its first check
      end
      out[2 * j - 1], out[2 * j] = a, took
    end
    for i = 1, n do
      out[2 * runs + i] = 0
      if dirty[i] then
        local o = ro[i]
        setGreedy(KEYS[i], nsec, usec, ahead[i], A[o + 2], A[o + 3], A[o + 5], tonumber(A[o + 6]))
      end
    end
    return out
  end
end
`
	generalSource = `local n = tonumber(A[1])
{{FLAGS}}
local now = {{NOW}}
local nsec = tonumber(now[1])
local usec = tonumber(now[2])

-- floor(a / b) for any a, 0 < b, |a| + b below 2^53.
local function fdiv(a, b)
  if a >= 0 then
    return idiv(a, b)
  end
  return -idiv(-a + b - 1, b)
end

-- floor(a · b / c) for 0 <= a, b < 2^52 and 0 < c < 2^52, exactly: the
-- product as four 26-bit digits, divided by c a bit at a time (the remainder
-- stays below 2c <= 2^53). The caller makes sure the quotient is below 2^53.
local function muldiv(a, b, c)
  local B = 67108864
  local a1, a0 = math.floor(a / B), a % B
  local b1, b0 = math.floor(b / B), b % B
  local t = a0 * b0
  local d0 = t % B
  t = math.floor(t / B) + a1 * b0 + a0 * b1
  local d1 = t % B
  t = math.floor(t / B) + a1 * b1
  local q, rem = 0, 0
  for _, d in ipairs({math.floor(t / B), t % B, d1, d0}) do
    for k = 25, 0, -1 do
      local p = 2 ^ k
      local bit = math.floor(d / p) % 2
      rem, q = rem * 2 + bit, q * 2
      if rem >= c then
        rem, q = rem - c, q + 1
      end
    end
  end
  return q
end

-- Where bucket i's rule, phase and cost are (ruleAt, phaseAt, costAt):
-- 10 values a bucket from A[3]; or, in the batch (coalesced checks, many of
-- one rule and often of one key), a table of m rules of 8 values from A[4],
-- then (rule, phase) a bucket, and the checks' costs later (cost 0 here).
{{LAYOUT}}
-- indexAt is interval bucket r's period index at Unix time sec seconds and
-- usec µs, and the ns since that period's boundary. Now in ns is
-- sec·g·bb + usec·1000; sec = A·p + B, so
-- (now − phase) / period = A·bb + (B·g·bb + usec·1000 − phase) / period.
local function indexAt(r, sec, us)
  local A = idiv(sec, r.p)
  local y = (sec - A * r.p) * r.g * r.bb + us * 1000 - r.phase
  local k = fdiv(y, r.period)
  return A * r.bb + k, y - k * r.period
end

-- drained is how far bucket r's TAT has fallen behind between Unix second t
-- (at most now) and now, in its units; more than tau once r.horizon seconds
-- have passed (then nothing held at t is left).
local function drained(r, t)
  if nsec - t > r.horizon then
    return r.tau + 1
  end
  if r.mode == 1 then
    return (nsec - t) * r.perSecond + r.nsub
  end
  local index = indexAt(r, t, 0)
  return (r.index - index) * r.tokens
end

-- held accounts for the tokens leases hold (mode 3): granted in Redis's second
-- E (hc) and E − 1 (hp), each grant valid until the start of the second after
-- next. While tokens may be spent outside Redis, the bucket holds at most
-- burst minus them: its TAT is at least that far ahead of now. When a grant
-- expires, the bucket goes on from there as if its tokens had all been spent
-- at that moment (its TAT is that far ahead of the expiry), so a lease that
-- spent everything just before it expired never frees capacity early.
local function held(r, E, hc, hp)
  local live = hc + hp
  if nsec == E + 1 then
    local m = (hc + hp) * r.emit - drained(r, E + 1)
    if m > r.ahead then r.ahead = m end
    live, hp, hc, E = hc, hc, 0, nsec
  elseif nsec > E + 1 then
    local m = (hc + hp) * r.emit - drained(r, E + 1)
    if m > r.ahead then r.ahead = m end
    m = hc * r.emit - drained(r, E + 2)
    if m > r.ahead then r.ahead = m end
    live, hp, hc, E = 0, 0, 0, nsec
  end
  if live * r.emit > r.ahead then
    r.ahead = live * r.emit
  end
  r.E, r.hc, r.hp = E, hc, hp
end

-- convert is how far bucket r's TAT is past now, in its own units, when
-- its value (TAT hi, lo) was written with other numbers, sig: what the bucket
-- holds by the numbers it was written with, carried into r's, rounded down,
-- never beyond r's burst. An interval bucket takes what it held at its
-- grid's last boundary (the µs at or before it), not now: its next boundary
-- adds a whole period's tokens, so the refill since the last one is not
-- counted twice. A value whose numbers cannot be read holds nothing.
local function convert(r, hi, lo, sig)
  local nsec, usec = nsec, usec
  if r.mode == 2 then
    usec = usec - idiv(r.since + 999, 1000)
    if usec < 0 then
      local borrow = idiv(-usec + 999999, 1000000)
      nsec, usec = nsec - borrow, usec + borrow * 1000000
    end
  end
  local f = {}
  for x in string.gmatch(sig, '%d+') do
    f[#f + 1] = tonumber(x)
  end
  local kind = string.sub(sig, 1, 1)
  local tau, unit, ahead
  if kind == 'g' and #f == 3 then
    local perSecond
    unit, tau, perSecond = f[1], f[2], f[3]
    local horizon = idiv(tau, perSecond) + 1
    if hi < nsec - horizon then
      ahead = 0
    elseif hi > nsec + horizon then
      ahead = tau
    else
      ahead = (hi - nsec) * perSecond + lo - usec * (perSecond / 1000000)
    end
  elseif kind == 'i' and #f == 7 then
    local w = {tokens = f[1], period = f[3], p = f[4], bb = f[5], g = f[6], phase = f[7]}
    unit, tau = 1, f[2]
    local index = indexAt(w, nsec, usec)
    if hi < index - 1 - tau / w.tokens then
      ahead = 0
    elseif hi > index + 1 + tau / w.tokens then
      ahead = tau
    else
      ahead = (hi - index) * w.tokens + lo
    end
  else
    return r.tau
  end
  local held = tau - math.min(math.max(ahead, 0), tau)
  if idiv(held, unit) >= idiv(r.tau, r.emit) then
    return 0
  end
  if unit == r.emit then
    return r.tau - held
  end
  return r.tau - muldiv(held, r.emit, unit)
end

-- fullIn is how long (ms, at least 1) bucket r takes to be full by its own
-- numbers from ahead units past now: when its key may expire.
local function fullIn(r, ahead)
  if r.mode == 1 then
    return fullMs(ahead, r.perSecond)
  end
  local periods = idiv(ahead, r.tokens)
  if ahead > periods * r.tokens then
    periods = periods + 1
  end
  return ceilMs(periods * r.period - r.since, 1000000)
end

local b = {}
for i = 1, n do
  local o = ruleAt(i)
  local r = {mode = tonumber(A[o + 1]), emit = tonumber(A[o + 2]), tau = tonumber(A[o + 3]),
    debt = tonumber(A[o + 4]), cost = tonumber(A[costAt(i)] or 0), since = 0,
    E = nsec, hc = 0, hp = 0}
  if r.mode == 1 then
    r.perSecond = tonumber(A[o + 5])
    r.perMicro = tonumber(A[o + 6])
    r.nsub = usec * r.perMicro
    r.horizon = idiv(r.tau, r.perSecond) + 1
    r.sig = 'g ' .. A[o + 2] .. ' ' .. A[o + 3] .. ' ' .. A[o + 5]
  else
    r.tokens, r.emit = r.emit, 1
    r.period = tonumber(A[o + 5])
    r.p, r.bb, r.g, r.phase = tonumber(A[o + 6]), tonumber(A[o + 7]), tonumber(A[o + 8]), tonumber(A[phaseAt(i)])
    r.index, r.since = indexAt(r, nsec, usec)
    r.horizon = idiv((idiv(r.tau, r.tokens) + 2) * r.period, 1000000000) + 1
    r.sig = 'i ' .. A[o + 2] .. ' ' .. A[o + 3] .. ' ' .. A[o + 5] .. ' ' .. A[o + 6] .. ' ' ..
      A[o + 7] .. ' ' .. A[o + 8] .. ' ' .. A[phaseAt(i)]
  end
  r.inc = r.cost * r.emit
  r.ahead = r.debt
  r.fresh = true
  local v = redis.call('GET', KEYS[i])
  if v then
    local hi, lo, rest = string.match(v, '^(%d+) (%d+) ?(.*)$')
    if hi then
      r.fresh = false
      hi, lo = tonumber(hi), tonumber(lo)
      local E, hc, hp, sig = string.match(rest, '^(%d+) (%d+) (%d+) ?(.*)$')
      if not E then
        sig = rest
      end
      if sig ~= '' and sig ~= r.sig then
        r.ahead = convert(r, hi, lo, sig)
        r.converted = true
      elseif r.mode == 1 then
        r.ahead = (hi - nsec) * r.perSecond + (lo - r.nsub)
      elseif hi < r.index - 1 - r.tau / r.tokens then
        r.ahead = 0 -- long past: do not multiply a large difference
      else
        r.ahead = (hi - r.index) * r.tokens + lo
      end
      if r.ahead < 0 then
        r.ahead = 0
      end
      if E then
        held(r, tonumber(E), tonumber(hc), tonumber(hp))
      end
      if r.converted and r.ahead > 0 then
        -- The key is kept at least until the bucket is full by this
        -- check's numbers too, whether or not the check writes it: a key
        -- that expired when full by its writer's smaller burst would be
        -- new, and full, to a version with a larger one.
        local ms = fullIn(r, r.ahead) + {{SLACK}}
        if redis.call('PTTL', KEYS[i]) < ms then
          redis.call('PEXPIRE', KEYS[i], string.format('%d', ms))
        end
      end
    end
  end
  b[i] = r
end

-- write stores bucket i's TAT, ahead of now (> 0 units), and expires the key
-- when the bucket is full again.
local function write(i, ahead)
  local r = b[i]
  local hi, lo
  if r.mode == 1 then
    local total = r.nsub + ahead
    local q = idiv(total, r.perSecond)
    hi, lo = nsec + q, total - q * r.perSecond
  else
    local q = idiv(ahead, r.tokens)
    hi, lo = r.index + q, ahead - q * r.tokens
  end
  local ms = fullIn(r, ahead)
  local value = string.format('%d %d', hi, lo)
  if r.hc > 0 or r.hp > 0 then
    -- kept while a lease may hold tokens, and until their time has passed
    value = value .. string.format(' %d %d %d', r.E, r.hc, r.hp)
    local hold = (r.E + 2 - nsec + r.horizon) * 1000
    if ms < hold then
      ms = hold
    end
  end
  value = value .. ' ' .. r.sig
  ms = ms + {{SLACK}}
  redis.call('SET', KEYS[i], value, 'PX', string.format('%d', ms))
end

-- creates reports whether a check (or a lease) of bucket i makes its key: a new key whose
-- bucket starts below full, by a check that could take tokens (as the local
-- tables make a key on such a check, allowed or not).
local function creates(i)
  local r = b[i]
  return (take or lease) and r.fresh and r.debt > 0 and r.cost > 0 and r.inc <= r.tau
end

`
)
