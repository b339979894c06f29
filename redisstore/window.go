package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"github.com/redis/go-redis/v9"
)

// windowPrelude is what the window scripts share: the numbers, the time,
// and reading and writing a key. Each key is one string of its admissions
// still in the window, oldest first, as "slot:count" pairs, where a slot is
// the microsecond of the admissions (an exact window, N ≤ 64: what it
// admitted that microsecond) or the sub-window of W/16 they fell in (a
// counted window). An admission counts until its slot's out time:
//
//	exact:   slot + W + 1 (it counts as made at the end of its microsecond)
//	counted: (slot + 1)·L + W, L = W/16
//
// so the store decides as the local window does at microsecond times, and
// a value holds at most N pairs (exact) or a few more than 17 (counted),
// after a header "W,L|" naming the numbers it was written with, and before
// "#G", the generation of its slots (G: the µs the key was made, plus one
// for each carry below; a value without G is of generation 0). An earlier
// version of this script reads such a value as its own (its header, its
// pairs; the generation it skips). A check with other
// numbers (another version of the rule, during a rolling deploy) carries
// each pair into its own slots as made at the last microsecond of the
// writer's grain (or now, if sooner and the grain has begun), and counts it
// by its own window: in any interval of the shorter window, at most the
// larger limit is admitted. Leases' grants are pairs in slots whose grain
// has not begun (see windowLeaseSource): a carry keeps them where they are.
//
// A check drops the pairs that are out, and sets the key to expire when the
// window empties (an empty window is no key: expiry loses nothing). A time
// behind the newest slot (Redis's clock stepped back, or a lease's grant
// ahead) counts in the newest slot.
const windowPrelude = `
local W, N, L = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = {{NOW}}
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function out(slot)
  if L == 0 then return slot + W + 1 end
  return (slot + 1) * L + W
end
local nowSlot = now
if L > 0 then nowSlot = math.floor(now / L) end
-- load reads key's pairs as written, with the numbers and generation they
-- were written with.
local function load(key)
  local st = {s = {}, c = {}, dirty = false, vw = W, vl = L, g = now}
  local v = redis.call('GET', key)
  if v then
    local vw, vl, rest, vg = string.match(v, '^(%d+),(%d+)|([^#]*)#?(%d*)$')
    if vw == nil then
      rest, st.g = v, 0
    else
      st.vw, st.vl, st.g = tonumber(vw), tonumber(vl), tonumber(vg) or 0
    end
    for s, c in string.gmatch(rest, '(%d+):(%d+)') do
      st.s[#st.s + 1] = tonumber(s)
      st.c[#st.c + 1] = tonumber(c)
    end
  end
  return st
end
-- carry makes st's pairs this version's: written by another version of the
-- rule (another form or grain), each group is carried into this one's
-- slots, as made at the last microsecond of its grain (or now, if sooner
-- and its grain has begun), in the next generation of slots.
local function carry(st)
  if st.vl ~= L then
    local s2, c2 = {}, {}
    for j = 1, #st.s do
      local e, start = st.s[j], st.s[j]
      if st.vl > 0 then
        start = st.s[j] * st.vl
        e = start + st.vl - 1
      end
      if e > now and start <= now then e = now end
      local s = e
      if L > 0 then s = math.floor(e / L) end
      local n = #s2
      if n > 0 and s2[n] >= s then
        c2[n] = c2[n] + st.c[j]
      else
        s2[n + 1] = s
        c2[n + 1] = st.c[j]
      end
    end
    st.s, st.c, st.g, st.dirty = s2, c2, st.g + 1, true
  elseif st.vw ~= W then
    st.dirty = true
  end
end
-- drop removes the pairs that are out, and returns what is left in the
-- window and out time − now of the newest (0: empty).
local function drop(st)
  local first = 1
  while first <= #st.s and out(st.s[first]) <= now do first = first + 1 end
  if first > 1 then
    local s2, c2 = {}, {}
    for j = first, #st.s do s2[#s2 + 1] = st.s[j]; c2[#c2 + 1] = st.c[j] end
    st.s, st.c, st.dirty = s2, c2, true
  end
  local inw = 0
  for j = 1, #st.c do inw = inw + st.c[j] end
  local reset = 0
  if #st.s > 0 then reset = out(st.s[#st.s]) - now end
  return inw, reset
end
-- add counts k at slot (in the newest, if it is as new), and returns the
-- slot it is counted in.
local function add(st, slot, k)
  local n = #st.s
  if n > 0 and st.s[n] >= slot then
    st.c[n] = st.c[n] + k
    slot = st.s[n]
  else
    st.s[n + 1] = slot
    st.c[n + 1] = k
  end
  st.dirty = true
  return slot
end
-- retry is out time − now of the admission whose leaving makes room for
-- cost in st, whose window holds inw (0: none does).
local function retry(st, inw, cost)
  local left = inw
  for j = 1, #st.s do
    left = left - st.c[j]
    if left + cost <= N then return out(st.s[j]) - now end
  end
  return 0
end
-- save writes st when it changed: no key for an empty window.
local function save(key, st)
  if not st.dirty then return end
  local n = #st.s
  if n == 0 then
    redis.call('DEL', key)
    return
  end
  local parts = {}
  for j = 1, n do parts[j] = string.format('%d:%d', st.s[j], st.c[j]) end
  local ms = math.floor((out(st.s[n]) - now + 999) / 1000) + {{SLACK}}
  redis.call('SET', key, string.format('%d,%d|', W, L) .. table.concat(parts, ',') .. string.format('#%d', st.g), 'PX', math.max(ms, 1))
end
`

