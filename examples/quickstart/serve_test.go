package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/pgstore/pgtest"
)

// TestServe builds the service, starts it on 127.0.0.1 on a free port, and
// drives it with a real HTTP client: the fields on every response, the 429
// after a free user's burst, the 401 without a user, and login attempts keyed
// by the client's address. It stops the process it started.
func TestServe(t *testing.T) {
	addr := startService(t, build(t))
	do := client(t, addr)

	// alice is on the free plan: 10 a minute in bursts of 10. t is worked out by
	// hand: the later of the refill (6 s a token taken) and r paced at 10/min,
	// rounded up; after the last token, the 6 s until the next.
	const free = `"PerUser";q=10;w=60, "Global";q=2000;w=2`
	ts := []int{54, 48, 42, 36, 30, 36, 42, 48, 54, 6}
	for i, want := range ts {
		resp, body := do("GET", "/hello", "token-alice")
		rl := `"PerUser";r=` + strconv.Itoa(9-i) + `;t=` + strconv.Itoa(want)
		if resp.StatusCode != 200 || body != "hello, alice\n" || resp.Header.Get("RateLimit-Policy") != free || resp.Header.Get("RateLimit") != rl {
			t.Fatalf("request %d: %d %q RateLimit-Policy %q RateLimit %q; want 200, %s", i, resp.StatusCode, body,
				resp.Header.Get("RateLimit-Policy"), resp.Header.Get("RateLimit"), rl)
		}
	}
	resp, body := do("GET", "/hello", "token-alice")
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	var problem struct {
		Type     string   `json:"type"`
		Status   int      `json:"status"`
		Violated []string `json:"violated-policies"`
	}
	if err := json.Unmarshal([]byte(body), &problem); err != nil || resp.StatusCode != 429 ||
		resp.Header.Get("Content-Type") != "application/problem+json" || resp.Header.Get("RateLimit") != `"PerUser";r=0;t=6` ||
		ra < 6 || ra > 9 || problem.Status != 429 || len(problem.Violated) != 1 || problem.Violated[0] != "PerUser" ||
		problem.Type != "https://iana.org/assignments/http-problem-types#quota-exceeded" {
		t.Fatalf("over the burst: %d %v %q", resp.StatusCode, resp.Header, body)
	}

	// bob is on pro, and has buckets of his own.
	resp, _ = do("GET", "/hello", "token-bob")
	if resp.StatusCode != 200 || resp.Header.Get("RateLimit") != `"PerUser";r=99;t=60` ||
		resp.Header.Get("RateLimit-Policy") != `"PerUser";q=100;w=60, "Global";q=2000;w=2` {
		t.Fatalf("bob: %d %v", resp.StatusCode, resp.Header)
	}

	// No user, or a token nobody issued: 401, not one shared bucket.
	for _, token := range []string{"", "token-mallory"} {
		if resp, body := do("GET", "/hello", token); resp.StatusCode != 401 || !strings.Contains(body, "no key for rule PerUser") {
			t.Fatalf("token %q: %d %q", token, resp.StatusCode, body)
		}
	}

	// Login attempts are keyed by the client's address (127.0.0.1 here), with
	// or without a token: 5, then 429.
	for i := range 6 {
		resp, _ := do("POST", "/login", []string{"", "token-alice", "token-bob"}[i%3])
		want := 200
		if i == 5 {
			want = 429
		}
		if resp.StatusCode != want || !strings.HasPrefix(resp.Header.Get("RateLimit"), `"Login";r=`+strconv.Itoa(max(4-i, 0))+";") {
			t.Fatalf("login %d: %d %q", i, resp.StatusCode, resp.Header.Get("RateLimit"))
		}
	}
}

// build builds the service into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startService starts an instance on 127.0.0.1 on a free port (flags may
// say so again), with extra flags, and returns its address; it is killed by
// its pid when the test ends.
func startService(t *testing.T, bin string, flags ...string) string {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"-addr", "127.0.0.1:0"}, flags...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if err != nil || !ok || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("the service said %q (%v), want listening on 127.0.0.1:PORT", line, err)
	}
	return addr
}

// client returns a function that sends a request to the instance at addr,
// with a bearer token when one is given, and returns the response and body.
func client(t *testing.T, addr string) func(method, path, token string) (*http.Response, string) {
	c := &http.Client{Timeout: 10 * time.Second}
	return func(method, path, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}
}

// TestTwoInstancesShareRedis is the README's two-instance run: a redis-server
// on 127.0.0.1, and two instances of the service with -redis.
func TestTwoInstancesShareRedis(t *testing.T) {
	addr := startRedis(t)
	twoInstances(t, readmeRuns(t, "-redis", addr)...)
}

