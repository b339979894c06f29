// Command quickstart is a service protected by limitgen from its policy alone:
// policy.yaml, a tool line in go.mod, a go:generate directive, and the
// generated middleware in front of its handlers. Run several instances with
// -redis host:port, or with -postgres and a database's URL, and the policy's
// shared rules hold across all of them. With -grpc it also serves grpc's
// health service behind the policy's gRPC interceptors.
package main

//go:generate go tool gen -policy policy.yaml -out limits -main cmd/ratelimit
//go:generate go tool gen -policy twostores.yaml -out twostores

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	"example.com/quickstart/limits"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/limitgen/limitgen/limitprom"
	"github.com/limitgen/limitgen/pgstore"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/limitgen/limitgen/verdict"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
)

// account is what the service knows of a user.
type account struct{ name, plan string }

// accounts stands for the service's authentication: a bearer token's user and
// plan. The plan comes from records like these, never from what a client sends.
var accounts = map[string]account{"token-alice": {"alice", "free"}, "token-bob": {"bob", "pro"}}

// accountOf returns the request's account, if its token is one we issued.
func accountOf(r *http.Request) (account, bool) {
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return account{}, false
	}
	a, ok := accounts[token]
	return a, ok
}

// accountOfCall is accountOf for a gRPC call: the bearer token in its
// authorization metadata.
func accountOfCall(ctx context.Context) (account, bool) {
	v := metadata.ValueFromIncomingContext(ctx, "authorization")
	if len(v) == 0 {
		return account{}, false
	}
	token, ok := strings.CutPrefix(v[0], "Bearer ")
	if !ok {
		return account{}, false
	}
	a, ok := accounts[token]
	return a, ok
}

// newGRPC returns a gRPC server of grpc's health service behind the policy's
// interceptors over lims. It fails when the server has a method no entry of
// the policy covers: that method would go unlimited.
func newGRPC(lims *limits.Limits) (*grpc.Server, error) {
	g, err := limits.NewGRPC(lims, limits.GRPCHooks{
		UserID: func(ctx context.Context) (string, bool) {
			a, ok := accountOfCall(ctx)
			return a.name, ok
		},
		PlanOf: func(ctx context.Context) (limits.Plan, bool) {
			a, ok := accountOfCall(ctx)
			if !ok {
				return 0, false
			}
			return limits.ParsePlan(a.plan)
		},
	})
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer(g.ServerOptions()...)
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	if unlimited, _ := g.Coverage(srv); len(unlimited) > 0 {
		return nil, fmt.Errorf("gRPC methods no policy entry limits: %q", unlimited)
	}
	return srv, nil
}

// newMiddleware returns the policy's middleware over lims, with the service's
// hooks: who the user is, and their plan.
func newMiddleware(lims *limits.Limits) (*limits.Middleware, error) {
	return limits.NewMiddleware(lims, limits.Hooks{
		UserID: func(r *http.Request) (string, bool) {
			a, ok := accountOf(r)
			return a.name, ok
		},
		PlanOf: func(r *http.Request) (limits.Plan, bool) {
			a, ok := accountOf(r)
			if !ok {
				return 0, false
			}
			return limits.ParsePlan(a.plan)
		},
	})
}

// newServer returns the service's handler, limited by lims, with its
// metrics (and store's, when it has one) at GET /metrics for Prometheus.
func newServer(lims *limits.Limits, store limitprom.Store) (http.Handler, error) {
	mw, err := newMiddleware(lims)
	if err != nil {
		return nil, err
	}
	mux := mw.NewServeMux() // every handler registered on it is behind the middleware
	metrics := limitprom.Options{Doors: map[string]*verdict.Counters{verdict.DoorHTTP: mw.Config.Counters}, Tables: map[string]limitprom.Table{"Login": lims.Login}}
	if store != nil {
		metrics.Stores = map[string]limitprom.Store{"shared": store}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(limitprom.New(metrics))
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{})) // no policy route: not limited
	mux.HandleFunc("GET /hello", func(w http.ResponseWriter, r *http.Request) {
		a, _ := accountOf(r) // the middleware let the request in: it has an account
		fmt.Fprintf(w, "hello, %s\n", a.name)
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "login: checked")
	})
	if missing := mux.Unregistered(); len(missing) > 0 { // limited all the same, but the policy may be stale
		return nil, fmt.Errorf("policy routes without a handler: %q", missing)
	}
	return mux, nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8080", "the address to listen on")
	grpcAddr := flag.String("grpc", "", "an address to serve gRPC's health service on, behind the policy's interceptors")
	redisAddr := flag.String("redis", "", "a Redis server to share the shared rules' limits with other instances (host:port)")
	pgURL := flag.String("postgres", "", "a PostgreSQL database to share the shared rules' limits with other instances (postgres://user@host:port/db)")
	flag.Parse()
	lims := limits.New() // without -redis or -postgres: no store, and SharedErr says so
	var metricsStore limitprom.Store
	switch {
	case *redisAddr != "" && *pgURL != "":
		log.Fatal("-redis and -postgres: choose one store")
	case *pgURL != "":
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		pool, err := pgxpool.New(ctx, *pgURL)
		if err != nil {
			log.Fatal(err)
		}
		// Creates table limitgen_buckets and its functions; concurrent checks
		// share statements (and commits).
		store, err := pgstore.New(ctx, pool, pgstore.Options{Coalesce: 256})
		cancel()
		if err != nil {
			log.Fatal(err)
		}
		lims, metricsStore = limits.New(limits.WithStore(store)), store
	case *redisAddr != "":
		client := redis.NewClient(&redis.Options{Addr: *redisAddr, ContextTimeoutEnabled: true})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		store, err := redisstore.New(ctx, client, redisstore.Options{Coalesce: 256}) // concurrent checks share script calls
		cancel()
		if err != nil {
			log.Fatal(err) // Redis did not answer: the error names its address
		}
		lims, metricsStore = limits.New(limits.WithStore(store)), store
	}
	if err := lims.SharedErr(); err != nil {
		log.Printf("warning: %v", err) // each instance then enforces the shared limits alone
	}
	h, err := newServer(lims, metricsStore)
	if err != nil {
		log.Fatal(err)
	}
	if *grpcAddr != "" {
		srv, err := newGRPC(lims)
		if err != nil {
			log.Fatal(err)
		}
		gl, err := net.Listen("tcp", *grpcAddr)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("gRPC on", gl.Addr())
		go func() { log.Fatal(srv.Serve(gl)) }()
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("listening on", ln.Addr())
	log.Fatal(http.Serve(ln, h))
}
