package pgtest

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A server the harness starts answers on 127.0.0.1, and a logged table's
// committed row survives the server killed by its pid and started again.
func TestStartKillRestart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	exec := func(sql string) {
		t.Helper()
		c, err := pgx.Connect(ctx, s.URL())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	exec("CREATE TABLE kept (v bigint); INSERT INTO kept VALUES (42)")
	s.Restart(t)
	c, err := pgx.Connect(ctx, s.URL())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var v int64
	var version string
	if err := c.QueryRow(ctx, "SELECT v, current_setting('server_version') FROM kept").Scan(&v, &version); err != nil || v != 42 {
		t.Fatalf("after a kill and restart: %d, %v", v, err)
	}
	t.Logf("PostgreSQL %s on %s", version, s.Addr)
}
