package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/shared"
	"github.com/redis/go-redis/v9"
)

// slotsPrelude is what the slot scripts share: the limit and the hold (µs),
// the time, and acquire and release. A key's slots are a sorted set: each
// held slot a member (the acquisition's token, 8 bytes) scored by its
// expiry, in µs on Redis's clock. Scores are doubles: whole µs stay exact
// until the year 2255.
//
// acquire frees the members whose expiry has come (slots never released:
// counted, and free; looked for by the first member's score, so that a key
// with none expired costs no removal), then adds its own when fewer than
// the limit are left, and sets the key to expire 10 s after its last slot
// (a call in those 10 s counts what expired unreleased; a key with nothing
// held is soon no key). It returns {1 acquired or 0 denied, the slots held
// before it, the first and the last held slot's expiry − now (µs, 0 when
// none is held; a denial's first, when more than the limit are held after it
// was cut, the expiry that leaves fewer than the limit), the slots it found
// expired}.
//
// release removes the token's member, and returns 1 when the slot was held
// until now, 2 when its expiry had come (it came back by itself), 0 when
// there is none.
const slotsPrelude = `
local N, hold = tonumber(ARGV[1]), tonumber(ARGV[2])
local t = {{NOW}}
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local function acquire(k, tok)
  local f = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  local expired = 0
  if f[2] and tonumber(f[2]) <= now then
    expired = redis.call('ZREMRANGEBYSCORE', k, '-inf', now)
    f = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  end
  local held, first, last = 0, 0, 0
  if f[2] then
    held = redis.call('ZCARD', k)
    first = tonumber(f[2])
    last = tonumber(redis.call('ZRANGE', k, -1, -1, 'WITHSCORES')[2])
  end
  local ok = 0
  if held > N then -- more held than a cut of the numbers left: under N at this expiry
    first = tonumber(redis.call('ZRANGE', k, held - N, held - N, 'WITHSCORES')[2])
  end
  if held < N then
    local e = now + hold
    redis.call('ZADD', k, e, tok)
    if held == 0 then first = e end
    first, last = math.min(first, e), math.max(last, e)
    redis.call('PEXPIRE', k, math.floor((last - now) / 1000) + 10001)
    ok = 1
  end
  if held + ok > 0 then
    first, last = first - now, last - now
  end
  return {ok, held, first, last, expired}
end
local function release(k, tok)
  local e = redis.call('ZSCORE', k, tok)
  if not e then return 0 end
  redis.call('ZREM', k, tok)
  if tonumber(e) > now then return 1 end
  return 2
end
`

// slotsAcquireSource takes one of KEYS[1]'s slots: ARGV the limit, the hold
// in µs, the token.
const slotsAcquireSource = slotsPrelude + `
return acquire(KEYS[1], ARGV[3])
`

// slotsReleaseSource gives a slot back: ARGV the limit, the hold, the token.
const slotsReleaseSource = slotsPrelude + `
return release(KEYS[1], ARGV[3])
`

// slotsBatchSource is a coalesced batch of acquisitions and releases (not on
// a Cluster, where its keys would span hash slots), each decided in order:
// KEYS the calls' keys, ARGV the limit, the hold, then per call "a" or "r"
// and its token. It returns five numbers a call: an acquisition's, or a
// release's answer and four zeros.
const slotsBatchSource = slotsPrelude + `
local out = {}
for i = 1, #KEYS do
  local k, op, tok = KEYS[i], ARGV[1 + 2 * i], ARGV[2 + 2 * i]
  local r
  if op == 'r' then
    r = {release(k, tok), 0, 0, 0, 0}
  else
    r = acquire(k, tok)
  end
  for j = 1, 5 do out[#out + 1] = r[j] end
end
return out
`

