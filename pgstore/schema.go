package pgstore

import "strings"

// The schema: one table of buckets and three PL/pgSQL functions that check
// them, all named by Options.Table (the functions are the table's name with
// "_check", "_check_tier" and "_check_each"). Store.Schema returns the SQL,
// for a migration of your own.
//
// A bucket is a row (r, k): the rule's name and the request's key (bytes, so
// any key is stored as it is; a key longer than maxKeyBytes is stored as its
// SHA-256). s and u are its theoretical arrival time (TAT): whole Unix seconds
// and units within the second (greedy rules), or the period index and slots
// (interval rules), as shared.Integers counts them, so that only the part of
// the TAT ahead of now, at most a burst's worth, is ever multiplied. full_at
// is the Unix µs from which the bucket is full again and nothing is held by
// leases: a full bucket is the same as an absent one, and Store.Sweep deletes
// such rows. e, hc and hp are the tokens leases hold (see the lease mode).
// n is the numbers the bucket was written with ("kind:emit:tau:per:pm:phase",
// as the functions take them; NULL in a row an earlier version of limitgen
// wrote, read by the checker's numbers): a check with other numbers (another
// version of the rule, during a rolling deploy) reads the bucket by them and
// carries what it holds now into its own numbers, never beyond its own burst
// (held units × emit / the writer's emit, rounded down, so that a bucket
// converted back and forth never gains; an interval bucket takes what it
// held at its grid's last boundary, since its next adds a period's tokens).
// A denied check writes nothing, so until another check writes it the bucket
// goes on by its writer's numbers.
//
// The functions decide one bucket or a tier of them, all or nothing, on the
// server's clock (clock_timestamp(): the time of the check, not of its
// transaction), and write only what changes: a denied check writes nothing
// (except the first check of a new key whose bucket starts below full, as
// the local tables create the key on such a check).
//
// Concurrency is row locks only (advisory locks, granted to a sleeping
// waiter, made a hot key's checks queue behind each wake-up). A check of one
// bucket holds at most that row's lock: it first tries the fast path (one
// UPDATE of an existing row, which takes the lock itself and judges the
// row's latest version), else reads the row FOR UPDATE; a new key's row is
// made by INSERT … ON CONFLICT DO NOTHING, and when another check made it
// first (the insert waits for that check to end) the check reads it and
// decides again. A tier locks its rows in (r, k) order, making a row that is
// absent as a marker (full_at −1, a bucket not yet started) so that it is
// locked too, and deletes the markers it did not need before it commits
// (a denied tier of new keys writes and removes them: nothing is left). A
// check of one bucket holds one lock, and tiers take theirs in one order, so
// no two checks can wait for each other.
//
// Three functions check buckets: {fn}, one bucket (every single check, and
// leases), in scalar variables, the fastest PL/pgSQL can be; {fn}_tier, a
// tier of buckets, all or nothing; and {fn}_each, coalesced checks, each
// decided on its own. All are written from the same blocks (readBlock,
// writeBlock), so a bucket is read and written by one text.
//
// {fn}(rr, kk, kind, emit, tau, debt, per, pm, phase, cost, mode, at_us,
// want, se, sg, sr): the bucket's rule name and key; its numbers (kind 1
// greedy: emit, tau, debt, perSecond, perMicro, 0; kind 2 interval: 1, tau,
// debt, period ns, tokens a boundary, the key's phase ns); the cost; the mode
// (0 decide only, 1 take, 2 refund the cost never beyond full, 3 lease, 4
// owe the cost as debt, at most want units ahead of now: six values back,
// the last 4);
// at_us (NULL: the server's clock; else the check's time in Unix µs, for
// tests); for a lease, want, and the previous grant's second, size and
// unspent tokens.
//
// {fn}_tier(rs, ks, ord, v, mode, at_us): the buckets' rule names and keys,
// their indexes (1-based) in (r, k) order, 8 values a bucket (kind … cost, as
// above), mode 0, 1 or 2, at_us.
//
// {fn}_each(rs, ks, ord, v, ci, cc, cn, at_us): the buckets as for a tier,
// then the checks as runs (shared.Runs): a run's bucket (1-based), cost and
// length. It returns, a run, how far its bucket was ahead of now before it
// and how many of its checks were admitted, then each bucket's since
// (shared.RunsReply). (An earlier version's {fn}_each took a check a value,
// without cn: its signature differs, so both live side by side during a
// rolling deploy.)
//
// The first two return {allowed, index (1-based), ahead, excess, since}: the
// bucket whose decision this is (the one that denied, or the one left with the
// fewest whole tokens, the first on a tie), how far its TAT is ahead of now
// after the check, for a denial how far the request would have put it beyond
// tau, and for an interval bucket the ns since its grid's last boundary. A
// lease returns 7 values: allowed, 1, ahead, the tokens granted (a denial:
// the excess), since, the server's second the grant is held under, and the
// µs within it.
const tableSQL = `CREATE {{UNLOGGED}}TABLE IF NOT EXISTS {{TABLE}} (
  r text NOT NULL,
  k bytea NOT NULL,
  s bigint NOT NULL,
  u bigint NOT NULL,
  full_at bigint NOT NULL,
  e bigint NOT NULL DEFAULT 0,
  hc bigint NOT NULL DEFAULT 0,
  hp bigint NOT NULL DEFAULT 0,
  n text,
  PRIMARY KEY (r, k)
) WITH (fillfactor = 70)`

