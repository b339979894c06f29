package storetest

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/internal/sharedlimits"
)

// GeneratedSettle: settled costs on the store, through the generated
// middleware of two instances (sharedpolicy.yaml's POST /chat: tier Chat of
// ChatTokens, 1,000 tokens of burst refilled at one a second, and ChatHour,
// a window of 100,000 an hour; admitted at X-Max-Tokens and settled from
// X-Tokens-Used). A chat that used less than it declared gives the rest
// back to the bucket for the other instance's chats, and to the window;
// one that used more leaves its user in debt on the store, and the window
// counts the excess: the other instance refuses the user until refill has
// repaid it. A store that stops between a chat's check and its settlement
// settles nothing, and the door counts it failed.
func GeneratedSettle(t *testing.T, instance func() *sharedlimits.Limits, stop func()) {
	var mws [2]*sharedlimits.Middleware
	var muxes [2]http.Handler
	for i := range mws {
		mws[i] = middleware(t, instance())
		mux := mws[i].NewServeMux()
		mux.HandleFunc("POST /chat", func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Stop") != "" {
				stop() // the store goes while the chat runs
			}
			w.Header().Set("X-Tokens-Used", r.Header.Get("X-Test-Used"))
		})
		muxes[i] = mux
	}
	chat := func(i int, user string, declared, used int64, extra ...string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/chat", nil)
		r.Header.Set("X-User", user)
		r.Header.Set("X-Max-Tokens", strconv.FormatInt(declared, 10))
		r.Header.Set("X-Test-Used", strconv.FormatInt(used, 10))
		for _, h := range extra {
			r.Header.Set(h, "1")
		}
		w := httptest.NewRecorder()
		muxes[i].ServeHTTP(w, r)
		return w
	}
	// ann declares all 1,000 tokens on instance 0 and uses 100: 900 come back,
	// so instance 1 admits a chat of 900 (it would refuse one without them).
	if w := chat(0, "ann", 1000, 100); w.Code != 200 {
		t.Fatalf("ann's first chat: %d", w.Code)
	}
	if w := chat(1, "ann", 900, 900); w.Code != 200 {
		t.Fatalf("ann's chat of 900 on the other instance, after 900 came back: %d %s", w.Code, w.Body)
	}
	// bob declares 10 and uses 1,010 on instance 0: he owes 10 on the store.
	// Instance 1 refuses him a token until about 11 seconds have refilled
	// the debt and the token (a second a token).
	if w := chat(0, "bob", 10, 1010); w.Code != 200 {
		t.Fatalf("bob's chat: %d", w.Code)
	}
	w := chat(1, "bob", 1, 1)
	ra, _ := strconv.Atoi(w.Header().Get("Retry-After"))
	if w.Code != http.StatusTooManyRequests || ra < 9 || ra > 11 {
		t.Fatalf("bob in debt, on the other instance: %d, Retry-After %q; want 429 and about 11", w.Code, w.Header().Get("Retry-After"))
	}
	// The hour's window on the store: what ann used, 100 and 900 (the 900
	// she did not use given back where the store counted her first chat),
	// bob's 10 and the 1,000 beyond it.
	probe := instance()
	for user, want := range map[string]int64{"ann": 100000 - 1000, "bob": 100000 - 1010} {
		if got := probe.ChatHour.AllowN(context.Background(), user, 0); got.Err != nil || got.Remaining != want {
			t.Fatalf("%s's hour on the store: %+v, want %d remaining", user, got, want)
		}
	}
	if got := mws[0].SettleStats(); got.Settled != 2 || got.Kept != 0 || got.Failed != 0 {
		t.Fatalf("instance 0's settlements: %+v, want 2 settled", got)
	}
	// The store stops while carl's chat runs: its settlement cannot be made.
	if w := chat(0, "carl", 5, 500, "X-Stop"); w.Code != 200 {
		t.Fatalf("carl's chat: %d", w.Code)
	}
	if got := mws[0].SettleStats(); got.Failed != 1 || got.Settled != 2 {
		t.Fatalf("after the store stopped mid-chat, instance 0's settlements: %+v, want 1 failed", got)
	}
}

// GeneratedWindowGiveBack: a leased window settled through the generated
// middleware of two instances (sharedpolicy.yaml's POST /summarize/{user}:
// QuotaLeased, 10 an hour a user, each instance leasing up to 4; admitted
// at X-Max and settled from X-Used). What a summary did not use goes back
// to the grant it was spent from while that grant is its instance's (the
// instance admits it again without a call), and to the store once the grant
// is over (the other instance can have it). Every admission otherwise stays
// counted: the store never admits more than the 10 used.
func GeneratedWindowGiveBack(t *testing.T, instance func() *sharedlimits.Limits) {
	var muxes [2]http.Handler
	for i := range muxes {
		mux := middleware(t, instance()).NewServeMux()
		mux.HandleFunc("POST /summarize/{user}", func(w http.ResponseWriter, r *http.Request) {
			if d, err := time.ParseDuration(r.Header.Get("X-Sleep")); err == nil {
				time.Sleep(d) // past the grant's term
			}
			w.Header().Set("X-Used", r.Header.Get("X-Test-Used"))
		})
		muxes[i] = mux
	}
	summarize := func(i int, user string, declared, used int64, sleep string) int {
		r := httptest.NewRequest("POST", "/summarize/"+user, nil)
		r.Header.Set("X-Max", strconv.FormatInt(declared, 10))
		r.Header.Set("X-Test-Used", strconv.FormatInt(used, 10))
		r.Header.Set("X-Sleep", sleep)
		w := httptest.NewRecorder()
		muxes[i].ServeHTTP(w, r)
		return w.Code
	}
	// ann on instance 0: a grant of 4, all spent, 3 given back to it.
	if code := summarize(0, "ann", 4, 1, ""); code != 200 {
		t.Fatalf("ann's first summary: %d", code)
	}
	// Instance 1 has the 6 the store does not count for instance 0's grant,
	// and no more: the 3 given back stay with that grant.
	if code := summarize(1, "ann", 6, 6, ""); code != 200 {
		t.Fatalf("ann's summary of 6 on instance 1: %d", code)
	}
	if code := summarize(1, "ann", 1, 1, ""); code != http.StatusTooManyRequests {
		t.Fatalf("ann's seventh unit on instance 1, while instance 0's grant holds 4: %d, want 429", code)
	}
	// Instance 0 admits 3 from its grant's 3 given back, without a call;
	// then nothing more on either: the store counts 10.
	if code := summarize(0, "ann", 3, 3, ""); code != 200 {
		t.Fatalf("ann's summary of 3 from the units given back to instance 0's grant: %d", code)
	}
	if code := summarize(0, "ann", 1, 1, ""); code != http.StatusTooManyRequests {
		t.Fatalf("ann's eleventh unit on instance 0: %d, want 429", code)
	}
	// bob on instance 0 uses nothing of 4 and ends after the grant's term:
	// the 4 go back to the store, and instance 1 has all 10.
	if code := summarize(0, "bob", 4, 0, "1100ms"); code != 200 {
		t.Fatalf("bob's first summary: %d", code)
	}
	if code := summarize(1, "bob", 10, 10, ""); code != 200 {
		t.Fatalf("bob's summary of 10 on instance 1, after instance 0's 4 went back to the store: %d", code)
	}
}
