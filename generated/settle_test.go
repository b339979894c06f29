package limits_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
)

// chat is the handler of POST /v1/chat in these tests: it reports the
// tokens it "used" as the request's X-Test-Used says, in the header
// X-Tokens-Used (or, with X-Test-Trailer, as a trailer after the body);
// X-Test-Panic makes it abort.
func chat(w http.ResponseWriter, r *http.Request) {
	used := r.Header.Get("X-Test-Used")
	if r.Header.Get("X-Test-Panic") != "" {
		panic(http.ErrAbortHandler)
	}
	if r.Header.Get("X-Test-Trailer") != "" {
		io.WriteString(w, "streamed answer")
		w.(http.Flusher).Flush()
		w.Header().Set(http.TrailerPrefix+"X-Tokens-Used", used)
		return
	}
	if used != "" {
		w.Header().Set("X-Tokens-Used", used)
	}
	io.WriteString(w, "answer")
}

// chatCall is a POST /v1/chat of alice declaring maxTokens (0: none) whose
// handler reports used ("": nothing), and the recorder of its answer.
func (s *service) chatCall(maxTokens, used string, extra ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("X-Test-User", "alice")
	if maxTokens != "" {
		r.Header.Set("X-Max-Tokens", maxTokens)
	}
	if used != "" {
		r.Header.Set("X-Test-Used", used)
	}
	for _, h := range extra {
		r.Header.Set(h, "1")
	}
	w := httptest.NewRecorder()
	s.mux.ServeHTTP(w, r)
	return w
}

// held is alice's ChatTokens tokens now (0 while in debt).
func (s *service) held() int64 { return s.lim.ChatTokens.PeekAt("alice", s.now, 0).Remaining }

