package bench

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	envoyrunner "github.com/envoyproxy/ratelimit/src/service_cmd/runner"
	envoysettings "github.com/envoyproxy/ratelimit/src/settings"
	"github.com/limitgen/limitgen/bench/rlslimits"
	"github.com/limitgen/limitgen/redisstore"
	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// envoyConfig is envoyproxy/ratelimit's configuration of the limits
// bench/rlspolicy.yaml sets: per value of the entry k, so high that every
// decision admits (its fixed window of a second; its most, 2³²−1); per value
// of the entry edge, 10 a second (TestAcrossAWindowEdge).
const envoyConfig = `domain: bench
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
  - key: edge
    rate_limit:
      unit: second
      requests_per_unit: 10
`

// rlsServers are the rate-limit services measured, on one redis-server:
// limitgen's generated for bench/rlspolicy.yaml (Redis, coalesced),
// envoyproxy/ratelimit (Redis, its fixed windows, the pipelining it offers:
// REDIS_PIPELINE_WINDOW), and a service that answers OK without deciding
// anything (the gRPC round trip's ceiling). They stop when the benchmark
// that started them ends.
type rlsServers struct {
	redis                 string
	limitgen, envoy, noop string
}

type noopRLS struct {
	rlsv3.UnimplementedRateLimitServiceServer
}

var okResponse = &rlsv3.RateLimitResponse{OverallCode: rlsv3.RateLimitResponse_OK}

func (noopRLS) ShouldRateLimit(context.Context, *rlsv3.RateLimitRequest) (*rlsv3.RateLimitResponse, error) {
	return okResponse, nil
}

func serveRLS(b testing.TB, svc rlsv3.RateLimitServiceServer) string {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer()
	rlsv3.RegisterRateLimitServiceServer(srv, svc)
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	b.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func freePort(b testing.TB) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func startRLS(b testing.TB) *rlsServers {
	s := &rlsServers{}
	fail := func(err error) { b.Fatal(err) }
	{
		s.redis = benchRedis(b)
		// limitgen: the generated service over a coalescing Redis store.
		client := redis.NewClient(&redis.Options{Addr: s.redis, ContextTimeoutEnabled: true, PoolSize: 64})
		b.Cleanup(func() { client.Close() })
		st, err := redisstore.New(context.Background(), client, redisstore.Options{Coalesce: 256})
		if err != nil {
			fail(err)
		}
		b.Cleanup(st.Close)
		svc := rlslimits.NewRLS(rlslimits.New(rlslimits.WithStore(st)))
		s.limitgen = serveRLS(b, svc.Service())
		s.noop = serveRLS(b, noopRLS{})
		// envoyproxy/ratelimit, in this process, configured by its
		// environment variables.
		root := b.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "ratelimit", "config"), 0o755); err != nil {
			fail(err)
		}
		if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", "bench.yaml"), []byte(envoyConfig), 0o644); err != nil {
			fail(err)
		}
		grpcPort := freePort(b)
		for k, v := range map[string]string{
			"HOST": "127.0.0.1", "PORT": strconv.Itoa(freePort(b)), "DEBUG_HOST": "127.0.0.1", "DEBUG_PORT": strconv.Itoa(freePort(b)),
			"GRPC_HOST": "127.0.0.1", "GRPC_PORT": strconv.Itoa(grpcPort),
			"USE_STATSD": "false", "DISABLE_STATS": "true", "LOG_LEVEL": "ERROR", "RUNTIME_ROOT": root, "RUNTIME_SUBDIRECTORY": "ratelimit",
			"RUNTIME_WATCH_ROOT": "false", "BACKEND_TYPE": "redis", "REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": s.redis,
			"REDIS_POOL_SIZE": "64", "REDIS_PIPELINE_WINDOW": "150us",
		} {
			b.Setenv(k, v)
		}
		r := envoyrunner.NewRunner(envoysettings.NewSettings())
		go r.Run()
		b.Cleanup(r.Stop)
		s.envoy = "127.0.0.1:" + strconv.Itoa(grpcPort)
		// Wait for its configuration to be loaded: a first decision.
		c := rlsClient(b, s.envoy)
		for deadline := time.Now().Add(20 * time.Second); ; {
			resp, err := c.ShouldRateLimit(context.Background(), rlsRequest("warm"))
			if err == nil && resp.OverallCode == rlsv3.RateLimitResponse_OK && len(resp.Statuses) == 1 && resp.Statuses[0].CurrentLimit != nil {
				break
			}
			if time.Now().After(deadline) {
				fail(fmt.Errorf("envoyproxy/ratelimit did not start: %v, %v", resp, err))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return s
}

func rlsClient(b testing.TB, addr string) rlsv3.RateLimitServiceClient {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cc.Close() })
	return rlsv3.NewRateLimitServiceClient(cc)
}

func rlsRequest(value string) *rlsv3.RateLimitRequest {
	return rlsDomainRequest("bench", value)
}