// windowSource decides window checks (at most N cost units in any interval
// of W, sliding) on Redis's clock, in microseconds, as atomicbucket's windows
// do on theirs (see windowPrelude for a key's value). A check admits its
// cost when what is left in the window plus the cost is at most N (adding it
// to the newest pair when it falls in the same slot). A denied check writes
// nothing but what a carry or the pairs that left changed.
//
// One call decides a batch of runs, in order: a run is checks of one key and
// one cost, one after another (coalesced checks of a hot key), decided at
// once: of count checks of cost c the first min(count, ⌊(N − in)/c⌋) are
// admitted, and the rest denied, as one at a time would decide them.
//
// KEYS    one per run
// ARGV    W (µs), N, L (µs; 0: exact), then a run's cost and count, for
//
//	each run; with an explicit time (tests), the seconds and microseconds last
//
// Returns, per run, six numbers: how many of its checks were admitted (−1:
// its cost is outside [0, N], none ever can be); what was in the window
// before it; for the denied ones, out time − now of the admission whose
// leaving makes room; out time − now of the newest admission after the run
// (0 when the window is empty); the slot its admissions were counted in and
// the generation of the key's slots (0 and 0 when none was: a settlement
// gives back from that pair, as a lease's does). Go turns them into the
// run's decisions and marks.
const windowSource = windowPrelude + `
local states, order = {}, {}
local res = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local cost, count = tonumber(ARGV[2 + 2 * i]), tonumber(ARGV[3 + 2 * i])
  local st = states[key]
  if st == nil then
    st = load(key)
    carry(st)
    states[key] = st
    order[#order + 1] = key
  end
  local inw, reset = drop(st)
  if cost < 0 or cost > N then
    res[#res + 1] = -1; res[#res + 1] = inw; res[#res + 1] = 0; res[#res + 1] = reset
    res[#res + 1] = 0; res[#res + 1] = 0
  else
    local k = count
    if cost > 0 then k = math.max(0, math.min(count, math.floor((N - inw) / cost))) end
    local resetAdm, slot, gen = reset, 0, 0
    if k > 0 and cost > 0 then
      slot, gen = add(st, nowSlot, k * cost), st.g
      resetAdm = out(slot) - now
    end
    local wait = 0
    if k < count then wait = retry(st, inw + k * cost, cost) end
    res[#res + 1] = k; res[#res + 1] = inw; res[#res + 1] = wait; res[#res + 1] = resetAdm
    res[#res + 1] = slot; res[#res + 1] = gen
  end
end
for _, key in ipairs(order) do save(key, states[key]) end
return res
`

// windowOweSource counts a settlement's excess in one key's window at
// Redis's now (shared.WindowSettler): at most N units, whatever the window
// holds, in the newest pair when it is as new.
//
// KEYS    the key
// ARGV    W (µs), N, L (µs; 0: exact), the excess; with an explicit time
//
//	(tests), the seconds and microseconds last
//
// Returns one number: the units not counted (the excess beyond N).
const windowOweSource = windowPrelude + `
local excess = tonumber(ARGV[4])
local st = load(KEYS[1])
carry(st)
drop(st)
local c = math.min(excess, N)
if c > 0 then add(st, nowSlot, c) end
save(KEYS[1], st)
return {excess - c}
`