// alterSQL adds n to a table an earlier version of limitgen made.
const alterSQL = `ALTER TABLE {{TABLE}} ADD COLUMN IF NOT EXISTS n text`

// bucketVars are the variables readBlock and writeBlock use beside the
// bucket's numbers (kind … cost), its row (rr, kk) and the time (us, nsec,
// usec).
const bucketVars = `
  inc bigint; since bigint; idx bigint; horizon bigint; ahead bigint; fresh bool;
  e0 bigint; c0 bigint; p0 bigint; live bigint; t bigint; m bigint; d bigint;
  wa bigint; total bigint; q bigint; hi bigint; lo bigint; full_us bigint;
  present bool; conflict bool; rec record; sig text; ov bigint[]; oa bigint; held bigint; cu bigint;`

// timeVars read the clock once, or take the test's time.
const timeVars = `
  us bigint := coalesce(at_us, (extract(epoch FROM clock_timestamp()) * 1000000)::bigint);
  nsec bigint := us / 1000000;
  usec bigint := us % 1000000;`

// readBlock reads bucket (rr, kk) with numbers kind … cost at now, locking
// its row: inc (the cost in units), since, idx and horizon (seconds after
// which nothing held is left), ahead (how far its TAT is past now, never
// below 0; a new bucket starts debt ahead), present (a row, maybe a marker),
// fresh (no row, or a marker), and e0, c0, p0: the leases' holds.
const readBlock = `
    inc := cost * emit;
    sig := {{SIG}};
    IF kind = 1 THEN
      since := 0; idx := 0;
      horizon := 2 * tau / per + 2; -- a TAT up to a burst of debt ahead beyond tau (mode 4)
    ELSE -- interval: per is the period (ns), pm the tokens a boundary adds
      idx := (us * 1000 - phase) / per;
      since := us * 1000 - phase - idx * per;
      horizon := (2 * tau / pm + 2) * per / 1000000000 + 1;
    END IF;
    ahead := debt; fresh := true; e0 := nsec; c0 := 0; p0 := 0;
    SELECT b.s, b.u, b.e, b.hc, b.hp, b.full_at, b.n INTO rec FROM {{TABLE}} b WHERE b.r = rr AND b.k = kk FOR UPDATE;
    present := FOUND;
    IF present AND rec.full_at >= 0 THEN
      fresh := false;
      IF rec.n IS NOT NULL AND rec.n <> sig THEN
        -- Written with other numbers ov (kind, emit, tau, per, pm, phase):
        -- what it holds by them (oa: its TAT ahead of the time cu in their
        -- units), carried into this check's. cu is now, or for an interval
        -- bucket the µs at or before its grid's last boundary: its next
        -- boundary adds a period's tokens, so the refill since the last one
        -- is not counted twice.
        ov := string_to_array(rec.n, ':')::bigint[];
        cu := us;
        IF kind = 2 THEN
          cu := us - (since + 999) / 1000;
        END IF;
        IF cardinality(ov) <> 6 THEN
          oa := NULL;
        ELSIF ov[1] = 1 THEN
          q := cu / 1000000;
          oa := CASE WHEN rec.s < q - (ov[3] / ov[4] + 1) THEN 0 WHEN rec.s > q + ov[3] / ov[4] + 1 THEN ov[3]
            ELSE (rec.s - q) * ov[4] + rec.u - (cu % 1000000) * ov[5] END;
        ELSE
          q := (cu * 1000 - ov[6]) / ov[4];
          oa := CASE WHEN rec.s < q - 1 - ov[3] / ov[5] THEN 0 WHEN rec.s > q + 1 + ov[3] / ov[5] THEN ov[3]
            ELSE (rec.s - q) * ov[5] + rec.u END;
        END IF;
        IF oa IS NULL THEN
          ahead := tau; -- numbers it cannot read: it holds nothing
        ELSE
          held := ov[3] - least(greatest(oa, 0), ov[3]);
          ahead := tau - least(div(held::numeric * emit, ov[2]), tau)::bigint;
        END IF;
        IF ahead > 0 THEN
          -- The row is kept at least until the bucket is full by these
          -- numbers too, whether or not this check writes it: a row swept
          -- when full by its writer's smaller burst would be new, and full,
          -- to a version with a larger one.
          {{FULL_US:ahead}}
          UPDATE {{TABLE}} b SET full_at = full_us WHERE b.r = rr AND b.k = kk AND b.full_at < full_us;
        END IF;
      ELSIF kind = 1 THEN
        ahead := {{AHEAD:rec}};
      ELSIF rec.s < idx - 1 - tau / pm THEN
        ahead := 0;
      ELSIF rec.s > idx + 1 + 2 * tau / pm THEN
        ahead := tau;
      ELSE
        ahead := greatest((rec.s - idx) * pm + rec.u, 0);
      END IF;
      IF rec.hc > 0 OR rec.hp > 0 THEN
        -- Tokens leases hold: granted in the server's second e (hc) and e - 1
        -- (hp), each grant valid until the start of the second after next.
        -- While they may be spent elsewhere the bucket holds at most its
        -- burst minus them; when a grant expires the bucket goes on as if all
        -- of it had been spent at that moment.
        e0 := rec.e; c0 := rec.hc; p0 := rec.hp; live := c0 + p0;
        IF nsec >= e0 + 1 THEN
          t := e0 + 1; -- a bigint: FOR's loop variable would be an integer
          WHILE t <= least(e0 + 2, nsec) LOOP
            IF nsec - t > horizon THEN
              d := tau + 1;
            ELSIF kind = 1 THEN
              d := (nsec - t) * per + usec * pm;
            ELSE
              d := (idx - (t * 1000000000 - phase) / per) * pm;
            END IF;
            IF t = e0 + 1 THEN
              m := (c0 + p0) * emit - d;
            ELSE
              m := c0 * emit - d;
            END IF;
            ahead := greatest(ahead, m);
            t := t + 1;
          END LOOP;
          IF nsec = e0 + 1 THEN
            live := c0; p0 := c0;
          ELSE
            live := 0; p0 := 0;
          END IF;
          c0 := 0; e0 := nsec;
        END IF;
        ahead := greatest(ahead, live * emit);
      END IF;
    END IF;`

