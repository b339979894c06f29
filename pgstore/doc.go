// Package pgstore enforces limitgen's shared rules on PostgreSQL, for
// services whose shared state is their database: the same GCRA as the local
// runtime (package atomicbucket) and the Redis store, decided by the database
// in one statement per check (a PL/pgSQL function, on the server's clock
// clock_timestamp(), in bigints whose units are shared.MicroUnits'), so that
// a limit holds across every instance of a service. It is its own module, on
// github.com/jackc/pgx/v5: services that never use PostgreSQL never download
// its driver.
//
// The store is a shared.Backend (the functions' calls: this package) under a
// shared.Engine (everything else, the same for every store). A generated
// package reaches it through package shared: give New's store to the
// generated package's WithStore, and its shared rules are checked here
// (Bind, Check), per request or, for rules with a lease in the policy, from
// leases. Used directly: NewRule, then Store.Check (never fails: the rule's
// failure setting decides when the database cannot), Store.CheckTier (a
// tier, all or nothing, in one statement) and Store.NewLease (a batch of
// tokens spent in the process); Options.Coalesce has concurrent checks share
// a statement and its commit.
//
// New creates the store's table and functions (Options.Table, default
// limitgen_buckets; Options.Unlogged for limits whose loss on a crash is
// acceptable), or uses those a migration made from Store.Schema
// (Options.NoCreate). Checks delete the rows of full buckets themselves, in
// the background at most every Options.SweepEvery. Every check is one
// statement in its own transaction, keeping no session state, sent in pgx's
// exec mode whatever the pool's default, so the store works behind PgBouncer
// in transaction mode. PgBouncer waits server_login_retry (15 s by default)
// before it logs in again to a PostgreSQL that restarted: checks meanwhile
// are decided by the rules' failure settings; lower it for a shorter spell.
// Package pgtest starts PostgreSQL servers for tests.
package pgstore
