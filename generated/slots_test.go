package limits_test

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/verdict"
)

// exportsServer serves policy.yaml's POST /v1/exports (ExportSlots: 4 of a
// user's exports at once) on a real listener, through the generated
// middleware's ServeMux or its Wrap around a plain one. Each export's handler
// does what its X-Do header says once release is closed: return, panic,
// hijack the connection (and keep it), or stream three chunks.
type exportsServer struct {
	*service
	srv      *httptest.Server
	release  chan struct{}
	end      func() // closes release, once
	started  chan struct{}
	hijacked chan net.Conn
}

func newExportsServer(t *testing.T, wrap bool) *exportsServer {
	t.Helper()
	e := &exportsServer{service: newService(t), release: make(chan struct{}), started: make(chan struct{}, 16), hijacked: make(chan net.Conn, 4)}
	export := func(w http.ResponseWriter, r *http.Request) {
		e.started <- struct{}{}
		<-e.release
		switch r.Header.Get("X-Do") {
		case "panic":
			panic(http.ErrAbortHandler) // net/http recovers it quietly
		case "hijack":
			c, _, err := w.(http.Hijacker).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			e.hijacked <- c // held open after the handler returns
		case "stream":
			for i := range 3 {
				io.WriteString(w, strings.Repeat("x", i+1)+"\n")
				w.(http.Flusher).Flush()
			}
		default:
			io.WriteString(w, "exported")
		}
	}
	var h http.Handler
	if wrap {
		mux := http.NewServeMux()
		mux.HandleFunc("POST /v1/exports", export)
		h = e.mw.Wrap(mux)
	} else {
		e.mux.HandleFunc("POST /v1/exports/", export) // never matched by the policy's route: a second pattern
		mux := e.mw.NewServeMux()
		mux.HandleFunc("POST /v1/exports", export)
		h = mux
	}
	e.srv = httptest.NewServer(h)
	e.srv.Client().Timeout = 20 * time.Second // a hang fails the test, not the run
	t.Cleanup(func() {
		e.srv.CloseClientConnections()
		e.srv.Close()
	})
	e.end = sync.OnceFunc(func() { close(e.release) })
	t.Cleanup(e.end) // before Close: a failed test's handlers end too
	return e
}

// post sends an export for user, returning its response once it ends.
func (e *exportsServer) post(t *testing.T, user, do string) *http.Response {
	t.Helper()
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/exports", nil)
	req.Header.Set("X-Test-User", user)
	req.Header.Set("X-Do", do)
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		return nil // a panicking or hijacking handler's connection ends without a response
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

func TestExportSlotsMiddleware(t *testing.T) {
	for _, wrap := range []bool{false, true} {
		name := "NewServeMux"
		if wrap {
			name = "Wrap"
		}
		t.Run(name, func(t *testing.T) {
			for _, do := range []string{"return", "panic", "hijack", "stream"} {
				t.Run(do, func(t *testing.T) { exportSlots(t, wrap, do) })
			}
		})
	}
}

// exportSlots holds alice's four slots with exports that end by do, checks
// that a fifth is denied as documented while they run and that bob is not,
// then lets them end and checks that all four slots came back.
func exportSlots(t *testing.T, wrap bool, do string) {
	e := newExportsServer(t, wrap)
	e.now = atomicbucket.Time(time.Hour) // on a whole microsecond: an expiry is exactly the hold away
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { e.post(t, "alice", do) })
	}
	for range 4 {
		<-e.started
	}
	// All four run: a fifth is denied, with a Retry-After of the hold (the
	// clock stands still) and no RateLimit fields.
	req, _ := http.NewRequest("POST", e.srv.URL+"/v1/exports", nil)
	req.Header.Set("X-Test-User", "alice")
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "600" ||
		resp.Header.Get("RateLimit") != "" || resp.Header.Get("RateLimit-Policy") != "" ||
		resp.Header.Get("Content-Type") != "application/problem+json" || !strings.Contains(string(body), "at most 4 requests of a key run at once") {
		t.Fatalf("a fifth export: %d Retry-After %q RateLimit %q, %s", resp.StatusCode, resp.Header.Get("Retry-After"), resp.Header.Get("RateLimit"), body)
	}
	// Another user has slots of their own.
	go e.post(t, "bob", "return")
	<-e.started
	e.end() // every export ends, by do
	if do == "hijack" {
		// The handlers returned with their connections still open: the
		// slots are back all the same. Then the connections answer and close.
		var conns []net.Conn
		for range 4 {
			conns = append(conns, <-e.hijacked)
		}
		waitFree(t, e)
		for _, c := range conns {
			io.WriteString(c, "HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n")
			c.Close()
		}
	}
	wg.Wait()
	waitFree(t, e)
	// The handlers have returned; the door released each slot as they did.
	// Four new exports are admitted again (their handlers return at once).
	deadline := time.Now().Add(5 * time.Second)
	for got := 0; got < 4; {
		req, _ := http.NewRequest("POST", e.srv.URL+"/v1/exports", nil)
		req.Header.Set("X-Test-User", "alice")
		done := make(chan *http.Response, 1)
		go func() {
			resp, err := e.srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				done <- nil
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			done <- resp
		}()
		<-e.started
		// release is closed: the handler returns as soon as it starts.
		if resp := <-done; resp == nil || resp.StatusCode != http.StatusOK {
			t.Fatalf("export %d after the first four ended: %v", got, resp)
		}
		got++
		if time.Now().After(deadline) {
			t.Fatal("timed out")
		}
	}
	// Each of those released its slot too: the table holds none of alice's.
	if d := e.lim.ExportSlots.PeekAt("alice", e.now); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("after every export ended, a peek: %+v, want all 4 slots free", d)
	}
	c := e.counts(t, "POST /v1/exports", "ExportSlots")
	if c[verdict.Allowed] != 9 || c[verdict.Denied] != 1 {
		t.Fatalf("ExportSlots' counts: %v, want 9 allowed (4, bob, 4) and 1 denied", c)
	}
}