// aheadExpr is how far a greedy bucket's TAT (row X) is past now, never
// below 0; a TAT more than a burst behind is 0 and one more than a burst ahead
// (the clock went back) is tau: the bucket is empty until the clock catches
// up. Only a TAT within the horizon is multiplied, so nothing overflows.
const aheadExpr = `CASE WHEN X.s < nsec - horizon THEN 0 WHEN X.s > nsec + horizon THEN tau
    ELSE greatest((X.s - nsec) * per + (X.u - usec * pm), 0) END`

// fastPath is a greedy take of an existing bucket that no lease holds
// tokens of and that holds the cost: one UPDATE, which takes the row's lock
// itself and, having waited for it, judges the row's latest version (the
// slow path reads rows FOR UPDATE, so neither writes over the other). The
// time is the one read before the wait: a later state judged at an earlier
// time shows fewer tokens, never more.
const fastPath = `
  IF mode = 1 AND kind = 1 AND cost > 0 AND cost * emit <= tau THEN
    inc := cost * emit;
    horizon := 2 * tau / per + 2;
    sig := {{SIG}};
    UPDATE {{TABLE}} b SET
      s = nsec + (usec * pm + inc + {{AHEAD:b}}) / per,
      u = (usec * pm + inc + {{AHEAD:b}}) % per,
      full_at = us + (inc + {{AHEAD:b}} + pm - 1) / pm,
      n = sig
    WHERE b.r = rr AND b.k = kk AND b.hc = 0 AND b.hp = 0 AND (b.n = sig OR b.n IS NULL) AND inc + {{AHEAD:b}} <= tau
    RETURNING (b.s - nsec) * per + b.u - usec * pm INTO wa;
    IF FOUND THEN
      RETURN ARRAY[1, 1, wa, 0, 0];
    END IF;
  END IF;`