// TestChatSettles walks POST /v1/chat (tier Chat: ChatTokens, 100,000 a
// minute, burst 100,000, and DailyTokens, a window of 2,000,000 a day; the
// estimate from X-Max-Tokens, default 1000, at most 16,000; settled from
// X-Tokens-Used) through what a settlement can do, the clock standing still
// unless a step moves it.
func TestChatSettles(t *testing.T) {
	s := newService(t)
	// Admitted at 16,000, used 1,200: 14,800 back.
	if w := s.chatCall("16000", "1200"); w.Code != 200 {
		t.Fatalf("chat: %d %s", w.Code, w.Body)
	}
	if got := s.held(); got != 98800 {
		t.Fatalf("after using 1200 of 16000: %d held, want 98800", got)
	}
	// The day's window gives the 14,800 back too: it counts 1,200.
	if got := s.lim.DailyTokens.PeekAt("alice", s.now, 0).Remaining; got != 2_000_000-1200 {
		t.Fatalf("the day's window after the first chat: %d left, want %d", got, 2_000_000-1200)
	}
	// No actual reported: the estimate (the default, 1000) is kept.
	s.chatCall("", "")
	if got := s.held(); got != 97800 {
		t.Fatalf("after a chat that reported nothing: %d held, want 97800", got)
	}
	// Malformed actuals keep the estimate too.
	for _, bad := range []string{"-5", "1e3", "12 tokens", "0x10"} {
		s.chatCall("100", bad)
	}
	if got := s.held(); got != 97400 {
		t.Fatalf("after four malformed actuals of estimate 100: %d held, want 97400", got)
	}
	// An actual of 0 gives the whole estimate back.
	s.chatCall("500", "0")
	if got := s.held(); got != 97400 {
		t.Fatalf("after a chat that used nothing: %d held, want 97400", got)
	}
	// A handler that panics settles nothing: its estimate stays taken.
	func() {
		defer func() { recover() }()
		s.chatCall("2000", "10", "X-Test-Panic")
	}()
	if got := s.held(); got != 95400 {
		t.Fatalf("after a panicking chat: %d held, want 95400", got)
	}
	// Used far more than declared: 95,400 − 16,000 + 16,000 − 111,400 =
	// −16,000, owed.
	s.chatCall("16000", "111400")
	if got := s.held(); got != 0 {
		t.Fatalf("in debt: %d remaining, want 0", got)
	}
	// The window counts what each chat used, and an estimate where none
	// was read: 1,200 + 1,000 + 4×100 + 0 + 2,000 + 16,000, and the 95,400
	// beyond the last estimate counted when the chat ended.
	if got, want := s.lim.DailyTokens.PeekAt("alice", s.now, 0).Remaining, int64(2_000_000-116_000); got != want {
		t.Fatalf("the day's window: %d left, want %d", got, want)
	}
	// The next chat is refused until refill has repaid the debt and brought
	// its estimate: 17,000 tokens at 100,000 a minute is 10.2s; Retry-After
	// says 11 seconds or up to half more (the policy's jitter: 0.5).
	if got := s.lim.ChatTokens.PeekAt("alice", s.now, 1000).RetryAfter; got != 10200*time.Millisecond {
		t.Fatalf("in debt, a chat of 1000 waits %v, want 10.2s", got)
	}
	w := s.chatCall("1000", "1000")
	if ra, _ := strconv.Atoi(w.Header().Get("Retry-After")); w.Code != http.StatusTooManyRequests || ra < 11 || ra > 16 {
		t.Fatalf("in debt: %d, Retry-After %q, want 429 and 11 to 16", w.Code, w.Header().Get("Retry-After"))
	}
	if f := w.Header().Get("RateLimit"); !strings.HasSuffix(f, ";r=0;t=11") {
		// a denial's t is its wait, the debt's repayment in it
		t.Fatalf("in debt, RateLimit = %q: want r=0 and t=11", f)
	}
	s.now = s.now.Add(10199 * time.Millisecond)
	if w := s.chatCall("1000", "1000"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("1ms before the debt and the estimate are repaid: %d", w.Code)
	}
	s.now = s.now.Add(time.Millisecond)
	if w := s.chatCall("1000", "1000"); w.Code != 200 {
		t.Fatalf("when the debt and the estimate are repaid: %d", w.Code)
	}
	// The debt is bounded: one burst (100,000) below empty; the rest is
	// forgiven, and counted. A minute on, the bucket is full again.
	s.now = s.now.Add(time.Minute)
	before := s.mw.SettleStats()
	s.chatCall("1000", "99999999999999999999999")
	if got, want := s.lim.ChatTokens.PeekAt("alice", s.now, 1).RetryAfter, 100001*600*time.Microsecond; got != want {
		t.Fatalf("at the debt bound, a token in %v, want %v (100,000 owed and 1 more)", got, want)
	}
	after := s.mw.SettleStats()
	if after.Settled != before.Settled+1 || after.Forgiven <= before.Forgiven {
		t.Fatalf("settle stats %+v then %+v: want one more settled and tokens forgiven", before, after)
	}
	if after.Kept != 5 || after.Settled != 5 {
		t.Fatalf("settle stats %+v: want 5 kept (one silent, four malformed) and 5 settled", after)
	}
}

// TestChatSettlesFromTrailer: over a real server and client, a streamed
// answer reports its tokens in a trailer, after the body; the middleware
// settles from it when the handler returns.
func TestChatSettlesFromTrailer(t *testing.T) {
	s := newService(t)
	srv := httptest.NewServer(s.mux)
	defer srv.Close()
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat", nil)
	req.Header.Set("X-Test-User", "alice")
	req.Header.Set("X-Max-Tokens", "8000")
	req.Header.Set("X-Test-Used", "300")
	req.Header.Set("X-Test-Trailer", "1")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "streamed answer" || resp.Trailer.Get("X-Tokens-Used") != "300" {
		t.Fatalf("%d %q, trailer %v", resp.StatusCode, body, resp.Trailer)
	}
	if got := s.held(); got != 99700 {
		t.Fatalf("after a streamed chat of 300 tokens: %d held, want 99700", got)
	}
}

// TestChatDeniedSettlesNothing: a chat the rule refuses never reaches its
// handler, and nothing is settled for it.
func TestChatDeniedSettlesNothing(t *testing.T) {
	s := newService(t)
	s.lim.ChatTokens.AllowNAt("alice", s.now, 99500)
	if w := s.chatCall("1000", "0"); w.Code != http.StatusTooManyRequests {
		t.Fatalf("chat over the budget: %d", w.Code)
	}
	if st := s.mw.SettleStats(); st != (verdict.SettleStats{}) {
		t.Fatalf("a refused chat settled: %+v", st)
	}
	if got := s.held(); got != 500 {
		t.Fatalf("after a refused chat: %d held, want 500", got)
	}
}

