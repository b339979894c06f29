package limithttp_test

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/limithttp"
	"github.com/limitgen/limitgen/verdict"
)

// limitedServer serves 127.0.0.1 behind a hand-wired middleware of l per
// X-Client (the real clock), counting what it admits and denies.
func limitedServer(t *testing.T, l atomicbucket.Limit, admitted, denied *atomic.Int64) *httptest.Server {
	t.Helper()
	table := atomicbucket.NewTable[string](atomicbucket.MustRule(l), atomicbucket.TableOptions{MaxKeys: 100})
	policy := verdict.MustPolicy("PerClient", l)
	cfg := &limithttp.Config{Judge: verdict.Judge{Observer: verdict.ObserverFunc(func(e verdict.Event) {
		switch e.Outcome {
		case verdict.Allowed:
			admitted.Add(1)
		case verdict.Denied:
			denied.Add(1)
		}
	})}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := r.Header.Get("X-Client")
		res := verdict.Result{Decision: table.AllowNAt(key, atomicbucket.Now(), 1), Policy: &policy, Policies: policy.Item, Cost: 1}
		if cfg.Respond(w, r, verdict.Enforce, &res, key) {
			w.Write([]byte("ok")) //nolint:errcheck // the client is the test
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestObeyPaces: a client whose transport is Obey sends as fast as it can
// for 2 s to a limit of 10 a second (burst 20): the server denies none of
// its requests, and admits at least 95% of what the limit allows in that
// time (the burst and 10 a second).
func TestObeyPaces(t *testing.T) {
	t.Parallel() // it waits on the real clock, as the others that do
	var admitted, denied atomic.Int64
	srv := limitedServer(t, atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}, &admitted, &denied)
	client := &http.Client{Transport: &limithttp.Obey{}}
	start := time.Now()
	for time.Since(start) < 2*time.Second {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		req.Header.Set("X-Client", "pacer")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	took := time.Since(start)
	quota := 20 + int64(10*took.Seconds())
	if denied.Load() != 0 || admitted.Load() < quota*95/100 {
		t.Errorf("in %v: %d admitted, %d denied; want 0 denied and at least 95%% of %d", took, admitted.Load(), denied.Load(), quota)
	}
	t.Logf("in %v: %d admitted of %d admissible, %d denied", took, admitted.Load(), quota, denied.Load())
}

// TestObeyRetries: a client that knows nothing yet meets a drained key: its
// request is denied (429, Retry-After 1), and Obey sends it again a second
// later, when it is admitted; the caller sees the 200.
func TestObeyRetries(t *testing.T) {
	t.Parallel() // it waits on the real clock, as the others that do
	var admitted, denied atomic.Int64
	srv := limitedServer(t, atomicbucket.Limit{Tokens: 1, Period: time.Second, Burst: 1}, &admitted, &denied)
	drain, _ := http.NewRequest("GET", srv.URL, nil)
	drain.Header.Set("X-Client", "shared")
	if resp, err := http.DefaultClient.Do(drain); err != nil || resp.StatusCode != 200 {
		t.Fatalf("draining request: %v, %v", resp, err)
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("X-Client", "shared")
	start := time.Now()
	resp, err := (&http.Client{Transport: &limithttp.Obey{}}).Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("obeying request: %v, %v; want 200 after a retry", resp, err)
	}
	resp.Body.Close()
	if took := time.Since(start); took < 900*time.Millisecond || denied.Load() != 1 {
		t.Errorf("took %v with %d denials; want one denial and a second's wait", took, denied.Load())
	}
}