// windowLeaseSource is a window lease call (shared.WindowLeaser) on one
// key: it settles the lessee's previous grant, and grants at least cost and
// up to want units, at most half of the room beyond the cost (cost and want
// 0: a release, granting nothing).
//
// A grant of size units is counted as admitted at the end of its term D (a
// pair in slot now + D, exact, or the first sub-window that begins at or
// after now + D, counted): whatever the lessee spends from it, before its
// term ends, then stays in the window for at least W after it was spent.
// The grant's units are counted until they leave, or until the lessee
// settles (whether or not its term is over: the pair is there until it
// leaves) and takes back what it did not spend from the pair of the grant's
// slot, if the key's slots are still of the grant's generation (no carry
// since, no new key: the pair holds the grant).
//
// KEYS    the key
// ARGV    W (µs), N, L (µs; 0: exact), D (µs), cost, want, then the previous
//
//	grant's slot, size, unspent units and generation (size 0: none); with an
//	explicit time (tests), the seconds and microseconds last
//
// Returns seven numbers: 1 granted, 0 denied, −1 a cost outside [0, N];
// what is in the window before the grant; the units granted (denied: out
// time − now of the admission whose leaving makes room); out time − now of
// the newest after the call (0: empty); the grant's slot, term (µs) and
// generation.
const windowLeaseSource = windowPrelude + `
local D, cost, want = tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6])
local pslot, psize, pback, pgen = tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), tonumber(ARGV[10])
local key = KEYS[1]
local st = load(key)
if psize > 0 and pback > 0 and st.g == pgen then
  for j = 1, #st.s do
    if st.s[j] == pslot then
      st.c[j] = st.c[j] - math.min(pback, psize, st.c[j])
      if st.c[j] == 0 then
        table.remove(st.s, j)
        table.remove(st.c, j)
      end
      st.dirty = true
      break
    end
  end
end
carry(st)
local inw, reset = drop(st)
local res
if cost < 0 or cost > N then
  res = {-1, inw, 0, reset, 0, 0, 0}
elseif N - inw < cost then
  res = {0, inw, retry(st, inw, cost), reset, 0, 0, 0}
else
  local size = math.max(cost, math.min(want, cost + math.floor((N - inw - cost) / 2)))
  local slot = now + D
  if L > 0 then slot = math.floor((now + D + L - 1) / L) end
  if size > 0 then
    slot = add(st, slot, size)
    reset = out(st.s[#st.s]) - now
  end
  res = {1, inw, size, reset, slot, D, st.g}
end
save(key, st)
return res
`

// windowScript is a window script's source reading now from Redis's TIME,
// or, for tests, from the last two arguments (see windowSource).
func windowScript(source string, explicitNow bool) string {
	now, slack := "redis.call('TIME')", "0"
	if explicitNow {
		now, slack = "{ARGV[#ARGV - 1], ARGV[#ARGV]}", "3600000"
	}
	return strings.NewReplacer("{{NOW}}", now, "{{SLACK}}", slack).Replace(source)
}

// Window is a window rule (at most N cost units in any interval of W) kept
// on Redis, on Redis's clock: every instance that checks it shares one
// window per key. It decides as the local window does (atomicwindow.Window,
// at microsecond times): exact up to 64 units, counted in sixteenths of the
// window beyond. Its checks, one script call each or coalesced, fail (with
// an error, and a denial) when Redis cannot answer: the caller decides what
// an outage means. Its methods are safe for concurrent use.
type Window struct {
	client               redis.UniversalClient
	script               *redis.Script
	leaseScript          *redis.Script
	oweScript            *redis.Script
	prefix               string // the keys' prefix, up to the key
	shared.WindowNumbers        // the rule's and keys' own
	timeout              time.Duration
	co                   *shared.Coalescer[windowCheck]
	// now, in tests, gives the time the script decides at (explicitNow).
	now func() time.Time
	// e, for a window of a Store (Store.Window), is the store's Engine: each
	// script call is one of its round trips (a connection, the timeout,
	// Stats.Latency), and Node places a key for its breakers.
	e *shared.Engine
}

// run runs one script call, as a round trip of the store's when the window
// is a Store's.
func (w *Window) run(ctx context.Context, fn func(ctx context.Context) error) error {
	if w.e == nil {
		return fn(ctx)
	}
	return w.e.RoundTrip(ctx, fn)
}