func rlsDomainRequest(domain, value string) *rlsv3.RateLimitRequest {
	return &rlsv3.RateLimitRequest{Domain: domain, Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "k", Value: value}}}}}
}

// BenchmarkRLS is Envoy's rate-limit service as Envoy calls it: 64 callers
// on one gRPC connection asking ShouldRateLimit of one descriptor, the same
// one (keys=1, a hot descriptor) or one of 1e4, over loopback, against
// limitgen's generated service (Redis, coalesced), envoyproxy/ratelimit
// (Redis, fixed windows, its pipelining) and a service that decides nothing
// (the ceiling: a gRPC round trip); limitgen-leased is limitgen's service
// deciding the same limit from leases of 10,000 tokens (domain leased: an
// instance spends a key's grant in the process, and asks Redis again as it
// runs out); limitgen-local is limitgen's service deciding the same limit
// in the process (domain local), against the ceiling. Metrics: decisions/s, p50-µs and p99-µs
// as the callers see them, the Redis commands a decision (cmds/op) and
// Redis's time, and cpu-µs/op, the whole process's CPU a decision (client
// and server share it: compare it between implementations).
func BenchmarkRLS(b *testing.B) {
	rls := startRLS(b)
	for _, keys := range []int{1, 10_000} {
		for _, impl := range []struct{ name, addr, domain string }{
			{"limitgen", rls.limitgen, "bench"}, {"limitgen-leased", rls.limitgen, "leased"}, {"limitgen-local", rls.limitgen, "local"}, {"envoy-ratelimit", rls.envoy, "bench"}, {"noop", rls.noop, "bench"},
		} {
			b.Run(fmt.Sprintf("keys=%s/callers=64/impl=%s", keyLabel(keys), impl.name), func(b *testing.B) {
				c := rlsClient(b, impl.addr)
				reqs := make([]*rlsv3.RateLimitRequest, keys)
				for i := range reqs {
					reqs[i] = rlsDomainRequest(impl.domain, "v"+strconv.Itoa(i))
				}
				var n atomic.Int64
				check := func(ctx context.Context) (bool, error) {
					req := reqs[(n.Add(1)-1)%int64(keys)]
					resp, err := c.ShouldRateLimit(ctx, req)
					if err != nil {
						return false, err
					}
					return resp.OverallCode == rlsv3.RateLimitResponse_OK, nil
				}
				var before, after syscall.Rusage
				syscall.Getrusage(syscall.RUSAGE_SELF, &before)
				runRedis(b, rls.redis, 64, check)
				syscall.Getrusage(syscall.RUSAGE_SELF, &after)
				cpu := time.Duration(after.Utime.Nano() + after.Stime.Nano() - before.Utime.Nano() - before.Stime.Nano())
				b.ReportMetric(float64(cpu.Microseconds())/float64(b.N), "cpu-µs/op")
			})
		}
	}
}

func keyLabel(n int) string {
	if n == 1 {
		return "1"
	}
	return "1e" + strconv.Itoa(len(strconv.Itoa(n))-1)
}

// TestAcrossAWindowEdge is what a fixed window admits that a token bucket
// does not: 10 a second per value of the entry edge, on envoyproxy/ratelimit
// (Redis, its fixed windows of a second) and on limitgen's service (Redis,
// a bucket of 10/s, burst 10), one redis-server, asked 10 times in the
// 100 ms before a second's edge and 10 times just after it. envoyproxy/
// ratelimit admits all 20 (a new window); limitgen at least 10 and at most
// its envelope: 10 + 10/s × the time between the first and the last call.
func TestAcrossAWindowEdge(t *testing.T) {
	rls := startRLS(t)
	for _, impl := range []struct {
		name, addr string
		lo, hi     int
	}{{"envoy-ratelimit", rls.envoy, 20, 20}, {"limitgen", rls.limitgen, 10, 10}} {
		c := rlsClient(t, impl.addr)
		value := "v" + strconv.FormatInt(time.Now().UnixNano(), 10)
		ask := func() bool {
			resp, err := c.ShouldRateLimit(context.Background(), &rlsv3.RateLimitRequest{Domain: "bench",
				Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "edge", Value: value}}}}})
			if err != nil {
				t.Fatal(err)
			}
			return resp.OverallCode == rlsv3.RateLimitResponse_OK
		}
		ask() // warm the connection: this value is spent now, not in the window measured
		// 10 calls that end before a second's edge, then 10 after it; a
		// first 10 that ran past the edge (a busy machine) are tried again
		// at the next edge, with a value of their own.
		var start time.Time
		admitted := 0
		for attempt := 0; ; attempt++ {
			value = "v" + strconv.FormatInt(time.Now().UnixNano(), 10) + "-edge"
			edge := time.Now().Truncate(time.Second).Add(time.Second)
			if time.Until(edge) < 300*time.Millisecond {
				edge = edge.Add(time.Second)
			}
			time.Sleep(time.Until(edge) - 100*time.Millisecond)
			start, admitted = time.Now(), 0
			for range 10 {
				if ask() {
					admitted++
				}
			}
			if time.Now().Before(edge) {
				time.Sleep(time.Until(edge) + 5*time.Millisecond)
				break
			}
			if attempt == 4 {
				t.Fatalf("%s: 5 times, 10 calls took past a second's edge (%v the last): the machine is too slow for the test", impl.name, time.Since(start))
			}
		}
		for range 10 {
			if ask() {
				admitted++
			}
		}
		took := time.Since(start)
		envelope := 10 + int(10*took.Seconds())
		t.Logf("%s: %d of 20 admitted in %v across a second's edge (envelope %d)", impl.name, admitted, took.Round(time.Millisecond), envelope)
		if admitted < impl.lo || admitted > impl.hi && admitted > envelope {
			t.Errorf("%s: %d of 20 admitted in %v across a second's edge, want %d to %d", impl.name, admitted, took.Round(time.Millisecond), impl.lo, max(impl.hi, envelope))
		}
	}
}