// writeBlock stores bucket (rr, kk) with its TAT wa ahead of now, or deletes
// its row when it is full and no lease holds anything (full is absent).
// full_at is when it is full again, and no grant can still be held. A row
// that is not present is inserted unless another check made it meanwhile
// (conflict: then nothing is written).
const writeBlock = `
    conflict := false;
    IF wa <= 0 AND c0 + p0 = 0 THEN
      IF present THEN
        DELETE FROM {{TABLE}} b WHERE b.r = rr AND b.k = kk;
      END IF;
    ELSE
      IF kind = 1 THEN
        total := usec * pm + wa;
        q := total / per;
        hi := nsec + q; lo := total - q * per;
      ELSE
        q := wa / pm;
        hi := idx + q; lo := wa - q * pm;
      END IF;
      {{FULL_US:wa}}
      IF c0 + p0 > 0 THEN
        full_us := greatest(full_us, (e0 + 2 + horizon) * 1000000);
      END IF;
      IF present THEN
        UPDATE {{TABLE}} b SET s = hi, u = lo, full_at = full_us, e = e0, hc = c0, hp = p0, n = sig
          WHERE b.r = rr AND b.k = kk;
      ELSE
        INSERT INTO {{TABLE}} (r, k, s, u, full_at, e, hc, hp, n)
          VALUES (rr, kk, hi, lo, full_us, e0, c0, p0, sig) ON CONFLICT (r, k) DO NOTHING;
        conflict := NOT FOUND;
      END IF;
    END IF;`

// fullUsBlock sets full_us, when a bucket X units ahead of now is full
// again: by its rate under greedy refill, at the boundary that brings its
// last slot under interval refill. It overwrites q.
const fullUsBlock = `IF kind = 1 THEN
        full_us := us + (X + pm - 1) / pm;
      ELSE
        q := X / pm;
        IF X - q * pm > 0 THEN
          q := q + 1;
        END IF;
        full_us := us + (q * per - since + 999) / 1000;
      END IF;`

// sigExpr is the bucket's numbers as its row's n keeps them.
const sigExpr = `kind || ':' || emit || ':' || tau || ':' || per || ':' || pm || ':' || phase`

// creates is whether a check makes a new bucket's row although it takes
// nothing: the first check of a key whose bucket starts below full, by a
// check that could take tokens (the local tables make the key on such a
// check, allowed or not).
const creates = `take AND fresh AND debt > 0 AND cost > 0 AND inc <= tau`

