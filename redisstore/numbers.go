package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/overlay"
	"github.com/redis/go-redis/v9"
)

// A hash of numbers, the Redis form of pgstore's numbers table: each field
// (a row's id) holds one row as JSON, NumbersRow; a row gives a rule's rate
// and burst for every plan (plan ""), one plan, or one key (on every plan),
// while it is active. Writers change rows with PutNumbers and DeleteNumbers,
// which publish to the hash's channel (its name) in the same transaction,
// and the instances watching it (Numbers) reload the whole hash and apply it
// all or nothing.

// DefaultNumbersHash is the numbers hash's key unless NumbersOptions say.
const DefaultNumbersHash = "limitgen:numbers"

// DefaultNumbersRefresh is how often Numbers reloads the hash without a
// message, a safety net for one it missed (pub/sub delivers at most once).
const DefaultNumbersRefresh = time.Minute

// NumbersRow is one row of the numbers hash. Its zero value is active, as
// pgstore's column defaults to true: a row is in force unless Inactive. In
// JSON it is {"rule", "plan", "key", "rate", "burst", "active"}, where a row
// without "active" is active.
type NumbersRow struct {
	Rule     string
	Plan     string
	Key      *string
	Rate     string // the policy's syntax: 100/s, 5 per 10s
	Burst    int64
	Inactive bool // kept in the hash but not applied
}

// numbersJSON is a row's JSON form.
type numbersJSON struct {
	Rule   string  `json:"rule"`
	Plan   string  `json:"plan,omitempty"`
	Key    *string `json:"key,omitempty"`
	Rate   string  `json:"rate"`
	Burst  int64   `json:"burst"`
	Active *bool   `json:"active,omitempty"`
}

// MarshalJSON writes the row with "active" always given.
func (r NumbersRow) MarshalJSON() ([]byte, error) {
	active := !r.Inactive
	return json.Marshal(numbersJSON{Rule: r.Rule, Plan: r.Plan, Key: r.Key, Rate: r.Rate, Burst: r.Burst, Active: &active})
}

// UnmarshalJSON reads a row; one without "active" is active.
func (r *NumbersRow) UnmarshalJSON(b []byte) error {
	var j numbersJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return err
	}
	*r = NumbersRow{Rule: j.Rule, Plan: j.Plan, Key: j.Key, Rate: j.Rate, Burst: j.Burst, Inactive: j.Active != nil && !*j.Active}
	return nil
}

// entry is row as every reader reads it, at position pos.
func (r NumbersRow) entry(pos string) overlay.Entry {
	return overlay.NewEntry(pos, r.Rule, r.Plan, r.Key, r.Rate, r.Burst)
}

// NumbersOptions configure Numbers.
type NumbersOptions struct {
	// Hash is the numbers hash's key (DefaultNumbersHash when empty), also
	// its channel's name.
	Hash string
	// Refresh is how often the hash is reloaded without a message
	// (DefaultNumbersRefresh when 0).
	Refresh time.Duration
	// Report is given each change of the hash's state (a refused hash, a
	// lost connection, a hash gone: once when it happens, as
	// overlay.WatchOptions says); nil logs with log/slog's default logger,
	// so that a source that stopped applying is never silent.
	Report func(error)
	// Applied, if set, is called after each reload that applied the hash.
	Applied func(rows int)
}

func hashOf(name string) string {
	if name == "" {
		return DefaultNumbersHash
	}
	return name
}

// NumbersMarker is a field PutNumbers and DeleteNumbers keep in the numbers
// hash, so that a hash whose rows were all deleted still exists: a hash that
// is gone (a Redis restarted without its data, a deleted key) is then told
// from one emptied on purpose, and Numbers keeps the numbers in force,
// reporting it, rather than taking every number back to the policy's. It is
// no row: no row's id may be it.
const NumbersMarker = "~limitgen"

