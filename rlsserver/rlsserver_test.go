package rlsserver

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/overlay"
)

// The flags that name no store, two, or a store beside -local are refused
// with what to give, before anything is dialled; a policy without shared
// rules opens none.
func TestOpenStoreRefuses(t *testing.T) {
	app := App{Name: "ratelimit", SharedRules: []string{"PerUser", "Global"}}
	for _, c := range []struct {
		f    flags
		want string
	}{
		{flags{timeout: "200ms"}, "the policy's shared rules (PerUser, Global) are kept in a store every instance shares"},
		{flags{timeout: "200ms", redisAddr: "127.0.0.1:1", postgresURL: "postgres://127.0.0.1:1/x"}, "give one of -redis, -redis-cluster and -postgres"},
		{flags{timeout: "200ms", redisAddr: "127.0.0.1:1", local: true}, "-local keeps the shared rules in this process"},
		{flags{timeout: "0s", local: true}, `-store-timeout "0s": a duration above 0`},
		{flags{timeout: "soon", local: true}, `-store-timeout "soon"`},
	} {
		_, err := openStore(context.Background(), app, c.f)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("openStore(%+v) = %v, want %q", c.f, err, c.want)
		}
	}
	o, err := openStore(context.Background(), app, flags{timeout: "200ms", local: true})
	if err != nil || o.store != nil {
		t.Errorf("-local: %v, store %v; want none", err, o.store)
	}
	o, err = openStore(context.Background(), App{Name: "ratelimit"}, flags{})
	if err != nil || o.store != nil {
		t.Errorf("no shared rules: %v, store %v; want none", err, o.store)
	}
}

// -numbers names a file (applied before serving: a bad one stops the
// server), or a store's hash or table only when that store is given.
func TestNumbersSource(t *testing.T) {
	applied := false
	lims := Limits{ApplyNumbers: func(overlay.Set) error { applied = true; return nil }}
	none := &opened{}
	if _, _, err := numbersSource("redis:numbers", true, none, lims); err == nil || !strings.Contains(err.Error(), "no redis store is given") {
		t.Errorf("redis:numbers without a store: %v", err)
	}
	path := filepath.Join(t.TempDir(), "numbers.yaml")
	if err := os.WriteFile(path, []byte("rules: {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	src, refresh, err := numbersSource(path, true, none, lims)
	if err != nil || src == nil || refresh <= 0 || !applied {
		t.Errorf("a file: %v, %v, %v, applied %v", src, refresh, err, applied)
	}
	if _, _, err := numbersSource(filepath.Join(t.TempDir(), "missing.yaml"), false, none, lims); err == nil {
		t.Error("a missing file was taken")
	}
}