// Slots is an in-flight rule (at most N of a key's requests at once) kept on
// Redis, on Redis's clock: every instance that acquires shares one set of
// slots per key, each slot free again at its release or at its expiry,
// whichever comes first, so a dead instance's slots come back after the
// rule's hold, never before. An acquisition and a release are a script call
// each. Its methods are safe for concurrent use.
type Slots struct {
	client  redis.UniversalClient
	acquire *redis.Script
	release *redis.Script
	prefix  string // the keys' prefix, up to the key
	nums    atomic.Pointer[shared.SlotNumbers]
	timeout time.Duration
	e       *shared.Engine
	now     func() time.Time // tests: the time the scripts decide at
	// co, when the store coalesces (not on a Cluster), sends concurrent
	// acquisitions and releases together, one batch script call each.
	co    *shared.SlotBatch
	batch *redis.Script
}

// Slots returns the in-flight rule named name on the store's Redis
// (shared.SlotStore): its keys under the store's prefix and namespace, each
// call bounded by the store's timeout, one of the store's round trips.
func (s *Store) Slots(name string, rule atomicslot.Rule) (shared.SlotChecker, error) {
	sl, err := newSlots(s.b.client, s.b.prefix, name, rule, s.Timeout(), false)
	if err != nil {
		return nil, err
	}
	sl.e = s.Engine
	if _, cluster := s.b.client.(*redis.ClusterClient); s.b.coalesce > 0 && !cluster {
		sl.coalesce(s.b.coalesce)
		s.b.windowsMu.Lock()
		s.b.closers = append(s.b.closers, sl.co.Close)
		s.b.windowsMu.Unlock()
	}
	return sl, nil
}

// coalesce makes the rule send concurrent calls together, at most max a
// batch script call.
func (s *Slots) coalesce(max int) {
	s.co = shared.NewSlotBatch(max, s.timeout, s.sendBatch)
}

// sendBatch is one script call for a coalesced batch.
func (s *Slots) sendBatch(ctx context.Context, ops []shared.SlotOp) ([]int64, int64, error) {
	n := s.nums.Load()
	keys := make([]string, len(ops))
	args := make([]any, 0, 2+2*len(ops)+2)
	args = append(args, n.Limit, n.HoldUs)
	for i, op := range ops {
		keys[i] = s.prefix + op.Key
		kind := "a"
		if op.Release {
			kind = "r"
		}
		args = append(args, kind, tokenBytes(op.Token))
	}
	var res []int64
	err := s.runNoTimeout(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.batch.Run(ctx, s.client, keys, s.args(args...)...).Int64Slice()
		return err
	})
	return res, n.Limit, err
}