// TestLeasedDescriptorsUnderLoad is Envoy's rate-limit service on a healthy
// Redis, 64 callers on one gRPC connection asking for one of 1e4 leased
// descriptors (domain leased: a limit no caller reaches), with the store's
// calls one a check and coalesced: a healthy store never gives an answer
// the callers did not cause. Without a deadline every call is OK. With
// Envoy's default of 20 ms a call the busy machine (2 cores shared by the
// callers, the service and Redis) cannot answer in time ends at the
// caller's deadline; the service may then answer UNAVAILABLE, but never
// while its caller still waits: every answer but OK is counted at the
// server, with whether the call's deadline had passed (by the clock: on a
// busy machine the deadline's timer may run after the answer is made, and
// likewise at the client, which may then see UNAVAILABLE for its own
// deadline).
func TestLeasedDescriptorsUnderLoad(t *testing.T) {
	addr := benchRedis(t)
	for _, coalesce := range []int{0, 256} {
		for _, deadline := range []time.Duration{0, 20 * time.Millisecond} {
			leasedUnderLoad(t, addr, coalesce, deadline)
		}
	}
}

func leasedUnderLoad(t *testing.T, addr string, coalesce int, deadline time.Duration) {
	client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, PoolSize: 64})
	defer client.Close()
	st, err := redisstore.New(context.Background(), client, redisstore.Options{Coalesce: coalesce})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Every answer but OK, at the server: in the caller's time (early) or
	// after its deadline (late).
	var early, late atomic.Int64
	var firstEarly atomic.Value
	watch := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := h(ctx, req)
		if r, ok := resp.(*rlsv3.RateLimitResponse); err != nil || !ok || r.OverallCode != rlsv3.RateLimitResponse_OK {
			if d, ok := ctx.Deadline(); ctx.Err() != nil || ok && !time.Now().Before(d) { // its timer may not have run yet
				late.Add(1)
			} else {
				early.Add(1)
				firstEarly.CompareAndSwap(nil, fmt.Sprint(resp, err))
			}
		}
		return resp, err
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(watch))
	rlsv3.RegisterRateLimitServiceServer(srv, rlslimits.NewRLS(rlslimits.New(rlslimits.WithStore(st))).Service())
	go srv.Serve(lis) //nolint:errcheck // ends with Stop
	defer srv.Stop()
	c := rlsClient(t, lis.Addr().String())
	reqs := make([]*rlsv3.RateLimitRequest, 10_000)
	for i := range reqs {
		reqs[i] = rlsDomainRequest("leased", fmt.Sprintf("c%d-d%d-v%d", coalesce, deadline, i))
	}
	var calls, notOK, timedOut atomic.Int64
	stop := time.Now().Add(time.Second)
	var wg sync.WaitGroup
	for g := range 64 {
		wg.Go(func() {
			for i := g; time.Now().Before(stop); i += 64 {
				ctx, cancel := context.Background(), context.CancelFunc(func() {})
				if deadline > 0 {
					ctx, cancel = context.WithTimeout(ctx, deadline)
				}
				resp, err := c.ShouldRateLimit(ctx, reqs[i%len(reqs)])
				cancel()
				calls.Add(1)
				switch {
				case status.Code(err) == codes.DeadlineExceeded && deadline > 0:
					timedOut.Add(1)
				case err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK:
					notOK.Add(1)
				}
			}
		})
	}
	wg.Wait()
	name := fmt.Sprintf("coalesce %d, deadline %v", coalesce, deadline)
	t.Logf("%s: %d calls, %d timed out at the caller, %d answered but OK; at the server %d answers but OK in the caller's time, %d after its deadline; store %+v",
		name, calls.Load(), timedOut.Load(), notOK.Load(), early.Load(), late.Load(), st.Stats())
	if early.Load() != 0 || deadline == 0 && (notOK.Load() != 0 || late.Load() != 0) {
		t.Errorf("%s: of %d calls on a healthy Redis, the service answered %d but OK while the caller waited (first: %v); the caller saw %d answers but OK; want none",
			name, calls.Load(), early.Load(), firstEarly.Load(), notOK.Load())
	}
}