// waitFree waits until all of alice's slots are free: the door releases a
// slot as its handler returns, which may be just after the response ended.
func waitFree(t *testing.T, e *exportsServer) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
		d := e.lim.ExportSlots.PeekAt("alice", e.now)
		if d.Allowed && d.Remaining == 3 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice's slots after her exports' handlers returned: %+v, want all 4 free", d)
		}
	}
}

// TestExportSlotsMissingKey: a request without a user is refused before any
// slot is taken.
func TestExportSlotsMissingKey(t *testing.T) {
	e := newExportsServer(t, false)
	resp, err := e.srv.Client().Post(e.srv.URL+"/v1/exports", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("an export without a user: %d, want 401", resp.StatusCode)
	}
	if d := e.lim.ExportSlots.PeekAt("", e.now); d.Remaining != 3 {
		t.Fatalf("a slot was taken for a request without a key: %+v", d)
	}
}

// TestExportSlotsAllocatesNothing: an export admitted, run and released
// through the middleware (Wrap, and its ServeMux) allocates nothing, and so
// does a request of another route of the same middleware (which takes no
// slot).
func TestExportSlotsAllocatesNothing(t *testing.T) {
	s := newService(t)
	wrapped := s.mw.Wrap(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	w := &discard{h: http.Header{}}
	for _, c := range []struct {
		method, path string
		h            http.Handler
	}{{"POST", "/v1/exports", wrapped}, {"POST", "/v1/upload", wrapped}, {"POST", "/v1/exports", s.mux}, {"POST", "/v1/upload", s.mux}} {
		h := c.h
		r := httptest.NewRequest(c.method, c.path, nil)
		r.Header.Set("X-Test-User", "alice")
		h.ServeHTTP(w, r)
		if n := testing.AllocsPerRun(1000, func() {
			clear(w.h)
			s.now += atomicbucket.Time(time.Second)
			h.ServeHTTP(w, r)
		}); n != 0 || w.code != 0 {
			t.Errorf("%s %s admitted: %v allocations a request (status %d), want 0", c.method, c.path, n, w.code)
		}
	}
	if d := s.lim.ExportSlots.PeekAt("alice", s.now); d.Remaining != 3 {
		t.Fatalf("after the exports ended, alice's slots: %+v, want all free", d)
	}
}

// TestExportSlotsAllOrNothing: POST /v1/exports checks the tier Exports
// (PerUser, ExportSlots). The door takes the slot first and checks PerUser
// after, so that a request goes on holding both or neither: with alice's four slots held, a fifth
// export is refused by the slot and charges PerUser nothing; with her
// PerUser bucket empty, an export is refused by the tier and its slot comes
// back at once.
func TestExportSlotsAllOrNothing(t *testing.T) {
	e := newExportsServer(t, false)
	e.now = atomicbucket.Time(time.Hour) // the clock stands still: no refill
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { e.post(t, "alice", "return") })
	}
	for range 4 {
		<-e.started
	}
	before := e.lim.PerUser.PeekAt(limits.PlanFree, "alice", e.now, 1)
	if resp := e.post(t, "alice", "return"); resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "600" {
		t.Fatalf("a fifth export with four running: %v", resp)
	}
	if after := e.lim.PerUser.PeekAt(limits.PlanFree, "alice", e.now, 1); after.Remaining != before.Remaining {
		t.Fatalf("a fifth export refused by its slot charged PerUser: %d tokens left before, %d after", before.Remaining, after.Remaining)
	}
	e.end()
	wg.Wait()
	waitFree(t, e)
	left := e.lim.PerUser.PeekAt(limits.PlanFree, "alice", e.now, 1).Remaining + 1 // a peek's Remaining is after its cost
	if d := e.lim.PerUser.AllowNAt(limits.PlanFree, "alice", e.now, left); !d.Allowed || d.Remaining != 0 {
		t.Fatalf("emptying alice's PerUser bucket: %+v", d)
	}
	resp := e.post(t, "alice", "return")
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests || !strings.Contains(resp.Header.Get("RateLimit"), "PerUser") {
		t.Fatalf("an export with alice's PerUser bucket empty: %v, want 429 from the tier (RateLimit naming PerUser)", resp)
	}
	if d := e.lim.ExportSlots.PeekAt("alice", e.now); !d.Allowed || d.Remaining != 3 {
		t.Fatalf("after a refusal by the tier, alice's slots: %+v, want all 4 free (the slot given back)", d)
	}
	if c := e.counts(t, "POST /v1/exports", "ExportSlots"); c[verdict.Allowed] != 5 || c[verdict.Denied] != 1 {
		t.Fatalf("ExportSlots' counts: %v, want 5 allowed (4 ran; 1 given back when the tier refused) and 1 denied", c)
	}
}