// TestTwoInstancesSharePostgres is the README's two-instance run on
// PostgreSQL: a cluster on 127.0.0.1 (package pgtest), and two instances of
// the service with -postgres, the first of which creates the store's table.
func TestTwoInstancesSharePostgres(t *testing.T) {
	srv := pgtest.Start(t)
	twoInstances(t, readmeRuns(t, "-postgres", srv.URL())...)
}

// readmeRuns are the flags of the README's lines that start the quickstart
// with store (-redis or -postgres): `go run . FLAGS &`, in a sh block that
// changes to examples/quickstart first. The value of -addr becomes
// 127.0.0.1:0 (a free port) and store's the test's server, value; every
// other flag is run as the README writes it.
func readmeRuns(t *testing.T, store, value string) [][]string {
	t.Helper()
	raw, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	var runs [][]string
	inSh, cd := false, false
	for _, line := range strings.Split(string(raw), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "```sh":
			inSh, cd = true, false
		case strings.HasPrefix(line, "```"):
			inSh = false
		case inSh && strings.HasPrefix(line, "cd examples/quickstart"):
			cd = true
		case inSh && strings.HasPrefix(line, "go run ") && strings.Contains(line, " "+store+" "):
			if !cd {
				t.Errorf("README: %q runs before cd examples/quickstart (the example is a module of its own)", line)
			}
			fields := strings.Fields(strings.TrimSuffix(line, "&"))
			if len(fields) < 3 || fields[2] != "." {
				t.Errorf("README: %q: want go run . FLAGS", line)
				continue
			}
			flags := fields[3:]
			for i := 0; i+1 < len(flags); i++ {
				switch flags[i] {
				case "-addr":
					flags[i+1] = "127.0.0.1:0"
				case store:
					flags[i+1] = value
				}
			}
			runs = append(runs, flags)
		}
	}
	if len(runs) != 2 {
		t.Fatalf("README: %d lines start the quickstart with %s, want the two instances", len(runs), store)
	}
	return runs
}

// twoInstances starts two instances of the service, with the flags of runs,
// and spreads a free user's requests over both: together they admit her
// burst of 10, not 20. Login attempts (a local rule) are counted by each
// instance alone.
func twoInstances(t *testing.T, runs ...[]string) {
	bin := build(t)
	a, b := client(t, startService(t, bin, runs[0]...)), client(t, startService(t, bin, runs[1]...))
	codes := map[int]int{}
	for i := range 14 {
		do := a
		if i%2 == 1 {
			do = b
		}
		resp, _ := do("GET", "/hello", "token-alice")
		codes[resp.StatusCode]++
		if resp.StatusCode == 200 && resp.Header.Get("RateLimit") != `"PerUser";r=`+strconv.Itoa(9-i)+";t="+strconv.Itoa([]int{54, 48, 42, 36, 30, 36, 42, 48, 54, 6}[i]) {
			t.Errorf("request %d: RateLimit %q: the instances do not share alice's bucket", i, resp.Header.Get("RateLimit"))
		}
	}
	if codes[200] != 10 || codes[429] != 4 {
		t.Errorf("14 requests over two instances: %v, want 10 admitted and 4 refused", codes)
	}
	logins := map[int]int{}
	for i := range 12 {
		do := a
		if i%2 == 1 {
			do = b
		}
		resp, _ := do("POST", "/login", "")
		logins[resp.StatusCode]++
	}
	if logins[200] != 10 || logins[429] != 2 {
		t.Errorf("12 logins over two instances: %v, want 5 admitted by each", logins)
	}
	// Instance a served alice's requests 0, 2, … 12: five admitted, two
	// refused; its /metrics (for Prometheus, not limited) says so, and that
	// its checks went to the store.
	resp, body := a("GET", "/metrics", "")
	for _, want := range []string{
		`limitgen_decisions_total{door="http",outcome="allowed",route="GET /hello",rule="PerUser",tier="Request"} 5`,
		`limitgen_decisions_total{door="http",outcome="denied",route="GET /hello",rule="PerUser",tier="Request"} 2`,
		`limitgen_table_keys{rule="Login"} 1`,
		`limitgen_store_breaker_open{node="",store="shared"} 0`,
	} {
		if resp.StatusCode != 200 || !strings.Contains(body, want+"\n") {
			t.Errorf("GET /metrics: %d, lacks %q:\n%s", resp.StatusCode, want, body)
		}
	}
	if !regexp.MustCompile(`limitgen_store_checks_total\{store="shared"\} [1-9]`).MatchString(body) {
		t.Errorf("GET /metrics: no checks went to the store:\n%s", body)
	}
}

// startRedis starts a redis-server on 127.0.0.1 on a free port, without
// persistence, and stops it by its pid when the test ends. It fails, never
// skips, when redis-server is missing (.ci/run installs it).
func startRedis(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redis-server is not installed (apt-get install -y redis-server): %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(port), "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	addr := "127.0.0.1:" + strconv.Itoa(port)
	for deadline := time.Now().Add(10 * time.Second); ; {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not start", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
