package envoy

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/limitgen/limitgen/pgstore/pgtest"
	"github.com/limitgen/limitgen/redisstore/redistest"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// builds are the servers built so far, by package: each is built once per
// test binary.
var (
	buildsMu sync.Mutex
	builds   = map[string]*build{}
	binDir   string
)

type build struct {
	once sync.Once
	path string
	err  error
}

// server builds cmd/ratelimit once per test binary.
func server(t *testing.T) string { return binary(t, "./cmd/ratelimit") }

// binary builds the main package pkg once per test binary.
func binary(t *testing.T, pkg string) string {
	t.Helper()
	buildsMu.Lock()
	b := builds[pkg]
	if b == nil {
		b = &build{}
		builds[pkg] = b
	}
	if binDir == "" {
		dir, err := os.MkdirTemp("", "ratelimit")
		if err != nil {
			buildsMu.Unlock()
			t.Fatal(err)
		}
		binDir = dir
	}
	dir := binDir
	buildsMu.Unlock()
	b.once.Do(func() {
		b.path = filepath.Join(dir, strings.NewReplacer("/", "_", ".", "_").Replace(pkg))
		if out, err := exec.Command("go", "build", "-o", b.path, pkg).CombinedOutput(); err != nil {
			b.err = fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
		}
	})
	if b.err != nil {
		t.Fatal(b.err)
	}
	return b.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// instance is one cmd/ratelimit process on 127.0.0.1, and a client of it.
type instance struct {
	rlsv3.RateLimitServiceClient
	cmd    *exec.Cmd
	domain string // the domain it asks in
}

// start runs cmd/ratelimit with flags, on a free port, until the test ends
// (killed by its pid), and returns once it serves.
func start(t *testing.T, flags ...string) *instance {
	t.Helper()
	return startServer(t, server(t), "edge", flags...)
}

// startServer runs the server bin with flags, as start does; its instance
// asks in domain.
func startServer(t *testing.T, bin, domain string, flags ...string) *instance {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(bin, append([]string{"-listen", addr}, flags...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	log := bufio.NewReader(stderr)
	for { // what it says before it serves (go-redis's dials to a Redis not up yet), then that it serves
		line, err := log.ReadString('\n')
		if err != nil {
			t.Fatalf("cmd/ratelimit %v ended before it served on %s: %q, %v", flags, addr, line, err)
		}
		if strings.Contains(line, "serving Envoy's rate-limit service on "+addr) {
			break
		}
		t.Log("cmd/ratelimit: " + strings.TrimSpace(line))
	}
	go func() { // the rest of its log, into the test's
		for {
			line, err := log.ReadString('\n')
			if line != "" {
				t.Log("cmd/ratelimit: " + strings.TrimSpace(line))
			}
			if err != nil {
				return
			}
		}
	}()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return &instance{RateLimitServiceClient: rlsv3.NewRateLimitServiceClient(cc), cmd: cmd, domain: domain}
}

// ask asks for one descriptor of the instance's domain, entries as key,
// value pairs.
func (in *instance) ask(t *testing.T, entries ...string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	return in.askCost(t, 0, entries...)
}

// askCost is ask with the request's hits_addend (0: none, a cost of 1).
func (in *instance) askCost(t *testing.T, cost uint32, entries ...string) (*rlsv3.RateLimitResponse, error) {
	t.Helper()
	d := &rlv3.RateLimitDescriptor{}
	for i := 0; i+1 < len(entries); i += 2 {
		d.Entries = append(d.Entries, &rlv3.RateLimitDescriptor_Entry{Key: entries[i], Value: entries[i+1]})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return in.ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: in.domain, Descriptors: []*rlv3.RateLimitDescriptor{d}, HitsAddend: cost})
}

// admitted asks n times, from the instances in turn, and counts the OKs; an
// error fails the test.
func admitted(t *testing.T, n int, ins []*instance, entries ...string) int {
	t.Helper()
	ok := 0
	for i := range n {
		resp, err := ins[i%len(ins)].ask(t, entries...)
		if err != nil {
			t.Fatalf("%v, call %d: %v", entries, i, err)
		}
		if resp.OverallCode == rlsv3.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// The numbers file the servers start with: one client address has its own.
const numbersFile = `rules:
  PerClient:
    rate: 60/min
    burst: 10
    keys:
      198.51.100.99: {rate: 60/min, burst: 25}
`

// TestStores runs two instances of the generated server on each store as a
// team that writes no Go runs them, and holds each rule kind of policy.yaml
// to its numbers across both: a keyed rule (10 of 14), a tier whose burst
// differs by plan (5 for a free user, 15 for a pro one), a key's own numbers
// from the -numbers file (25) and (on Redis) a change of that file taking
// effect while they serve, a leased rule (at most its 40, at least 40 less what the two
// instances' leases can hold), a rule kept in each instance's memory (3 on
// each), and an aligned interval rule keyed by a tenant and a user (3 for
// each pair; hits_addend 2 takes 2 of them).
func TestStores(t *testing.T) {
	for _, store := range []struct {
		name  string
		flags func(t *testing.T) []string
	}{
		{"redis", func(t *testing.T) []string { return []string{"-redis", redistest.Start(t).Addr} }},
		{"redis-cluster", func(t *testing.T) []string {
			nodes := redistest.StartCluster(t, 3)
			return []string{"-redis-cluster", nodes[1].Addr} // one node is enough to find the others
		}},
		{"postgres", func(t *testing.T) []string { return []string{"-postgres", pgtest.Start(t).URL()} }},
	} {
		t.Run(store.name, func(t *testing.T) {
			numbers := filepath.Join(t.TempDir(), "numbers.yaml")
			if err := os.WriteFile(numbers, []byte(numbersFile), 0o644); err != nil {
				t.Fatal(err)
			}
			flags := append(store.flags(t), "-numbers", numbers)
			both := []*instance{start(t, flags...), start(t, flags...)}

			if got := admitted(t, 14, both, "remote_address", "198.51.100.7"); got != 10 {
				t.Errorf("PerClient: %d of 14 admitted across both instances, want its burst, 10", got)
			}
			resp, err := both[1].ask(t, "remote_address", "198.51.100.7")
			if err != nil {
				t.Fatal(err)
			}
			st := resp.Statuses[0]
			if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || st.CurrentLimit.GetName() != "PerClient" ||
				st.CurrentLimit.GetRequestsPerUnit() != 60 || st.CurrentLimit.GetUnit() != rlsv3.RateLimitResponse_RateLimit_MINUTE ||
				st.LimitRemaining != 0 || st.DurationUntilReset.AsDuration() <= 0 {
				t.Errorf("PerClient's 15th: %v", resp)
			}
			if got := admitted(t, 30, both, "remote_address", "198.51.100.99"); got != 25 {
				t.Errorf("PerClient, a key with its own numbers (burst 25): %d of 30 admitted", got)
			}

			if got := admitted(t, 8, both, "generic_key", "api", "plan", "free", "user_id", "7"); got != 5 {
				t.Errorf("API tier, a free user: %d of 8 admitted, want PerUser's burst, 5", got)
			}
			if got := admitted(t, 18, both, "generic_key", "api", "plan", "pro", "user_id", "8"); got != 15 {
				t.Errorf("API tier, a pro user: %d of 18 admitted, want the pro plan's burst, 15", got)
			}

			// Leases: each instance spends batches of at most 4 of the 40; at
			// the end each may hold up to 3 it has not spent.
			if got := admitted(t, 50, both, "tenant", "acme"); got > 40 || got < 40-2*3 {
				t.Errorf("PerTenant (leased): %d of 50 admitted, want 34 to 40", got)
			}

			// A rule kept in each instance's memory: 3 on each.
			for i, in := range both {
				if got := admitted(t, 5, []*instance{in}, "generic_key", "search", "remote_address", "198.51.100.7"); got != 3 {
					t.Errorf("Search (local) on instance %d: %d of 5 admitted, want 3", i, got)
				}
			}

			// A composite key on an aligned interval rule: 3 an hour for each
			// user of each tenant; hits_addend is the cost.
			for _, tu := range [][2]string{{"acme", "7"}, {"acme", "8"}, {"globex", "7"}} {
				if got := admitted(t, 5, both, "generic_key", "exports", "tenant", tu[0], "user_id", tu[1]); got != 3 {
					t.Errorf("Exports, tenant %s, user %s: %d of 5 admitted, want 3", tu[0], tu[1], got)
				}
			}
			for i, want := range []rlsv3.RateLimitResponse_Code{rlsv3.RateLimitResponse_OK, rlsv3.RateLimitResponse_OVER_LIMIT} {
				resp, err := both[i].askCost(t, 2, "generic_key", "exports", "tenant", "initech", "user_id", "1")
				if err != nil || resp.OverallCode != want {
					t.Errorf("Exports at a cost of 2, call %d: %v, %v; want %v", i+1, resp, err, want)
				}
			}

			// A change of the numbers file: a new key's burst of 2 is in force
			// within a few seconds (the file is read every second, and a new
			// content taken when two reads agree). The file is the store's
			// neighbour, not its part: one store shows it.
			if store.name != "redis" {
				return
			}
			if err := os.WriteFile(numbers+".new", []byte(numbersFile+"      192.0.2.1: {rate: 1/min, burst: 2}\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(numbers+".new", numbers); err != nil {
				t.Fatal(err)
			}
			time.Sleep(3500 * time.Millisecond)
			if got := admitted(t, 6, both, "remote_address", "192.0.2.1"); got != 2 {
				t.Errorf("PerClient after the file gave 192.0.2.1 a burst of 2: %d of 6 admitted", got)
			}
		})
	}
}

// TestRedisDownAtBoot starts the server while its Redis is not there yet: a
// descriptor on a rule that denies while its store cannot decide
// (on_failure: deny) is answered UNAVAILABLE, never OK, until Redis starts;
// then the limit holds exactly (10 of 14).
func TestRedisDownAtBoot(t *testing.T) {
	rs := redistest.Prepare(t) // its port chosen, nothing listening yet
	in := start(t, "-redis", rs.Addr)
	for range 3 {
		resp, err := in.ask(t, "remote_address", "198.51.100.7")
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("Redis down: %v, %v; want UNAVAILABLE", resp, err)
		}
	}
	rs.Restart(t)
	waitDecides(t, in, "after Redis started")
	if got := admitted(t, 14, []*instance{in}, "remote_address", "198.51.100.7"); got != 10 {
		t.Errorf("PerClient once Redis is up: %d of 14 admitted, want 10", got)
	}
}

// TestNoStore: a server whose policy has shared rules refuses to start
// without a store (each instance would admit the whole limit), naming the
// rules, unless -local says so; -local with a store is refused too.
func TestNoStore(t *testing.T) {
	for _, c := range []struct {
		flags []string
		want  string
	}{
		{nil, "the policy's shared rules (PerClient, PerUser, Global, PerTenant, Exports) are kept in a store every instance shares"},
		{[]string{"-local", "-redis", "127.0.0.1:1"}, "-local keeps the shared rules in this process; it goes with no store"},
		{[]string{"-redis", "127.0.0.1:1", "-postgres", "postgres://127.0.0.1:1/x"}, "give one of -redis, -redis-cluster and -postgres"},
		{[]string{"-local", "-numbers", "redis:numbers"}, "-numbers redis:numbers: no redis store is given"},
		{[]string{"-local", "-store-timeout", "0s"}, `-store-timeout "0s": a duration above 0`},
		{[]string{"-local", "-numbers", filepath.Join(t.TempDir(), "missing.yaml")}, "missing.yaml: no such file"},
	} {
		out, err := exec.Command(server(t), append([]string{"-listen", "127.0.0.1:0"}, c.flags...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(out), c.want) {
			t.Errorf("cmd/ratelimit %v: %v, said %q; want it to stop saying %q", c.flags, err, out, c.want)
		}
	}
	// -local: it serves, the shared rules kept in its memory.
	in := start(t, "-local")
	if got := admitted(t, 14, []*instance{in}, "remote_address", "198.51.100.7"); got != 10 {
		t.Errorf("-local: %d of 14 admitted, want 10", got)
	}
}

// TestRedisStalls: a Redis that stops answering (SIGSTOP: its connections
// stay open, nothing comes back) is not a hang. Each request on a rule that
// denies while its store cannot decide is answered UNAVAILABLE within the
// store's timeout (-store-timeout 100ms; 500 ms allowed here), never OK; once Redis
// answers again (SIGCONT) the limit holds: never more than what was left.
func TestRedisStalls(t *testing.T) {
	rs := redistest.Start(t)
	in := start(t, "-redis", rs.Addr, "-store-timeout", "100ms")
	if got := admitted(t, 4, []*instance{in}, "remote_address", "198.51.100.7"); got != 4 {
		t.Fatalf("before the stall: %d of 4 admitted", got)
	}
	if err := rs.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	t.Cleanup(func() {
		if stopped {
			rs.Signal(syscall.SIGCONT)
		}
	})
	for i := range 5 {
		began := time.Now()
		resp, err := in.ask(t, "remote_address", "198.51.100.7")
		took := time.Since(began)
		if status.Code(err) != codes.Unavailable || took > 500*time.Millisecond {
			t.Errorf("stalled Redis, call %d: %v, %v after %v; want UNAVAILABLE within the 100 ms -store-timeout (and the machine's delays)", i+1, resp, err, took)
		}
	}
	if err := rs.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	waitDecides(t, in, "after the stall")
	// 4 of its 10 were taken before the stall; a call that timed out may
	// still have run when Redis resumed (and taken its token), never more.
	if got := admitted(t, 10, []*instance{in}, "remote_address", "198.51.100.7"); got > 6 || got < 1 {
		t.Errorf("after the stall: %d of 10 admitted, want at most the 6 left (and some)", got)
	}
}

// waitDecides waits (20 s at most) until the server decides again after its
// Redis came back (a store's breaker waits before it tries the server again):
// UNAVAILABLE until then, and nothing else.
func waitDecides(t *testing.T, in *instance, when string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := in.ask(t, "remote_address", "198.51.100.1")
		if err == nil {
			break
		}
		if status.Code(err) != codes.Unavailable || time.Now().After(deadline) {
			t.Fatalf("%s: %v", when, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
