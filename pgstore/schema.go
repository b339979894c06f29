package pgstore

import (
	"fmt"
	"strings"
)

// The schema: one table of buckets and one PL/pgSQL function that checks
// them, both named by Options.Table (the function is the table's name with
// "_check"). Store.Schema returns the SQL, for a migration of your own.
//
// A bucket is a row (r, k): the rule's name and the request's key (bytes, so
// any key is stored as it is; a key longer than maxKeyBytes is stored as its
// SHA-256). s and u are its theoretical arrival time (TAT): whole Unix seconds
// and units within the second (greedy rules), or the period index and slots
// (interval rules), as shared.Numbers counts them, so that only the part of
// the TAT ahead of now, at most a burst's worth, is ever multiplied. full_at
// is the Unix µs from which the bucket is full again and nothing is held by
// leases: a full bucket is the same as an absent one, and Store.Sweep deletes
// such rows. e, hc and hp are the tokens leases hold (see the lease mode).
//
// The function decides one bucket or a tier of them, all or nothing, on the
// server's clock (clock_timestamp(): the time of the check, not of its
// transaction), and writes only what changes: a denied check writes nothing
// (except the first check of a new key whose bucket starts below full, as
// the local tables create the key on such a check). Checks of one bucket are
// serialised by a transaction-scoped advisory lock on the bucket's 32-bit
// hash, taken before the row is read (so that two first checks of a new key
// cannot both start from a full bucket); a tier takes its locks in ascending
// order, so tiers cannot deadlock. The lock class is the table's, so the
// locks do not meet the application's own one-key advisory locks.
//
// Arguments: rs (rule names), ks (keys), locks (the buckets' lock hashes,
// ascending, each once), v (8 values a bucket: kind (1 greedy, 2 interval),
// emit (interval: 1), tau, debt, perSecond (interval: period ns), perMicro
// (interval: tokens), phase (interval; greedy 0), cost; then for mode 3:
// want, and the previous grant's second, size and unspent tokens), mode (0
// decide only, 1 take, 2 refund each bucket its cost never beyond full, 3
// lease one bucket), and at_us (NULL: the server's clock; else the check's
// time in Unix µs, for tests).
//
// Returns {allowed, index (1-based), ahead, excess, since}: the bucket whose
// decision this is (the one that denied, or the one left with the fewest
// whole tokens, the first on a tie), how far its TAT is ahead of now after
// the check, for a denial how far the request would have put it beyond tau,
// and for an interval bucket the ns since its grid's last boundary. Mode 3
// returns 7 values: allowed, 1, ahead, the tokens granted (a denial: the
// excess), since, the server's second the grant is held under, and the µs
// within it.
const tableSQL = `CREATE {{UNLOGGED}}TABLE IF NOT EXISTS {{TABLE}} (
  r text NOT NULL,
  k bytea NOT NULL,
  s bigint NOT NULL,
  u bigint NOT NULL,
  full_at bigint NOT NULL,
  e bigint NOT NULL DEFAULT 0,
  hc bigint NOT NULL DEFAULT 0,
  hp bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (r, k)
) WITH (fillfactor = 70)`