// errMarkerID refuses a row id that is the marker's.
var errMarkerID = fmt.Errorf("redisstore: %q is the numbers hash's marker, not a row id", NumbersMarker)

// PutNumbers writes row id of the numbers hash (DefaultNumbersHash when
// hash is empty) and tells its watchers, in one transaction, after checking
// it as every reader will: a row that does not parse (its rate, a burst
// below 1) is refused, and nothing is written. With check (a generated
// package's CheckNumbers) the hash as it would be with the row written, all
// of it, is checked too, as Numbers applies it: a row naming a rule, plan or
// key the policy does not have, or numbers its rule refuses, is refused
// before any reader sees it, so it cannot hold back every later change.
// The hash is watched meanwhile (WATCH): a concurrent writer's change makes
// PutNumbers check again.
func PutNumbers(ctx context.Context, client redis.UniversalClient, hash, id string, row NumbersRow, check func(overlay.Set) error) error {
	if id == NumbersMarker {
		return errMarkerID
	}
	hash = hashOf(hash)
	pos := fmt.Sprintf("%s field %s", hash, id)
	if e := row.entry(pos); e.Err != nil || row.Burst < 1 {
		err := e.Err
		if err == nil {
			err = fmt.Errorf("burst %d admits nothing; burst must be at least 1", row.Burst)
		}
		return fmt.Errorf("redisstore: row not written: %w: %s: %w", overlay.ErrInvalid, pos, err)
	}
	v, err := json.Marshal(row)
	if err != nil {
		return err
	}
	write := func(p redis.Pipeliner) error {
		p.HSet(ctx, hash, id, v, NumbersMarker, "1")
		p.Publish(ctx, hash, id)
		return nil
	}
	if check == nil {
		_, err = client.TxPipelined(ctx, write)
		return err
	}
	for range 16 {
		err = client.Watch(ctx, func(tx *redis.Tx) error {
			all, err := tx.HGetAll(ctx, hash).Result()
			if err != nil {
				return fmt.Errorf("redisstore: reading numbers hash %s: %w", hash, err)
			}
			all[id] = string(v)
			set, err := parseNumbers(hash, all)
			if err == nil {
				err = check(set)
			}
			if err != nil {
				return fmt.Errorf("redisstore: row %s not written: the hash with it would be refused: %w", pos, err)
			}
			_, err = tx.TxPipelined(ctx, write)
			return err
		}, hash)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return fmt.Errorf("redisstore: row %s not written: the hash kept changing under 16 attempts: %w", pos, err)
}

// DeleteNumbers removes row id of the numbers hash and tells its watchers;
// the hash stays, with its marker, when it was the last row.
func DeleteNumbers(ctx context.Context, client redis.UniversalClient, hash, id string) error {
	if id == NumbersMarker {
		return errMarkerID
	}
	hash = hashOf(hash)
	_, err := client.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HDel(ctx, hash, id)
		p.HSet(ctx, hash, NumbersMarker, "1")
		p.Publish(ctx, hash, id)
		return nil
	})
	return err
}

// LoadNumbers reads the numbers hash's active rows as a Set, in the order
// of their ids, each entry's position its field ("limitgen:numbers field
// 7"). A row that does not read (not JSON, a rate that does not parse) is an
// entry with its Err, which ApplyNumbers refuses with every other problem.
func LoadNumbers(ctx context.Context, client redis.UniversalClient, hash string) (overlay.Set, error) {
	set, _, err := loadNumbers(ctx, client, hash)
	return set, err
}

// loadNumbers is LoadNumbers, and whether the hash exists (any field, the
// marker included).
func loadNumbers(ctx context.Context, client redis.UniversalClient, hash string) (overlay.Set, bool, error) {
	hash = hashOf(hash)
	all, err := client.HGetAll(ctx, hash).Result()
	if err != nil {
		return nil, false, fmt.Errorf("redisstore: reading numbers hash %s: %w", hash, err)
	}
	exists := len(all) > 0
	set, err := parseNumbers(hash, all)
	return set, exists, err
}

