// Package rlsserver is the ready server a generated package's `gen -main`
// command runs: Envoy's rate-limit service (envoy.service.ratelimit.v3) for
// the policy's rls: section, with grpc's health service beside it,
// Prometheus's /metrics when asked, run-time numbers from a file or the
// store, and a graceful stop on SIGINT or SIGTERM. The generated main says
// only what is its policy's (App); everything else is here, configured by
// flags or their LIMITGEN_ environment variables (the command's -h lists
// them).
package rlsserver

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/limitprom"
	"github.com/limitgen/limitgen/limitrls"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/overlay/yamlfile"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/shared"
	"github.com/limitgen/limitgen/verdict"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// App is what a generated main gives the server: its name, its policy's
// shared rules, and how to make its limits.
type App struct {
	// Name is the command's name, which starts its log lines ("ratelimit").
	Name string
	// SharedRules names the policy's shared rules; none: the server has no
	// store flags.
	SharedRules []string
	// New makes the limits with store keeping the shared rules (nil: kept
	// in this process, with -local, or the policy has none).
	New func(store shared.Store) Limits
}

// Limits is a generated package's limits as the server serves them.
type Limits struct {
	// ApplyNumbers puts run-time numbers in force (the package's
	// Limits.ApplyNumbers).
	ApplyNumbers func(overlay.Set) error
	// Service is the rate-limit service, and Config its door's settings
	// (the counters and the unmatched count /metrics reads): the package's
	// NewRLS(lims).Service() and its Config.
	Service rlsv3.RateLimitServiceServer
	Config  *limitrls.Config
}

// flags are the server's settings.
type flags struct {
	listen, metrics, certFile, keyFile                     string
	redisAddr, redisCluster, postgresURL, numbers, timeout string
	local                                                  bool
}

// Main parses the flags, serves until SIGINT or SIGTERM, and exits the
// process with a message on anything it cannot do.
func Main(app App) {
	f := parseFlags(len(app.SharedRules) > 0)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, app, f); err != nil {
		log.Fatalf("%s: %v", app.Name, err)
	}
	log.Printf("%s: stopped", app.Name)
}

// parseFlags reads the flags, each defaulting to its LIMITGEN_ variable.
func parseFlags(stores bool) flags {
	var f flags
	str := func(p *string, name, env, def, usage string) {
		flag.StringVar(p, name, envOr(env, def), usage+" ($"+env+")")
	}
	str(&f.listen, "listen", "LIMITGEN_LISTEN", "127.0.0.1:8081", "the address to serve Envoy's rate-limit service (gRPC) on")
	str(&f.metrics, "metrics", "LIMITGEN_METRICS", "", "the address to serve Prometheus's /metrics on; empty serves none")
	str(&f.certFile, "tls-cert", "LIMITGEN_TLS_CERT", "", "the server's TLS certificate (PEM); empty serves without TLS")
	str(&f.keyFile, "tls-key", "LIMITGEN_TLS_KEY", "", "the server's TLS key (PEM)")
	if !stores {
		str(&f.numbers, "numbers", "LIMITGEN_NUMBERS", "", "run-time numbers: an overlay file (its path; read every second); empty keeps the policy's")
		flag.Parse()
		return f
	}
	str(&f.redisAddr, "redis", "LIMITGEN_REDIS", "", "the Redis server (host:port) that keeps the shared rules")
	str(&f.redisCluster, "redis-cluster", "LIMITGEN_REDIS_CLUSTER", "", "the nodes of a Redis Cluster (host:port, comma-separated; one is enough) that keeps the shared rules")
	str(&f.postgresURL, "postgres", "LIMITGEN_POSTGRES", "", "the PostgreSQL database (a URL) that keeps the shared rules")
	str(&f.numbers, "numbers", "LIMITGEN_NUMBERS", "", "run-time numbers: an overlay file (its path; read every second), or the store's numbers hash (redis:NAME) or table (postgres:NAME); empty keeps the policy's")
	str(&f.timeout, "store-timeout", "LIMITGEN_STORE_TIMEOUT", "200ms", "the most a decision waits for the store; then the rule's on_failure decides (give Envoy's filter a longer timeout: its default is 20ms)")
	flag.BoolVar(&f.local, "local", envOr("LIMITGEN_LOCAL", "") == "true", "keep the shared rules in this process, without a store: for one instance only, as each instance would admit the whole limit ($LIMITGEN_LOCAL=true)")
	flag.Parse()
	return f
}

// run serves until ctx is done.
func run(ctx context.Context, app App, f flags) error {
	st, err := openStore(ctx, app, f)
	if err != nil {
		return err
	}
	defer st.close()
	lims := app.New(st.store)
	if f.numbers != "" {
		src, refresh, err := numbersSource(f.numbers, len(app.SharedRules) > 0, st, lims)
		if err != nil {
			return err
		}
		// Watch applies the source's numbers at once and on every change,
		// and logs what it cannot read or apply (the numbers in force stay).
		go overlay.Watch(ctx, src, lims.ApplyNumbers, overlay.WatchOptions{Refresh: refresh})
	}
	var serverOpts []grpc.ServerOption
	if f.certFile != "" {
		creds, err := credentials.NewServerTLSFromFile(f.certFile, f.keyFile)
		if err != nil {
			return fmt.Errorf("TLS: %w", err)
		}
		serverOpts = append(serverOpts, grpc.Creds(creds))
	}
	srv := grpc.NewServer(serverOpts...)
	rlsv3.RegisterRateLimitServiceServer(srv, lims.Service)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	lis, err := net.Listen("tcp", f.listen)
	if err != nil {
		return err
	}
	if f.metrics != "" {
		ms, err := serveMetrics(f.metrics, lims.Config, st.stats, app.Name)
		if err != nil {
			return err
		}
		defer ms.Close()
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	log.Printf("%s: serving Envoy's rate-limit service on %s", app.Name, lis.Addr())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	// Stopping: tell health checkers first, let the calls in flight finish
	// (10 s at most).
	hs.Shutdown()
	stopped := make(chan struct{})
	go func() {
		srv.GracefulStop()
		close(stopped)
	}()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		srv.Stop()
	}
	return nil
}