const oneSQL = `CREATE OR REPLACE FUNCTION {{FUNC}}(rr text, kk bytea, kind bigint, emit bigint, tau bigint,
  debt bigint, per bigint, pm bigint, phase bigint, cost bigint, mode int, at_us bigint,
  want bigint, se bigint, sg bigint, sr bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE{{TIMEVARS}}{{BUCKETVARS}}
  take bool := mode = 1;
  changed bool; spare bigint; granted bigint; res bigint[]; tries int := 0;
BEGIN{{FAST}}
  LOOP
    IF at_us IS NULL THEN -- the time after any wait for the row
      us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
      nsec := us / 1000000; usec := us % 1000000;
    END IF;
    {{READ}}
    wa := NULL;
    IF mode = 3 THEN
      -- A lease: settle the lessee's previous grant (while it is valid, what
      -- was not spent comes back), then grant at least the cost and up to
      -- want tokens, never more than half of what the bucket holds beyond the
      -- cost; want 0 asks for nothing (a release).
      changed := false;
      IF sg > 0 AND (se = e0 OR se = e0 - 1) THEN
        IF se = e0 THEN
          c0 := c0 - least(sg, c0);
        ELSE
          p0 := p0 - least(sg, p0);
        END IF;
        ahead := greatest(ahead - least(sr, sg) * emit, 0, (c0 + p0) * emit);
        changed := true;
      END IF;
      IF want = 0 THEN
        res := ARRAY[1, 1, ahead, 0, since, e0, usec];
        IF changed THEN
          wa := ahead;
        END IF;
      ELSIF ahead + inc > tau THEN
        res := ARRAY[0, 1, ahead, ahead + inc - tau, since, e0, usec];
        IF changed OR (fresh AND debt > 0 AND cost > 0 AND inc <= tau) THEN
          wa := ahead;
        END IF;
      ELSE
        spare := (tau - ahead - inc) / emit;
        granted := cost + greatest(least(spare / 2, want - cost), 0);
        c0 := c0 + granted;
        res := ARRAY[1, 1, ahead + granted * emit, granted, since, e0, usec];
        IF granted > 0 OR changed THEN
          wa := ahead + granted * emit;
        END IF;
      END IF;
    ELSIF mode = 4 THEN
      -- A settlement's excess owed as debt: the TAT moves ahead by the cost,
      -- beyond what a check may take, never past want units ahead of now
      -- and never back. Six values, so that a caller can tell this
      -- version's answer from an earlier function's.
      IF want - ahead <= 0 THEN
        RETURN ARRAY[1, 1, ahead, inc, since, 4];
      END IF;
      wa := ahead + least(inc, want - ahead);
      res := ARRAY[1, 1, wa, inc - (wa - ahead), since, 4];
    ELSIF mode = 2 THEN
      wa := greatest(ahead - inc, (c0 + p0) * emit, 0);
      IF wa <= 0 AND NOT present THEN
        wa := NULL;
      END IF;
      res := ARRAY[1, 1, 0, 0, 0];
    ELSIF ahead + inc > tau THEN
      IF {{CREATES}} THEN
        wa := debt;
      END IF;
      res := ARRAY[0, 1, ahead, ahead + inc - tau, since];
    ELSE
      IF take AND inc > 0 THEN
        wa := ahead + inc;
      ELSIF {{CREATES}} THEN
        wa := debt;
      END IF;
      res := ARRAY[1, 1, ahead + inc, 0, since];
    END IF;
    IF wa IS NULL THEN
      RETURN res;
    END IF;
    {{WRITE}}
    IF NOT conflict THEN
      RETURN res;
    END IF;
    -- Another check made the row after this one found none: it is committed
    -- now (the insert waited for it); decide again on it.
    tries := tries + 1;
    IF tries > 3 THEN
      RAISE EXCEPTION 'limitgen: bucket % of rule % made and removed by other checks 3 times', kk, rr;
    END IF;
  END LOOP;
END
$fn$`

const tierSQL = `CREATE OR REPLACE FUNCTION {{FUNC}}_tier(rs text[], ks bytea[], ord int[], v bigint[], mode int, at_us bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE{{TIMEVARS}}{{BUCKETVARS}}
  n int := cardinality(rs);
  take bool := mode = 1;
{{ROWVARS}}
  best int; best_left bigint; lft bigint; res bigint[];
BEGIN
  IF n IS NULL OR n = 0 OR cardinality(v) <> 8 * n OR cardinality(ord) <> n OR mode NOT IN (0, 1, 2) THEN
    RAISE EXCEPTION 'limitgen: % buckets with % values and % in order, in mode %', n, cardinality(v), cardinality(ord), mode;
  END IF;
  FOR j IN 1..n LOOP
    markers[j] := false;
  END LOOP;
  IF mode <> 0 THEN -- every row locked in (r, k) order, a marker made for an absent one
    {{LOCKROWS}}
  END IF;
  {{READROWS}}
  IF mode = 2 THEN
    FOR i IN 1..n LOOP
      was[i] := greatest(aheads[i] - incs[i], (cs[i] + ps[i]) * v[(i - 1) * 8 + 2], 0);
      IF was[i] <= 0 AND freshes[i] AND NOT markers[i] THEN
        was[i] := NULL;
      END IF;
    END LOOP;
    res := ARRAY[1, 1, 0, 0, 0];
  ELSE
    FOR i IN 1..n LOOP
      tau := v[(i - 1) * 8 + 3];
      IF aheads[i] + incs[i] > tau THEN
        FOR j IN 1..i LOOP
          fresh := freshes[j]; debt := v[(j - 1) * 8 + 4]; cost := v[(j - 1) * 8 + 8]; inc := incs[j]; tau := v[(j - 1) * 8 + 3];
          IF {{CREATES}} THEN
            was[j] := debt;
          END IF;
        END LOOP;
        res := ARRAY[0, i, aheads[i], aheads[i] + incs[i] - v[(i - 1) * 8 + 3], sinces[i]];
        EXIT;
      END IF;
    END LOOP;
    IF res IS NULL THEN
      best := 1;
      FOR i IN 1..n LOOP
        fresh := freshes[i]; debt := v[(i - 1) * 8 + 4]; cost := v[(i - 1) * 8 + 8]; inc := incs[i]; tau := v[(i - 1) * 8 + 3];
        IF take AND inc > 0 THEN
          was[i] := aheads[i] + inc;
        ELSIF {{CREATES}} THEN
          was[i] := debt;
        END IF;
        lft := (tau - aheads[i] - inc) / v[(i - 1) * 8 + 2];
        IF i = 1 OR lft < best_left THEN
          best := i; best_left := lft;
        END IF;
      END LOOP;
      res := ARRAY[1, best, aheads[best] + incs[best], 0, sinces[best]];
    END IF;
  END IF;
  {{WRITEROWS}}
  RETURN res;
END
$fn$`