// parseNumbers is the Set of a numbers hash's fields (all, the marker
// ignored): its active rows, in the order of their ids.
func parseNumbers(hash string, all map[string]string) (overlay.Set, error) {
	ids := make([]string, 0, len(all))
	for id := range all {
		if id != NumbersMarker {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	var set overlay.Set
	for _, id := range ids {
		pos := fmt.Sprintf("%s field %s", hash, id)
		var row NumbersRow
		if err := json.Unmarshal([]byte(all[id]), &row); err != nil {
			set = append(set, overlay.Entry{Pos: pos, Err: fmt.Errorf("not a row (JSON with rule, plan, key, rate, burst, active): %w", err)})
			continue
		}
		if !row.Inactive {
			set = append(set, row.entry(pos))
		}
	}
	return set, nil
}

// NumbersSource is the numbers hash as a source (overlay.Notifier): Load
// reads the whole hash, Changes is its channel's messages.
type NumbersSource struct {
	client redis.UniversalClient
	hash   string
	seen   atomic.Bool // a Load found the hash
}

// NewNumbersSource returns the numbers hash (DefaultNumbersHash when hash is
// empty) on client as a source.
func NewNumbersSource(client redis.UniversalClient, hash string) *NumbersSource {
	return &NumbersSource{client: client, hash: hashOf(hash)}
}

// String names the hash.
func (s *NumbersSource) String() string { return "Redis numbers hash " + s.hash }

// Load reads the hash's active rows (LoadNumbers). A hash that is gone after
// a Load found it (a Redis restarted without its data, its key deleted; rows
// deleted with DeleteNumbers leave its marker) is an error: the numbers in
// force stay.
func (s *NumbersSource) Load(ctx context.Context) (overlay.Set, error) {
	set, exists, err := loadNumbers(ctx, s.client, s.hash)
	if err != nil {
		return nil, err
	}
	if !exists && s.seen.Load() {
		return nil, fmt.Errorf("the hash is gone (a Redis restarted without its data, or its key deleted; rows deleted with DeleteNumbers leave its marker, %s)", NumbersMarker)
	}
	if exists {
		s.seen.Store(true)
	}
	return set, nil
}

// Changes subscribes to the hash's channel before it returns, so that no
// write after it is missed, and sends on every message (a burst of them is
// one notice).
func (s *NumbersSource) Changes(ctx context.Context, report func(error)) <-chan struct{} {
	out := make(chan struct{}, 1)
	sub := s.client.Subscribe(ctx, s.hash)
	if _, err := sub.Receive(ctx); err != nil {
		report(fmt.Errorf("subscribing to channel %s (the refresh goes on): %w", s.hash, err))
	} else {
		report(nil)
	}
	go func() {
		defer sub.Close()
		msgs := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-msgs:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default: // one is waiting: it covers this one
				}
			}
		}
	}()
	return out
}

// Numbers keeps a generated package's numbers equal to the numbers hash's
// active rows: overlay.Watch of NewNumbersSource(client, opts.Hash), with
// opts' Refresh (DefaultNumbersRefresh when 0), Report and Applied, until
// ctx is done. A hash that apply refuses (its error names each bad row), a
// lost connection and a hash that is gone leave the numbers in force, each
// reported once when it happens.
//
// Instances sharing the server converge within the time a message takes to
// arrive and the hash to be read (milliseconds); an instance that missed
// one, within Refresh.
func Numbers(ctx context.Context, client redis.UniversalClient, apply func(overlay.Set) error, opts NumbersOptions) error {
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultNumbersRefresh
	}
	overlay.Watch(ctx, NewNumbersSource(client, opts.Hash), apply, overlay.WatchOptions{Refresh: opts.Refresh, Report: opts.Report, Applied: opts.Applied})
	return nil
}