// newSlots is the rule named name under prefix; explicitNow makes its
// scripts decide at the time given (tests).
func newSlots(client redis.UniversalClient, prefix, name string, rule atomicslot.Rule, timeout time.Duration, explicitNow bool) (*Slots, error) {
	if name == "" || len(name) > 200 || strings.ContainsAny(name, "{}") {
		return nil, fmt.Errorf("redisstore: an in-flight rule's name has 1 to 200 bytes and no braces, not %q", name)
	}
	if rule.Limit() < 1 {
		return nil, fmt.Errorf("%w: an in-flight rule of no slots", atomicbucket.ErrInvalidLimit)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	s := &Slots{
		client:  client,
		acquire: redis.NewScript(windowScript(slotsAcquireSource, explicitNow)),
		release: redis.NewScript(windowScript(slotsReleaseSource, explicitNow)),
		batch:   redis.NewScript(windowScript(slotsBatchSource, explicitNow)),
		prefix:  prefix + "slots:" + name + ":",
		timeout: timeout,
	}
	s.SetRule(rule)
	return s, nil
}

// SetRule makes rule's numbers those of every call from now
// (shared.SlotRuler): the slots held stay held, each until its expiry.
func (s *Slots) SetRule(rule atomicslot.Rule) { s.nums.Store(shared.SlotNumbersOf(rule)) }

// Node is the server that holds key's slots on a Cluster (its master's
// address), "" on a single server (shared.WindowPlacer).
func (s *Slots) Node(key string) string {
	c, ok := s.client.(*redis.ClusterClient)
	if !ok {
		return ""
	}
	if m, err := c.MasterForKey(context.Background(), s.prefix+key); err == nil {
		return m.Options().Addr
	}
	return ""
}

// args are a script's arguments after its own: the test's time, if any.
func (s *Slots) args(args ...any) []any {
	if s.now != nil {
		t := s.now()
		args = append(args, t.Unix(), t.Nanosecond()/1000)
	}
	return args
}

// run runs one script call within the store's timeout, as one of its
// round trips when the rule is a Store's.
func (s *Slots) run(ctx context.Context, fn func(ctx context.Context) error) error {
	if s.e != nil { // the round trip bounds it by the store's timeout
		return s.e.RoundTrip(ctx, fn)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	return fn(ctx)
}

// runNoTimeout is run within ctx's deadline alone (a coalesced batch's).
func (s *Slots) runNoTimeout(ctx context.Context, fn func(ctx context.Context) error) error {
	if s.e == nil {
		return fn(ctx)
	}
	return s.e.RoundTrip(ctx, fn)
}

func checkSlotKey(key string) error {
	if key == "" || len(key) > shared.MaxKeyLen {
		return fmt.Errorf("redisstore: an in-flight rule's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
	}
	return nil
}

// Acquire takes one of key's slots for token (shared.SlotChecker).
func (s *Slots) Acquire(ctx context.Context, key string, token uint64) (atomicbucket.Decision, int64, error) {
	if err := checkSlotKey(key); err != nil {
		return atomicbucket.Decision{}, 0, err
	}
	if s.co != nil {
		d, expired, err := s.co.Acquire(ctx, key, token)
		if err != nil {
			return atomicbucket.Decision{}, 0, fmt.Errorf("redisstore: acquiring a slot: %w", err)
		}
		return d, expired, nil
	}
	var res []int64
	n := s.nums.Load()
	err := s.run(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.acquire.Run(ctx, s.client, []string{s.prefix + key}, s.args(n.Limit, n.HoldUs, tokenBytes(token))...).Int64Slice()
		return err
	})
	if err != nil {
		return atomicbucket.Decision{}, 0, fmt.Errorf("redisstore: acquiring a slot: %w", err)
	}
	return shared.SlotReplyOf(n.Limit, res)
}

// Release gives token's slot of key back (shared.SlotChecker).
func (s *Slots) Release(ctx context.Context, key string, token uint64) (shared.SlotRelease, error) {
	if err := checkSlotKey(key); err != nil {
		return shared.SlotGone, err
	}
	if s.co != nil {
		got, err := s.co.Release(ctx, key, token)
		if err != nil {
			return shared.SlotGone, fmt.Errorf("redisstore: releasing a slot: %w", err)
		}
		return got, nil
	}
	var got int64
	err := s.run(ctx, func(ctx context.Context) error {
		var err error
		n := s.nums.Load()
		got, err = s.release.Run(ctx, s.client, []string{s.prefix + key}, s.args(n.Limit, n.HoldUs, tokenBytes(token))...).Int64()
		return err
	})
	if err != nil {
		return shared.SlotGone, fmt.Errorf("redisstore: releasing a slot: %w", err)
	}
	return shared.SlotReleaseOf(got), nil
}

// AcquireN takes up to len(tokens) of key's slots in one batch script call,
// each held for hold (shared.SlotLeaser).
func (s *Slots) AcquireN(ctx context.Context, key string, tokens []uint64, hold time.Duration) ([]int64, int64, error) {
	if err := checkSlotKey(key); err != nil {
		return nil, 0, err
	}
	n := s.nums.Load()
	keys := make([]string, len(tokens))
	args := make([]any, 0, 2+2*len(tokens)+2)
	args = append(args, n.Limit, int64((hold+time.Microsecond-1)/time.Microsecond))
	for i, tok := range tokens {
		keys[i] = s.prefix + key
		args = append(args, "a", tokenBytes(tok))
	}
	var res []int64
	err := s.run(ctx, func(ctx context.Context) error {
		var err error
		res, err = s.batch.Run(ctx, s.client, keys, s.args(args...)...).Int64Slice()
		return err
	})
	if err != nil {
		return nil, 0, fmt.Errorf("redisstore: leasing slots: %w", err)
	}
	return res, n.Limit, nil
}

// tokenBytes is a token as its member: 8 bytes, big-endian.
func tokenBytes(token uint64) string {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], token)
	return string(b[:])
}