const functionSQL = `CREATE OR REPLACE FUNCTION {{FUNC}}(rs text[], ks bytea[], locks int[], v bigint[], mode int, at_us bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE
  n int := cardinality(rs);
  us bigint := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
  nsec bigint := us / 1000000;
  usec bigint := us % 1000000;
  take bool := mode = 1;
  kind bigint[]; emit bigint[]; tau bigint[]; debt bigint[]; per bigint[]; pm bigint[];
  phase bigint[]; cost bigint[]; inc bigint[]; ahead bigint[]; since bigint[];
  idx bigint[]; horizon bigint[]; fresh bool[]; ee bigint[]; hc bigint[]; hp bigint[];
  dirty bool[]; wa bigint[];
  h int; o int; i int; j int; t bigint; m bigint; d bigint; live bigint;
  e0 bigint; c0 bigint; p0 bigint;
  best int; best_left bigint; lft bigint; after bigint;
  want bigint; se bigint; sg bigint; sr bigint; changed bool; spare bigint; extra bigint; granted bigint;
  total bigint; q bigint; hi bigint; lo bigint; full_us bigint;
  res bigint[];
  rec record;
BEGIN
  IF n IS NULL OR n = 0 OR cardinality(v) < 8 * n THEN
    RAISE EXCEPTION 'limitgen: % buckets with % values', n, cardinality(v);
  END IF;
  FOREACH h IN ARRAY locks LOOP
    PERFORM pg_advisory_xact_lock({{CLASS}}, h);
  END LOOP;

  FOR i IN 1..n LOOP
    o := (i - 1) * 8;
    kind[i] := v[o + 1]; emit[i] := v[o + 2]; tau[i] := v[o + 3]; debt[i] := v[o + 4];
    per[i] := v[o + 5]; pm[i] := v[o + 6]; phase[i] := v[o + 7]; cost[i] := v[o + 8];
    inc[i] := cost[i] * emit[i];
    IF kind[i] = 1 THEN
      since[i] := 0;
      horizon[i] := tau[i] / per[i] + 1;
    ELSE -- interval: per is the period (ns), pm the tokens a boundary adds
      idx[i] := (us * 1000 - phase[i]) / per[i];
      since[i] := us * 1000 - phase[i] - idx[i] * per[i];
      horizon[i] := (tau[i] / pm[i] + 2) * per[i] / 1000000000 + 1;
    END IF;
    ahead[i] := debt[i]; fresh[i] := true; dirty[i] := false; wa[i] := 0;
    ee[i] := nsec; hc[i] := 0; hp[i] := 0;
    SELECT b.s, b.u, b.e, b.hc, b.hp INTO rec FROM {{TABLE}} b WHERE b.r = rs[i] AND b.k = ks[i];
    IF FOUND THEN
      fresh[i] := false;
      IF kind[i] = 1 THEN
        IF rec.s < nsec - horizon[i] THEN
          ahead[i] := 0;
        ELSIF rec.s > nsec + horizon[i] THEN
          ahead[i] := tau[i]; -- the clock went back by more than a burst: empty until it catches up
        ELSE
          ahead[i] := (rec.s - nsec) * per[i] + (rec.u - usec * pm[i]);
        END IF;
      ELSE
        IF rec.s < idx[i] - 1 - tau[i] / pm[i] THEN
          ahead[i] := 0;
        ELSIF rec.s > idx[i] + 1 + tau[i] / pm[i] THEN
          ahead[i] := tau[i];
        ELSE
          ahead[i] := (rec.s - idx[i]) * pm[i] + rec.u;
        END IF;
      END IF;
      IF ahead[i] < 0 THEN
        ahead[i] := 0;
      END IF;
      IF rec.hc > 0 OR rec.hp > 0 THEN
        -- Tokens leases hold: granted in the server's second e (hc) and e - 1
        -- (hp), each grant valid until the start of the second after next.
        -- While they may be spent elsewhere the bucket holds at most its burst
        -- minus them; when a grant expires the bucket goes on as if all of it
        -- had been spent at that moment.
        e0 := rec.e; c0 := rec.hc; p0 := rec.hp; live := c0 + p0;
        IF nsec >= e0 + 1 THEN
          FOR t IN e0 + 1..least(e0 + 2, nsec) LOOP
            IF nsec - t > horizon[i] THEN
              d := tau[i] + 1;
            ELSIF kind[i] = 1 THEN
              d := (nsec - t) * per[i] + usec * pm[i];
            ELSE
              d := (idx[i] - (t * 1000000000 - phase[i]) / per[i]) * pm[i];
            END IF;
            IF t = e0 + 1 THEN
              m := (c0 + p0) * emit[i] - d;
            ELSE
              m := c0 * emit[i] - d;
            END IF;
            IF m > ahead[i] THEN
              ahead[i] := m;
            END IF;
          END LOOP;
          IF nsec = e0 + 1 THEN
            live := c0; p0 := c0; c0 := 0;
          ELSE
            live := 0; p0 := 0; c0 := 0;
          END IF;
          e0 := nsec;
        END IF;
        IF live * emit[i] > ahead[i] THEN
          ahead[i] := live * emit[i];
        END IF;
        ee[i] := e0; hc[i] := c0; hp[i] := p0;
      END IF;
    END IF;
  END LOOP;

  IF mode = 3 THEN
    -- A lease of one bucket: settle the lessee's previous grant (while it is
    -- valid what was not spent comes back), then grant at least the cost and
    -- up to want tokens, never more than half of what the bucket holds beyond
    -- the cost; want 0 asks for nothing (a release).
    want := v[8 * n + 1]; se := v[8 * n + 2]; sg := v[8 * n + 3]; sr := v[8 * n + 4];
    changed := false;
    IF sg > 0 AND (se = ee[1] OR se = ee[1] - 1) THEN
      IF se = ee[1] THEN
        hc[1] := hc[1] - least(sg, hc[1]);
      ELSE
        hp[1] := hp[1] - least(sg, hp[1]);
      END IF;
      ahead[1] := greatest(ahead[1] - least(sr, sg) * emit[1], 0, (hc[1] + hp[1]) * emit[1]);
      changed := true;
    END IF;
    IF want = 0 THEN
      res := ARRAY[1, 1, ahead[1], 0, since[1], ee[1], usec];
      IF changed THEN
        dirty[1] := true; wa[1] := ahead[1];
      END IF;
    ELSIF ahead[1] + inc[1] > tau[1] THEN
      res := ARRAY[0, 1, ahead[1], ahead[1] + inc[1] - tau[1], since[1], ee[1], usec];
      IF changed OR (fresh[1] AND debt[1] > 0 AND cost[1] > 0 AND inc[1] <= tau[1]) THEN
        dirty[1] := true; wa[1] := ahead[1];
      END IF;
    ELSE
      spare := (tau[1] - ahead[1] - inc[1]) / emit[1];
      extra := greatest(least(spare / 2, want - cost[1]), 0);
      granted := cost[1] + extra;
      after := ahead[1] + granted * emit[1];
      hc[1] := hc[1] + granted;
      res := ARRAY[1, 1, after, granted, since[1], ee[1], usec];
      IF granted > 0 OR changed THEN
        dirty[1] := true; wa[1] := after;
      END IF;
    END IF;
  ELSIF mode = 2 THEN
    FOR i IN 1..n LOOP
      after := greatest(ahead[i] - inc[i], (hc[i] + hp[i]) * emit[i], 0);
      IF after > 0 OR NOT fresh[i] THEN
        dirty[i] := true; wa[i] := after;
      END IF;
    END LOOP;
    res := ARRAY[1, 1, 0, 0, 0];
  ELSE
    FOR i IN 1..n LOOP
      IF ahead[i] + inc[i] > tau[i] THEN
        FOR j IN 1..i LOOP
          IF take AND fresh[j] AND debt[j] > 0 AND cost[j] > 0 AND inc[j] <= tau[j] THEN
            dirty[j] := true; wa[j] := debt[j];
          END IF;
        END LOOP;
        res := ARRAY[0, i, ahead[i], ahead[i] + inc[i] - tau[i], since[i]];
        EXIT;
      END IF;
    END LOOP;
    IF res IS NULL THEN
      best := 1;
      FOR i IN 1..n LOOP
        after := ahead[i] + inc[i];
        IF take AND inc[i] > 0 THEN
          dirty[i] := true; wa[i] := after;
        ELSIF take AND fresh[i] AND debt[i] > 0 AND cost[i] > 0 AND inc[i] <= tau[i] THEN
          dirty[i] := true; wa[i] := debt[i];
        END IF;
        lft := (tau[i] - after) / emit[i];
        IF i = 1 OR lft < best_left THEN
          best := i; best_left := lft;
        END IF;
      END LOOP;
      res := ARRAY[1, best, ahead[best] + inc[best], 0, since[best]];
    END IF;
  END IF;

  FOR i IN 1..n LOOP
    CONTINUE WHEN NOT dirty[i];
    IF wa[i] <= 0 AND hc[i] + hp[i] = 0 THEN
      DELETE FROM {{TABLE}} b WHERE b.r = rs[i] AND b.k = ks[i]; -- full: absent
      CONTINUE;
    END IF;
    IF kind[i] = 1 THEN
      total := usec * pm[i] + wa[i];
      q := total / per[i];
      hi := nsec + q; lo := total - q * per[i];
      full_us := us + (wa[i] + pm[i] - 1) / pm[i];
    ELSE
      q := wa[i] / pm[i];
      hi := idx[i] + q; lo := wa[i] - q * pm[i];
      IF lo > 0 THEN
        q := q + 1;
      END IF;
      full_us := us + (q * per[i] - since[i] + 999) / 1000;
    END IF;
    IF hc[i] + hp[i] > 0 THEN -- kept until every grant has expired and its time has passed
      full_us := greatest(full_us, (ee[i] + 2 + horizon[i]) * 1000000);
    END IF;
    INSERT INTO {{TABLE}} AS b (r, k, s, u, full_at, e, hc, hp)
      VALUES (rs[i], ks[i], hi, lo, full_us, ee[i], hc[i], hp[i])
      ON CONFLICT (r, k) DO UPDATE
      SET s = excluded.s, u = excluded.u, full_at = excluded.full_at, e = excluded.e, hc = excluded.hc, hp = excluded.hp;
  END LOOP;
  RETURN res;
END
$fn$`

// schema returns the SQL that creates table, and its check function fn.
func schema(table, fn string, class int32, unlogged bool) (string, string) {
	u := ""
	if unlogged {
		u = "UNLOGGED "
	}
	r := strings.NewReplacer("{{UNLOGGED}}", u, "{{TABLE}}", table, "{{FUNC}}", fn, "{{CLASS}}", fmt.Sprint(class))
	return r.Replace(tableSQL), r.Replace(functionSQL)
}
