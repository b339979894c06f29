package main

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	rlv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// freeAddr is an address on 127.0.0.1 no one listens on (now).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ratelimitServer runs the generated cmd/ratelimit on 127.0.0.1 with a
// Redis store and a metrics endpoint, and returns its addresses and process.
func ratelimitServer(t *testing.T, bin, redisAddr string) (addr, metrics string, cmd *exec.Cmd, log *bufio.Reader) {
	t.Helper()
	addr, metrics = freeAddr(t), freeAddr(t)
	cmd = exec.Command(bin, "-redis", redisAddr, "-metrics", metrics)
	cmd.Env = append(cmd.Environ(), "LIMITGEN_LISTEN="+addr) // the environment works as the flag does
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
	log = bufio.NewReader(stderr)
	line, err := log.ReadString('\n')
	if err != nil || !strings.Contains(line, "serving Envoy's rate-limit service on "+addr) {
		t.Fatalf("cmd/ratelimit said %q (%v), want it serving on %s", line, err, addr)
	}
	return addr, metrics, cmd, log
}

// TestRatelimitServer is the ready server the generator writes for the
// policy's rls: section (go:generate ... -main cmd/ratelimit), run as a
// non-Go team runs it: two instances on one redis-server, both on
// 127.0.0.1. A caller's 20 (the Edge tier's PerCaller burst) are admitted
// across both instances, the 21st is OVER_LIMIT on either; grpc's health
// service says SERVING; /metrics counts the rls door's decisions; SIGTERM
// stops an instance gracefully (exit 0).
func TestRatelimitServer(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "ratelimit")
	if out, err := exec.Command("go", "build", "-o", bin, "./cmd/ratelimit").CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/ratelimit: %v\n%s", err, out)
	}
	redisAddr := startRedis(t)
	a, metrics, cmdA, logA := ratelimitServer(t, bin, redisAddr)
	b, _, _, _ := ratelimitServer(t, bin, redisAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func(addr string) *grpc.ClientConn {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return cc
	}
	ccA, ccB := dial(a), dial(b)
	if resp, err := healthpb.NewHealthClient(ccA).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil || resp.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v, %v", resp, err)
	}
	ask := func(cc *grpc.ClientConn, caller string) *rlsv3.RateLimitResponse {
		resp, err := rlsv3.NewRateLimitServiceClient(cc).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "quickstart",
			Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "caller", Value: caller}}}}})
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	admitted := 0
	for i := range 24 {
		cc := ccA
		if i%2 == 1 {
			cc = ccB
		}
		if ask(cc, "alice").OverallCode == rlsv3.RateLimitResponse_OK {
			admitted++
		}
	}
	if admitted != 20 {
		t.Errorf("alice: %d of 24 admitted across two instances, want 20 (one limit on Redis)", admitted)
	}
	resp := ask(ccB, "alice")
	headers := map[string]string{}
	for _, h := range resp.ResponseHeadersToAdd {
		headers[h.Key] = h.Value
	}
	if resp.OverallCode != rlsv3.RateLimitResponse_OVER_LIMIT || headers["Retry-After"] == "" || !strings.HasPrefix(headers["RateLimit"], `"PerCaller";r=0`) {
		t.Errorf("alice's 25th: %v, headers %v", resp.OverallCode, headers)
	}
	if ask(ccA, "bob").OverallCode != rlsv3.RateLimitResponse_OK {
		t.Error("bob is limited by alice's calls")
	}
	// A descriptor no pattern matches: OK, and counted on /metrics.
	if resp, err := rlsv3.NewRateLimitServiceClient(ccA).ShouldRateLimit(ctx, &rlsv3.RateLimitRequest{Domain: "quickstart",
		Descriptors: []*rlv3.RateLimitDescriptor{{Entries: []*rlv3.RateLimitDescriptor_Entry{{Key: "path", Value: "/x"}}}}}); err != nil || resp.OverallCode != rlsv3.RateLimitResponse_OK {
		t.Errorf("an unmatched descriptor: %v, %v", resp, err)
	}
	mr, err := http.Get("http://" + metrics + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(mr.Body)
	mr.Body.Close()
	if !strings.Contains(string(body), `limitgen_decisions_total{door="rls",outcome="denied",route="quickstart: caller",rule="PerCaller",tier="Edge"}`) ||
		!strings.Contains(string(body), `limitgen_store_checks_total{store="redis"}`) ||
		!strings.Contains(string(body), `limitgen_unmatched_total{door="rls"} 1`+"\n") {
		t.Errorf("/metrics lacks the rls door's decisions, the store's checks or the unmatched descriptor:\n%s", body)
	}
	rest := make(chan string, 1)
	go func() { b, _ := io.ReadAll(logA); rest <- string(b) }() // to its end: the process's exit
	cmdA.Process.Signal(syscall.SIGTERM)
	select {
	case log := <-rest:
		if !strings.Contains(log, "ratelimit: stopped") {
			t.Errorf("its log after SIGTERM: %q", log)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("still running 15 s after SIGTERM")
	}
	if err := cmdA.Wait(); err != nil {
		t.Errorf("after SIGTERM: %v, want exit 0", err)
	}
}