const eachSQL = `CREATE OR REPLACE FUNCTION {{FUNC}}_each(rs text[], ks bytea[], ord int[], v bigint[], ci int[], cc bigint[], cn int[], at_us bigint)
RETURNS bigint[] LANGUAGE plpgsql AS $fn$
DECLARE{{TIMEVARS}}{{BUCKETVARS}}
  n int := cardinality(rs);
  runs int := cardinality(ci);
  take bool := true;
{{ROWVARS}}
  rlen bigint; took bigint;
  res bigint[];
BEGIN
  IF n IS NULL OR n = 0 OR cardinality(v) <> 8 * n OR cardinality(ord) <> n OR runs IS NULL
      OR cardinality(cc) <> runs OR cardinality(cn) <> runs THEN
    RAISE EXCEPTION 'limitgen: % buckets with % values and % in order, % runs with % costs and % lengths', n, cardinality(v), cardinality(ord), runs, cardinality(cc), cardinality(cn);
  END IF;
  FOR j IN 1..n LOOP
    markers[j] := false;
  END LOOP;
  {{LOCKROWS}}
  {{READROWS}}
  -- The checks come as runs (a bucket, a cost, how many checks in a row),
  -- each decided at once as its checks would be one by one, in order: the
  -- checks that fit are admitted, each taking the cost, and the rest are
  -- denied on the bucket the last admitted one left. Checks of one bucket see
  -- each other's takes; a bucket is written once, after its last run. The
  -- reply: a run, how far its bucket was ahead before it and how many it
  -- admitted; then each bucket's since.
  res := array_fill(0::bigint, ARRAY[2 * runs + n]);
  FOR j IN 1..runs LOOP
    i := ci[j]; cost := cc[j]; rlen := cn[j];
    o := (i - 1) * 8;
    emit := v[o + 2]; tau := v[o + 3]; debt := v[o + 4];
    inc := cost * emit; fresh := freshes[i]; ahead := aheads[i];
    IF ahead + inc > tau THEN
      took := 0;
    ELSIF inc = 0 THEN
      took := rlen;
    ELSE
      took := least((tau - ahead) / inc, rlen);
    END IF;
    IF took > 0 AND inc > 0 THEN
      aheads[i] := ahead + took * inc;
      was[i] := aheads[i]; freshes[i] := false;
    ELSIF took < rlen AND {{CREATES}} THEN -- a new bucket below full starts with its first check
      was[i] := ahead; freshes[i] := false;
    END IF;
    res[2 * j - 1] := ahead; res[2 * j] := took;
  END LOOP;
  FOR i IN 1..n LOOP
    res[2 * runs + i] := sinces[i];
  END LOOP;
  {{WRITEROWS}}
  RETURN res;
END
$fn$`

// lockRows locks a tier's or a batch's rows in (r, k) order (ord), making a
// marker row for an absent one so that it is locked too (markers[i]).
const lockRows = `
  FOREACH i IN ARRAY ord LOOP
    LOOP
      PERFORM 1 FROM {{TABLE}} b WHERE b.r = rs[i] AND b.k = ks[i] FOR UPDATE;
      EXIT WHEN FOUND;
      INSERT INTO {{TABLE}} (r, k, s, u, full_at) VALUES (rs[i], ks[i], 0, 0, -1) ON CONFLICT (r, k) DO NOTHING;
      IF FOUND THEN
        markers[i] := true;
        EXIT;
      END IF;
    END LOOP;
  END LOOP;`