// TestChatSettleAllocatesNothing: a chat admitted, answered and settled
// through the middleware allocates nothing.
func TestChatSettleAllocatesNothing(t *testing.T) {
	s := newService(t)
	h := s.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["X-Tokens-Used"] = used
	}))
	w := &discard{h: http.Header{}}
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("X-Test-User", "alice")
	r.Header.Set("X-Max-Tokens", "300") // 50 back from the bucket each time; the day's window keeps 300
	h.ServeHTTP(w, r)
	if n := testing.AllocsPerRun(1000, func() {
		clear(w.h)
		s.now += atomicbucket.Time(time.Second)
		h.ServeHTTP(w, r)
	}); n != 0 || w.code != 0 {
		t.Errorf("a settled chat: %v allocations a request (status %d), want 0", n, w.code)
	}
	if st := s.mw.SettleStats(); st.Settled != 1002 {
		t.Fatalf("settled %d chats, want 1002", st.Settled)
	}
}

var used = []string{"250"}

// TestCompleteSettlesFromContext: POST /v1/complete settles tier Chat from
// what its handler reports through its request's context
// (verdict.ReportCost), not a header: a report gives the difference back; no
// report keeps the estimate; ReportCost on a route that does not settle
// from its context records nothing and says so.
func TestCompleteSettlesFromContext(t *testing.T) {
	s := newService(t)
	var reported, elsewhere bool
	h := s.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat" {
			elsewhere = verdict.ReportCost(r.Context(), 1)
			return
		}
		if u := r.Header.Get("X-Test-Used"); u != "" {
			n, _ := strconv.ParseInt(u, 10, 64)
			reported = verdict.ReportCost(r.Context(), n)
		}
	}))
	call := func(path, maxTokens, used string) int {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set("X-Test-User", "alice")
		r.Header.Set("X-Max-Tokens", maxTokens)
		if used != "" {
			r.Header.Set("X-Test-Used", used)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	if code := call("/v1/complete", "10000", "2500"); code != 200 || !reported {
		t.Fatalf("a completion that reported 2,500: %d, reported %v", code, reported)
	}
	if got := s.held(); got != 97500 {
		t.Fatalf("after a completion of 10,000 that used 2,500: %d held, want 97500", got)
	}
	call("/v1/complete", "1000", "") // reports nothing: the estimate stays
	if got := s.held(); got != 96500 {
		t.Fatalf("after a completion that reported nothing: %d held, want 96500", got)
	}
	call("/v1/chat", "500", "") // settles from its header: no cell in its context
	if elsewhere {
		t.Fatal("ReportCost on a route that settles from a header recorded a cost")
	}
	if st := s.mw.SettleStats(); st.Settled != 1 || st.Kept != 2 {
		t.Fatalf("settle stats %+v, want 1 settled and 2 kept", st)
	}
}

// TestChatGivesBackFromItsAdmission: a chat whose handler runs two hours
// (past the end of the day window's sub-window of an hour and a half) gives
// back from what the window counted when it was admitted, not from the
// sub-window it ends in: the middleware carries its check's time to its
// settlement.
func TestChatGivesBackFromItsAdmission(t *testing.T) {
	s := newService(t)
	h := s.mw.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.now = s.now.Add(2 * time.Hour)
		w.Header().Set("X-Tokens-Used", "1000")
	}))
	r := httptest.NewRequest("POST", "/v1/chat", nil)
	r.Header.Set("X-Test-User", "alice")
	r.Header.Set("X-Max-Tokens", "16000")
	h.ServeHTTP(httptest.NewRecorder(), r)
	if got := s.lim.DailyTokens.PeekAt("alice", s.now, 0).Remaining; got != 2_000_000-1000 {
		t.Fatalf("the day's window after a long chat that used 1000 of 16,000: %d left, want %d", got, 2_000_000-1000)
	}
}