// TestReportSlotsWait: POST /v1/reports holds ReportSlots' one slot (wait:
// 500ms). With a report running, a second waits and is admitted the moment
// the first ends (the release hands it the slot); a third, with the second
// running all along, waits the half second and is refused 429 with a
// Retry-After of the hold, and no RateLimit fields. On a real server.
func TestReportSlotsWait(t *testing.T) {
	s := newService(t)
	release := make(chan struct{}, 4)
	started := make(chan time.Time, 4)
	mux := s.mw.NewServeMux()
	mux.HandleFunc("POST /v1/reports", func(w http.ResponseWriter, r *http.Request) {
		started <- time.Now()
		<-release
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	post := func() <-chan *http.Response {
		out := make(chan *http.Response, 1)
		go func() {
			req, _ := http.NewRequest("POST", srv.URL+"/v1/reports", nil)
			req.Header.Set("X-Test-User", "alice")
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Error(err)
				out <- nil
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			out <- resp
		}()
		return out
	}
	first := post()
	<-started
	second := post()
	time.Sleep(100 * time.Millisecond) // the second is waiting
	ended := time.Now()
	release <- struct{}{} // the first ends: its slot goes to the second
	if resp := <-first; resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the first report: %v", resp)
	}
	select {
	case at := <-started:
		if at.Before(ended) {
			t.Fatal("the second report ran before the first ended")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second report never ran after the first ended")
	}
	start := time.Now()
	resp := <-post() // the second still runs: the third waits 500ms, then is refused
	if el := time.Since(start); resp == nil || resp.StatusCode != http.StatusTooManyRequests || el < 500*time.Millisecond ||
		resp.Header.Get("Retry-After") != "60" || resp.Header.Get("RateLimit") != "" {
		t.Fatalf("a third report with the second running: %v after %v, want 429 after 500ms with Retry-After 60", resp, el)
	}
	release <- struct{}{}
	if resp := <-second; resp == nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the second report: %v", resp)
	}
	if st := s.lim.ReportSlots.Stats(); st.Held != 0 {
		t.Fatalf("after both reports ended: %+v", st)
	}
}