// Node is the server that holds key's window on a Cluster (its master's
// address), "" on a single server (shared.WindowPlacer).
func (w *Window) Node(key string) string {
	c, ok := w.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	if m, err := c.MasterForKey(context.Background(), w.prefix+key); err == nil {
		return m.Options().Addr
	}
	return ""
}

// windowCheck is one check of a coalesced batch.
type windowCheck struct {
	key  string
	cost int64
	mark *verdict.WindowMark // where an admission was counted, when the caller asks
}

// WindowOptions configure NewWindow.
type WindowOptions struct {
	Namespace string        // as Options.Namespace
	Timeout   time.Duration // as Options.Timeout (default DefaultTimeout)
	// Coalesce, above 0, sends concurrent checks together, at most Coalesce
	// a script call, each decided on its own.
	Coalesce int
}

// NewWindow returns the window rule named name (the rule's name in the
// policy: part of its keys) with rule's numbers, on client. A counted
// window (a limit above atomicwindow.RingMax) must have sub-windows of
// whole microseconds: a window a multiple of 16 µs.
func NewWindow(client redis.UniversalClient, name string, rule atomicwindow.Rule, opts WindowOptions) (*Window, error) {
	return newWindow(client, name, rule, opts, false)
}

func newWindow(client redis.UniversalClient, name string, rule atomicwindow.Rule, opts WindowOptions, explicitNow bool) (*Window, error) {
	if opts.Namespace != "" {
		if err := shared.CheckNamespace(opts.Namespace); err != nil {
			return nil, fmt.Errorf("redisstore: WindowOptions.Namespace: %w", err)
		}
	}
	prefix := DefaultPrefix
	if opts.Namespace != "" {
		prefix += opts.Namespace + ":"
	}
	return newWindowIn(client, prefix, name, rule, opts, explicitNow)
}

// newWindowIn is newWindow with the prefix (and namespace) given.
func newWindowIn(client redis.UniversalClient, prefix, name string, rule atomicwindow.Rule, opts WindowOptions, explicitNow bool) (*Window, error) {
	if name == "" || len(name) > 200 || strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("redisstore: a window's name has 1 to 200 bytes and no braces, not %q", name)
	}
	if _, cluster := client.(*redis.ClusterClient); cluster {
		opts.Coalesce = 0 // a batch's keys would span slots
	}
	w := &Window{client: client, script: redis.NewScript(windowScript(windowSource, explicitNow)),
		leaseScript: redis.NewScript(windowScript(windowLeaseSource, explicitNow)),
		oweScript:   redis.NewScript(windowScript(windowOweSource, explicitNow)), timeout: opts.Timeout}
	if err := w.SetRule(rule); err != nil {
		return nil, err
	}
	if w.timeout <= 0 {
		w.timeout = DefaultTimeout
	}
	w.prefix = prefix + "window:" + name + ":"
	if opts.Coalesce > 0 {
		w.co = shared.NewCoalescer(opts.Coalesce, w.timeout, w.decideBatch)
	}
	return w, nil
}

// Window returns the window rule named name on the store's Redis
// (shared.WindowStore): its keys under the store's prefix and namespace, each
// check bounded by the store's timeout, coalesced when the store coalesces
// (not on a Cluster, where a batch's keys would span slots). Close closes
// it with the store.
func (s *Store) Window(name string, rule atomicwindow.Rule) (shared.WindowChecker, error) {
	w, err := newWindowIn(s.b.client, s.b.prefix, name, rule, WindowOptions{Timeout: s.Timeout(), Coalesce: s.b.coalesce}, false)
	if err != nil {
		return nil, err
	}
	w.e = s.Engine
	s.b.windowsMu.Lock()
	s.b.windows = append(s.b.windows, w)
	s.b.windowsMu.Unlock()
	return w, nil
}

// Close stops the store: its checks' goroutines and its windows'.
func (s *Store) Close() {
	s.Engine.Close()
	s.b.windowsMu.Lock()
	defer s.b.windowsMu.Unlock()
	for _, w := range s.b.windows {
		w.Close()
	}
	for _, c := range s.b.closers {
		c()
	}
}

// Close stops a coalescing window's goroutines.
func (w *Window) Close() {
	if w.co != nil {
		w.co.Close()
	}
}