// rowVars are the variables of a function over many rows (rs, ks, v):
// readRows fills the arrays, one entry a row, and writeRows writes each row
// whose was is set.
const rowVars = `
  rr text; kk bytea; kind bigint; emit bigint; tau bigint; debt bigint; per bigint; pm bigint; phase bigint; cost bigint;
  aheads bigint[]; incs bigint[]; sinces bigint[]; idxs bigint[]; horizons bigint[]; freshes bool[]; markers bool[];
  es bigint[]; cs bigint[]; ps bigint[]; was bigint[]; sigs text[];
  o int; i int; j int;`

// readRows reads every row (readBlock) at the time after the waits for the
// rows' locks, into the arrays; was starts unset.
const readRows = `
  IF at_us IS NULL THEN -- the time after the waits for the rows
    us := (extract(epoch FROM clock_timestamp()) * 1000000)::bigint;
    nsec := us / 1000000; usec := us % 1000000;
  END IF;
  FOR i IN 1..n LOOP
    o := (i - 1) * 8;
    rr := rs[i]; kk := ks[i];
    kind := v[o + 1]; emit := v[o + 2]; tau := v[o + 3]; debt := v[o + 4];
    per := v[o + 5]; pm := v[o + 6]; phase := v[o + 7]; cost := v[o + 8];
    {{READ}}
    aheads[i] := ahead; incs[i] := inc; sinces[i] := since; idxs[i] := idx; horizons[i] := horizon;
    freshes[i] := fresh; es[i] := e0; cs[i] := c0; ps[i] := p0; was[i] := NULL; sigs[i] := sig;
  END LOOP;`

// writeRows writes each row whose was is set with its TAT was ahead of now
// (writeBlock), and deletes the markers no check needed.
const writeRows = `
  FOR i IN 1..n LOOP
    IF was[i] IS NULL THEN
      IF markers[i] THEN -- not needed: nothing is left of it
        DELETE FROM {{TABLE}} b WHERE b.r = rs[i] AND b.k = ks[i];
      END IF;
      CONTINUE;
    END IF;
    o := (i - 1) * 8;
    rr := rs[i]; kk := ks[i];
    kind := v[o + 1]; per := v[o + 5]; pm := v[o + 6];
    idx := idxs[i]; since := sinces[i]; horizon := horizons[i];
    e0 := es[i]; c0 := cs[i]; p0 := ps[i]; wa := was[i]; sig := sigs[i];
    present := true; -- locked above: a row, or a marker
    {{WRITE}}
  END LOOP;`

// schema returns the SQL that creates table, and its check functions fn,
// fn_tier and fn_each.
func schema(table, fn string, unlogged bool) []string {
	u := ""
	if unlogged {
		u = "UNLOGGED "
	}
	rows := strings.NewReplacer("{{ROWVARS}}", rowVars, "{{LOCKROWS}}", lockRows, "{{READROWS}}", readRows, "{{WRITEROWS}}", writeRows)
	blocks := strings.NewReplacer("{{TIMEVARS}}", timeVars, "{{BUCKETVARS}}", bucketVars, "{{FAST}}", fastPath,
		"{{READ}}", readBlock, "{{WRITE}}", writeBlock, "{{CREATES}}", creates)
	ahead := strings.NewReplacer("{{AHEAD:rec}}", strings.ReplaceAll(aheadExpr, "X.", "rec."),
		"{{AHEAD:b}}", strings.ReplaceAll(aheadExpr, "X.", "b."), "{{SIG}}", sigExpr,
		"{{FULL_US:ahead}}", strings.ReplaceAll(fullUsBlock, "X", "ahead"), "{{FULL_US:wa}}", strings.ReplaceAll(fullUsBlock, "X", "wa"))
	r := strings.NewReplacer("{{UNLOGGED}}", u, "{{TABLE}}", table, "{{FUNC}}", fn)
	function := func(sql string) string { return r.Replace(ahead.Replace(blocks.Replace(rows.Replace(sql)))) }
	return []string{r.Replace(tableSQL), r.Replace(alterSQL), function(oneSQL), function(tierSQL), function(eachSQL)}
}
