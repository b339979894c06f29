package limits_test

import (
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
)

// FuzzMiddleware sends hostile requests through policy.yaml's middleware:
// any RemoteAddr, X-Forwarded-For and Forwarded values, any declared upload
// cost. Whatever comes in: no panic; a status the policy can give; from a peer
// outside the trusted 10.0.0.0/8, the login bucket charged is the peer's own
// and no other (never a key the headers chose); and an upload takes exactly
// the cost the policy reads (the declared digits when they are 1 to 1000, the
// default 10 when they are not digits, nothing when above 1000), never more.
func FuzzMiddleware(f *testing.F) {
	f.Add("203.0.113.5:1", "6.6.6.6, 198.51.100.7", `for="[2001:db8::1]:80"`, "25")
	f.Add("10.0.0.1:1", strings.Repeat("1.2.3.4, ", 10_000), `for=_hidden, for="unknown"`, "1e9")
	f.Add("[::ffff:10.0.0.1]:1", "::1, 198.51.100.7", `For="\"quoted\""`, "-1")
	f.Add("10.0.0.1:1", "198.51.100.7,,, ,10.0.0.2", "for=10.0.0.3", "0x10")
	f.Add("garbage", "é, 💥", "\x00", strings.Repeat("9", 1000))
	f.Add("[2001:db8::1%eth0]:443", "", "", "0001000")
	f.Fuzz(func(t *testing.T, remote, xff, fwd, units string) {
		lims := limits.New()
		mw, err := limits.NewMiddleware(lims, limits.Hooks{
			UserID: func(r *http.Request) (string, bool) { return "u", true },
			PlanOf: func(r *http.Request) (limits.Plan, bool) { return limits.PlanFree, true },
		})
		if err != nil {
			t.Fatal(err)
		}
		mw.Config.Observer = nil
		now := atomicbucket.Now()
		mw.Clock = func() atomicbucket.Time { return now }
		mux := mw.NewServeMux()
		mux.HandleFunc("POST /v1/login", func(http.ResponseWriter, *http.Request) {})
		mux.HandleFunc("POST /v1/upload", func(http.ResponseWriter, *http.Request) {})

		r := httptest.NewRequest("POST", "/v1/login", nil)
		r.RemoteAddr = remote
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["Forwarded"] = []string{fwd}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		if w.Code != 200 && w.Code != 401 {
			t.Fatalf("login: status %d", w.Code)
		}
		// ClientIP reads at most 64 bytes of an address (the longest real one,
		// a full IPv6 address with a 15-byte interface zone and a port, is 63);
		// a longer RemoteAddr is no address, and the request is refused.
		peer, peerErr := netip.ParseAddrPort(remote)
		if peerErr == nil && len(remote) <= 64 && !netip.MustParsePrefix("10.0.0.0/8").Contains(peer.Addr().Unmap()) {
			if w.Code != 200 || lims.Login.Len() != 1 {
				t.Fatalf("untrusted peer %q: status %d, %d login keys", remote, w.Code, lims.Login.Len())
			}
			key := peer.Addr().Unmap().WithZone("")
			k := key.String()
			if key.Is6() {
				p, _ := key.Prefix(64)
				k = p.String()
			}
			if d := lims.Login.PeekAt(k, now, 3); d.Allowed { // a new key has 3; one was taken
				t.Fatalf("untrusted peer %q: its own key %q was not charged (headers %q, %q)", remote, k, xff, fwd)
			}
		}
		if lims.Login.Len() > 1 {
			t.Fatalf("one request charged %d login keys", lims.Login.Len())
		}

		r = httptest.NewRequest("POST", "/v1/upload", nil)
		r.Header["X-Upload-Units"] = []string{units}
		w = httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		taken := int64(1000) - lims.Upload.PeekAt("u", now, 0).Remaining
		if lims.Upload.Len() == 0 {
			taken = 0
		}
		want, code := uploadCost(units)
		if w.Code != code || taken != want {
			t.Fatalf("upload with X-Upload-Units %q: status %d, %d tokens taken; want %d, %d", units, w.Code, taken, code, want)
		}
	})
}

// uploadCost is what policy.yaml says an upload declaring units costs, read
// with strconv: the status and the tokens taken.
func uploadCost(units string) (int64, int) {
	for _, c := range units {
		if c < '0' || c > '9' {
			return 10, 200 // not a number: the default
		}
	}
	n, err := strconv.ParseUint(units, 10, 64)
	switch {
	case units == "":
		return 10, 200
	case err != nil: // digits, but more than a uint64 holds
		return 0, 400
	case n == 0:
		return 10, 200
	case n > 1000:
		return 0, 400
	}
	return int64(n), 200
}