// AllowN decides a request of cost for key on Redis, counting it if
// admitted. An error (Redis did not answer in time, or refused) comes with a
// denied decision that says nothing of the window.
func (w *Window) AllowN(ctx context.Context, key string, cost int64) (atomicbucket.Decision, error) {
	return w.allowN(ctx, windowCheck{key: key, cost: cost})
}

// AllowNMark is AllowN, with where an admission was counted
// (shared.WindowMarker): a settlement at a lower actual gives back from it.
func (w *Window) AllowNMark(ctx context.Context, key string, cost int64) (atomicbucket.Decision, verdict.WindowMark, error) {
	var m verdict.WindowMark
	d, err := w.allowN(ctx, windowCheck{key: key, cost: cost, mark: &m})
	return d, m, err
}

func (w *Window) allowN(ctx context.Context, c windowCheck) (atomicbucket.Decision, error) {
	if c.key == "" || len(c.key) > shared.MaxKeyLen {
		return atomicbucket.Decision{}, fmt.Errorf("redisstore: a window's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(c.key))
	}
	if w.co != nil {
		return w.co.Do(ctx, c)
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	ds, err := w.decide(ctx, []windowCheck{c})
	if err != nil {
		return atomicbucket.Decision{}, err
	}
	return ds[0], nil
}

// decideBatch is the coalescer's call: one script call for the batch.
func (w *Window) decideBatch(ctx context.Context, batch []*shared.Waiting[windowCheck]) {
	checks := make([]windowCheck, len(batch))
	for i, p := range batch {
		checks[i] = p.Check
	}
	ds, err := w.decide(ctx, checks)
	for i, p := range batch {
		if err != nil {
			p.Done(atomicbucket.Decision{}, err)
			continue
		}
		p.Done(ds[i], nil)
	}
}

// decide runs the script for checks: one call for the checks of the
// window's numbers, and one for those of each key with numbers of its own
// (a call goes by one set of numbers), each group in order.
func (w *Window) decide(ctx context.Context, checks []windowCheck) ([]atomicbucket.Decision, error) {
	if !w.AnyOwn() {
		return w.decideBy(ctx, checks, w.NumsFor(""))
	}
	nums := make([]*shared.WindowNums, len(checks))
	for i := range checks {
		nums[i] = w.NumsFor(checks[i].key)
	}
	ds := make([]atomicbucket.Decision, len(checks))
	done := make([]bool, len(checks))
	for i := range checks {
		if done[i] {
			continue
		}
		by := nums[i]
		var group []windowCheck
		var at []int
		for j := i; j < len(checks); j++ {
			if !done[j] && nums[j] == by {
				group, at = append(group, checks[j]), append(at, j)
				done[j] = true
			}
		}
		got, err := w.decideBy(ctx, group, by)
		if err != nil {
			return nil, err
		}
		for k, j := range at {
			ds[j] = got[k]
		}
	}
	return ds, nil
}

// decideBy runs the script for checks, in order, as runs of one key and
// cost, by numbers nm.
func (w *Window) decideBy(ctx context.Context, checks []windowCheck, nm *shared.WindowNums) ([]atomicbucket.Decision, error) {
	type run struct {
		key   string
		cost  int64
		count int
	}
	runs := make([]run, 0, len(checks))
	for _, c := range checks {
		if n := len(runs); n > 0 && runs[n-1].key == c.key && runs[n-1].cost == c.cost {
			runs[n-1].count++
			continue
		}
		runs = append(runs, run{c.key, c.cost, 1})
	}
	keys := make([]string, len(runs))
	args := make([]any, 0, 3+2*len(runs)+2)
	args = append(args, int64(nm.Rule.Window()/time.Microsecond), nm.Rule.Limit(), nm.GrainUs)
	for i, r := range runs {
		keys[i] = w.prefix + r.key
		args = append(args, r.cost, r.count)
	}
	if w.now != nil {
		t := w.now()
		args = append(args, t.Unix(), t.Nanosecond()/1000)
	}
	var res []int64
	err := w.run(ctx, func(ctx context.Context) error {
		var err error
		res, err = w.script.Run(ctx, w.client, keys, args...).Int64Slice()
		return err
	})
	if err != nil {
		return nil, err
	}
	if len(res) != 6*len(runs) {
		return nil, errors.New("redisstore: the window script answered " + strconv.Itoa(len(res)) + " numbers for " + strconv.Itoa(len(runs)) + " runs")
	}
	n := nm.Rule.Limit()
	ds := make([]atomicbucket.Decision, 0, len(checks))
	for i, r := range runs {
		admitted, in, retry, reset := res[6*i], res[6*i+1], res[6*i+2], res[6*i+3]
		mark := verdict.WindowMark{Slot: res[6*i+4], Gen: res[6*i+5]}
		for j := range int64(r.count) {
			// Remaining is at least 0: a window carried into a lower limit
			// may hold more than it.
			switch {
			case admitted < 0:
				ds = append(ds, atomicbucket.Decision{Remaining: max(n-in, 0), Reset: shared.WindowWait(reset), RetryAfter: atomicbucket.Never})
			case j < admitted:
				if m := checks[len(ds)].mark; m != nil {
					*m = mark
				}
				ds = append(ds, atomicbucket.Decision{Allowed: true, Remaining: max(n-in-(j+1)*r.cost, 0), Reset: shared.WindowWait(reset)})
			default:
				ds = append(ds, atomicbucket.Decision{Remaining: max(n-in-admitted*r.cost, 0), Reset: shared.WindowWait(reset), RetryAfter: shared.WindowWait(retry)})
			}
		}
	}
	return ds, nil
}

// Forget deletes key's window, whatever it holds (shared.WindowForgetter:
// a Reset): its next check finds it empty. A lease's grant in it is gone
// with it: its settlement finds a new generation and gives nothing back.
func (w *Window) Forget(ctx context.Context, key string) error {
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	return w.run(ctx, func(ctx context.Context) error {
		return w.client.Del(ctx, w.prefix+key).Err()
	})
}

// Settle counts excess units in key's window now, beyond its limit if need
// be (a settled request's actual cost above its estimate): at most the
// limit, the rest forgiven and returned (shared.WindowSettler). One script
// call.
func (w *Window) Settle(ctx context.Context, key string, excess int64) (forgiven int64, err error) {
	if key == "" || len(key) > shared.MaxKeyLen {
		return 0, fmt.Errorf("redisstore: a window's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	if excess <= 0 {
		return 0, nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	nm := w.NumsFor(key)
	// At most the limit is counted: sent as that (a Lua number holds
	// integers below 2^53 only), the rest forgiven here.
	c := min(excess, nm.Rule.Limit())
	args := []any{int64(nm.Rule.Window() / time.Microsecond), nm.Rule.Limit(), nm.GrainUs, c}
	if w.now != nil {
		t := w.now()
		args = append(args, t.Unix(), t.Nanosecond()/1000)
	}
	var res []int64
	err = w.run(ctx, func(ctx context.Context) error {
		var err error
		res, err = w.oweScript.Run(ctx, w.client, []string{w.prefix + key}, args...).Int64Slice()
		return err
	})
	if err != nil {
		return 0, err
	}
	if len(res) != 1 || res[0] != 0 {
		return 0, fmt.Errorf("redisstore: the window's settlement answered %v", res)
	}
	return excess - c, nil
}

// Lease settles a lessee's previous grant prev of key's window and grants
// at least cost and up to want units, or none for want 0 (a release): see
// shared.WindowLeaser. A grant is spent for shared.WindowLeaseTerm of the
// window.
func (w *Window) Lease(ctx context.Context, key string, cost, want int64, prev shared.Settlement) (shared.Granted, error) {
	if key == "" || len(key) > shared.MaxKeyLen {
		return shared.Granted{}, fmt.Errorf("redisstore: a window's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	nm := w.NumsFor(key)
	term := shared.WindowLeaseTerm(nm.Rule.Window())
	args := []any{int64(nm.Rule.Window() / time.Microsecond), nm.Rule.Limit(), nm.GrainUs, int64(term / time.Microsecond),
		cost, want, prev.Second, prev.Size, prev.Unspent, prev.Gen}
	if w.now != nil {
		t := w.now()
		args = append(args, t.Unix(), t.Nanosecond()/1000)
	}
	var res []int64
	err := w.run(ctx, func(ctx context.Context) error {
		var err error
		res, err = w.leaseScript.Run(ctx, w.client, []string{w.prefix + key}, args...).Int64Slice()
		return err
	})
	if err != nil {
		return shared.Granted{}, err
	}
	return shared.WindowGranted(nm.Rule.Limit(), res)
}
