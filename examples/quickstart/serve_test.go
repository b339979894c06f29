package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestServe builds the service, starts it on 127.0.0.1 on a free port, and
// drives it with a real HTTP client: the fields on every response, the 429
// after a free user's burst, the 401 without a user, and login attempts keyed
// by the client's address. It stops the process it started.
func TestServe(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "-addr", "127.0.0.1:0")
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
	client := &http.Client{Timeout: 10 * time.Second}
	do := func(method, path, token string) (*http.Response, string) {
		t.Helper()
		req, err := http.NewRequest(method, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(body)
	}

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