// opened is the store the flags name, its clients, and what /metrics reads
// of it.
type opened struct {
	store  shared.Store
	client redis.UniversalClient
	pool   *pgxpool.Pool
	stats  map[string]limitprom.Store
	closes []func()
}

func (o *opened) close() {
	for i := len(o.closes) - 1; i >= 0; i-- {
		o.closes[i]()
	}
}

// openStore opens the one store the flags name, or none for -local or a
// policy without shared rules.
func openStore(ctx context.Context, app App, f flags) (*opened, error) {
	o := &opened{stats: map[string]limitprom.Store{}}
	if len(app.SharedRules) == 0 {
		return o, nil
	}
	given := 0
	for _, s := range []string{f.redisAddr, f.redisCluster, f.postgresURL} {
		if s != "" {
			given++
		}
	}
	timeout, err := time.ParseDuration(f.timeout)
	switch {
	case err != nil || timeout <= 0:
		return nil, fmt.Errorf("-store-timeout %q: a duration above 0, such as 200ms", f.timeout)
	case given > 1:
		return nil, errors.New("give one of -redis, -redis-cluster and -postgres: the shared rules live in one store")
	case given > 0 && f.local:
		return nil, errors.New("-local keeps the shared rules in this process; it goes with no store")
	case given == 0 && !f.local:
		return nil, fmt.Errorf("the policy's shared rules (%s) are kept in a store every instance shares: give -redis, -redis-cluster or -postgres (or -local to keep them in this process: for one instance only)", strings.Join(app.SharedRules, ", "))
	}
	switch {
	case f.redisAddr != "":
		o.client = redis.NewClient(&redis.Options{Addr: f.redisAddr, ContextTimeoutEnabled: true})
	case f.redisCluster != "":
		o.client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(f.redisCluster, ","), ContextTimeoutEnabled: true})
	}
	if o.client != nil {
		o.closes = append(o.closes, func() { o.client.Close() })
		st, err := redisstore.New(ctx, o.client, redisstore.Options{Coalesce: 256, Timeout: timeout})
		if err != nil {
			o.close()
			return nil, fmt.Errorf("redis %s%s: %w", f.redisAddr, f.redisCluster, err)
		}
		o.closes = append(o.closes, st.Close)
		o.store, o.stats["redis"] = st, st
	}
	if f.postgresURL != "" {
		if o.pool, err = pgxpool.New(ctx, f.postgresURL); err != nil {
			return nil, fmt.Errorf("postgres: %w", err)
		}
		o.closes = append(o.closes, o.pool.Close)
		st, err := pgstore.New(ctx, o.pool, pgstore.Options{Coalesce: 256, Timeout: timeout})
		if err != nil {
			o.close()
			return nil, fmt.Errorf("postgres: %w", err)
		}
		o.closes = append(o.closes, st.Close)
		o.store, o.stats["postgres"] = st, st
	}
	return o, nil
}

// numbersSource is the source -numbers names: a file, whose numbers are in
// force before the first call is served (or the server does not start), or
// the store's hash (redis:NAME) or table (postgres:NAME) when the policy
// has shared rules.
func numbersSource(numbers string, stores bool, st *opened, lims Limits) (overlay.Source, time.Duration, error) {
	switch kind, name, _ := strings.Cut(numbers, ":"); {
	case !stores:
	case kind == "redis" && st.client != nil:
		return redisstore.NewNumbersSource(st.client, name), 0, nil
	case kind == "postgres" && st.pool != nil:
		s, err := pgstore.NewNumbersSource(st.pool, name)
		if err != nil {
			return nil, 0, fmt.Errorf("-numbers %s: %w", numbers, err)
		}
		return s, 0, nil
	case kind == "redis" || kind == "postgres":
		return nil, 0, fmt.Errorf("-numbers %s: no %s store is given", numbers, kind)
	}
	f := yamlfile.New(numbers)
	if err := f.Apply(lims.ApplyNumbers); err != nil {
		return nil, 0, fmt.Errorf("-numbers: %w", err)
	}
	return f, time.Second, nil
}

// serveMetrics serves Prometheus's /metrics on addr: the door's decisions
// and unmatched calls, and the stores' counters.
func serveMetrics(addr string, c *limitrls.Config, stores map[string]limitprom.Store, name string) (*http.Server, error) {
	reg := prometheus.NewRegistry()
	if err := reg.Register(limitprom.New(limitprom.Options{
		Doors:     map[string]*verdict.Counters{verdict.DoorRLS: c.Counters},
		Stores:    stores,
		Unmatched: map[string]func() uint64{verdict.DoorRLS: c.Unmatched},
	})); err != nil {
		return nil, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	ms := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := ms.ListenAndServe(); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Fatalf("%s: metrics: %v", name, err)
		}
	}()
	return ms, nil
}

// envOr is the environment variable name, or def when it is not set.
func envOr(name, def string) string {
	if v, ok := os.LookupEnv(name); ok {
		return v
	}
	return def
}
