package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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

// entry is row as every reader checks and applies it, at position pos.
func (r NumbersRow) entry(pos string) (overlay.Entry, error) {
	e := overlay.Entry{Rule: r.Rule, Plan: r.Plan, Pos: pos}
	if r.Key != nil {
		e.Key, e.HasKey = *r.Key, true
	}
	tokens, period, err := overlay.ParseRate(r.Rate, false)
	switch {
	case err != nil:
		return e, fmt.Errorf("%s: %w", pos, err)
	case r.Burst < 1:
		return e, fmt.Errorf("%s: burst %d admits nothing; burst must be at least 1", pos, r.Burst)
	}
	e.Numbers.Tokens, e.Numbers.Period, e.Numbers.Burst = tokens, period, r.Burst
	return e, nil
}

// NumbersOptions configure Numbers.
type NumbersOptions struct {
	// Hash is the numbers hash's key (DefaultNumbersHash when empty), also
	// its channel's name.
	Hash string
	// Refresh is how often the hash is reloaded without a message
	// (DefaultNumbersRefresh when 0).
	Refresh time.Duration
	// Report is given every reload's error (a refused hash, a lost
	// connection); nil logs them with log/slog's default logger, so that
	// a source that stopped applying is never silent.
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
	if _, err := row.entry(pos); err != nil {
		return fmt.Errorf("redisstore: row not written: %w: %w", overlay.ErrInvalid, err)
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
// 7"). A row that does not parse is an error naming its field.
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
	var errs []error
	for _, id := range ids {
		pos := fmt.Sprintf("%s field %s", hash, id)
		var row NumbersRow
		if err := json.Unmarshal([]byte(all[id]), &row); err != nil {
			errs = append(errs, fmt.Errorf("%s: not a row (JSON with rule, plan, key, rate, burst, active): %w", pos, err))
			continue
		}
		if row.Inactive {
			continue
		}
		e, err := row.entry(pos)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		set = append(set, e)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("redisstore: %w: %w", overlay.ErrInvalid, errors.Join(errs...))
	}
	return set, nil
}

// Numbers keeps a generated package's numbers equal to the numbers hash's
// active rows, applying the whole hash with apply (the package's
// ApplyNumbers) at once, then on every message on its channel, and every
// Refresh as a safety net (pub/sub loses messages while a subscriber is
// disconnected), until ctx is done. A hash that apply refuses (a bad row:
// its error names it) leaves the numbers in force as they were, and so does
// a lost connection, and so does a hash that is gone after a reload found it
// (NumbersMarker); each goes to Report, a gone hash at every reload until it
// is written again.
//
// Instances sharing the server converge within the time a message takes to
// arrive and the hash to be read (milliseconds); an instance that missed
// one, within Refresh.
func Numbers(ctx context.Context, client redis.UniversalClient, apply func(overlay.Set) error, opts NumbersOptions) error {
	hash := hashOf(opts.Hash)
	if opts.Refresh <= 0 {
		opts.Refresh = DefaultNumbersRefresh
	}
	report := func(err error) {
		if err == nil || ctx.Err() != nil {
			return
		}
		if opts.Report == nil {
			slog.Error(err.Error())
			return
		}
		opts.Report(err)
	}
	seen := false // a reload found the hash
	reload := func() {
		set, exists, err := loadNumbers(ctx, client, hash)
		gone := err == nil && !exists && seen
		seen = seen || exists // a hash with a bad row was found too
		switch {
		case err != nil:
		case gone:
			err = fmt.Errorf("the hash is gone (a Redis restarted without its data, or its key deleted; rows deleted with DeleteNumbers leave its marker, %s)", NumbersMarker)
		default:
			err = apply(set)
		}
		if err != nil {
			report(fmt.Errorf("redisstore: numbers hash %s not applied, the numbers in force stay: %w", hash, err))
			return
		}
		if opts.Applied != nil {
			opts.Applied(len(set))
		}
	}
	sub := client.Subscribe(ctx, hash)
	defer sub.Close()
	// The subscription is confirmed before the first load, so no change
	// falls between them.
	if _, err := sub.Receive(ctx); err != nil {
		report(fmt.Errorf("redisstore: subscribing to numbers channel %s (the refresh goes on): %w", hash, err))
	}
	reload()
	tick := time.NewTicker(opts.Refresh)
	defer tick.Stop()
	msgs := sub.Channel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-msgs:
			if !ok {
				return nil
			}
			// Messages that arrived meanwhile are covered by one reload.
			for drained := false; !drained; {
				select {
				case <-msgs:
				default:
					drained = true
				}
			}
			reload()
		case <-tick.C:
			reload()
		}
	}
}
