package clientip

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

var trusted = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:ffff::/48")}

// httpRequest is a request from remote with values for header.
func httpRequest(remote string, header string, values ...string) *http.Request {
	r := &http.Request{RemoteAddr: remote, Header: http.Header{}}
	for _, v := range values {
		r.Header.Add(header, v)
	}
	return r
}

// request is what Key reads of httpRequest(remote, header, values...).
func request(remote string, header string, values ...string) (string, http.Header) {
	r := httpRequest(remote, header, values...)
	return r.RemoteAddr, r.Header
}

// lines are a forwarding header's values, as a gRPC call's metadata gives
// them.
type lines []string

func (l lines) Values(string) []string { return l }

// TestClientIPKey: one table, hand-written keys.
func TestClientIPKey(t *testing.T) {
	xff := Config{TrustedProxies: trusted}
	fwd := Config{TrustedProxies: trusted, Header: Forwarded}
	none := Config{}
	v6all := Config{IPv6Prefix: 128}
	v4net := Config{IPv4Prefix: 24}
	short := Config{TrustedProxies: trusted, MaxHops: 2}
	for _, c := range []struct {
		name string
		ip   Config
		r    *http.Request
		want string // "" for no key
	}{
		{"untrusted peer: its header is ignored", xff, httpRequest("203.0.113.7:1234", "X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"no proxies configured", none, httpRequest("203.0.113.7:1234", "X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"trusted peer, one entry", xff, httpRequest("10.0.0.1:5555", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"walk past trusted hops; the leftmost is the client's own claim", xff,
			httpRequest("10.0.0.1:5555", "X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.0.0.2"), "198.51.100.9"},
		{"several header lines, the last written last", xff,
			httpRequest("10.0.0.1:5555", "X-Forwarded-For", "6.6.6.6", "198.51.100.9, 10.0.0.2"), "198.51.100.9"},
		{"an empty line", xff, httpRequest("10.0.0.1:5555", "X-Forwarded-For", "198.51.100.9", ""), "198.51.100.9"},
		{"garbage stops the walk at the trusted hop that wrote it", xff,
			httpRequest("10.0.0.1:5555", "X-Forwarded-For", "garbage, 10.0.0.2"), "10.0.0.2"},
		{"trusted peer, no header", xff, httpRequest("10.0.0.1:5555", ""), "10.0.0.1"},
		{"every entry trusted: the leftmost", xff, httpRequest("10.0.0.1:5555", "X-Forwarded-For", "10.0.0.3, 10.0.0.2"), "10.0.0.3"},
		{"an entry with a port", xff, httpRequest("10.0.0.1:5555", "X-Forwarded-For", "198.51.100.9:4711"), "198.51.100.9"},
		{"IPv4-mapped peer is IPv4", none, httpRequest("[::ffff:203.0.113.7]:80", ""), "203.0.113.7"},
		{"IPv4-mapped entry is IPv4", xff, httpRequest("10.0.0.1:5555", "X-Forwarded-For", "::ffff:198.51.100.9"), "198.51.100.9"},
		{"IPv6 keyed by its /64", none, httpRequest("[2001:db8:1:2:3:4:5:6]:443", ""), "2001:db8:1:2::/64"},
		{"IPv6 keyed by the address", v6all, httpRequest("[2001:db8:1:2:3:4:5:6]:443", ""), "2001:db8:1:2:3:4:5:6"},
		{"zone dropped", none, httpRequest("[fe80::1%eth0]:80", ""), "fe80::/64"},
		{"IPv4 keyed by its /24", v4net, httpRequest("203.0.113.7:1", ""), "203.0.113.0/24"},
		{"trusted IPv6 proxy", xff, httpRequest("[2001:db8:ffff::1]:1", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"no address in RemoteAddr", xff, httpRequest("@", "X-Forwarded-For", "198.51.100.9"), ""},
		{"empty RemoteAddr", xff, httpRequest("", ""), ""},
		{"a chain longer than MaxHops stops at the last hop read", short,
			httpRequest("10.0.0.1:1", "X-Forwarded-For", "198.51.100.9, 10.0.0.4, 10.0.0.3, 10.0.0.2"), "10.0.0.3"},
		{"Forwarded: quoted IPv6 with a port, other parameters", fwd,
			httpRequest("10.0.0.1:1", "Forwarded", `for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https, for=10.0.0.2`), "2001:db8:cafe::/64"},
		{"Forwarded: a comma inside a quoted value, parameter names in any case", fwd,
			httpRequest("10.0.0.1:1", "Forwarded", `for=6.6.6.6, for=198.51.100.9;by="x,y", For=10.0.0.2`), "198.51.100.9"},
		{"Forwarded: an obfuscated identifier stops the walk", fwd,
			httpRequest("10.0.0.1:1", "Forwarded", `for=198.51.100.9, for=_hidden, for=10.0.0.2`), "10.0.0.2"},
		{"Forwarded: unknown stops the walk", fwd, httpRequest("10.0.0.1:1", "Forwarded", `for=unknown`), "10.0.0.1"},
		{"Forwarded: the client's unterminated quote is never reached", fwd,
			httpRequest("10.0.0.1:1", "Forwarded", `for="`, `for=198.51.100.9`), "198.51.100.9"},
		{"Forwarded: an unterminated quote on the same line", fwd,
			httpRequest("10.0.0.1:1", "Forwarded", `for=", for=198.51.100.9`), "198.51.100.9"},
		{"Forwarded: an escaped quote", fwd,
			httpRequest("10.0.0.1:1", "Forwarded", `for=6.6.6.6;by="a\",b", for=198.51.100.9`), "198.51.100.9"},
		{"Forwarded: two for= in one element", fwd, httpRequest("10.0.0.1:1", "Forwarded", `for=198.51.100.9;for=6.6.6.6`), "10.0.0.1"},
		{"Forwarded: no for=", fwd, httpRequest("10.0.0.1:1", "Forwarded", `proto=https`), "10.0.0.1"},
		{"Forwarded is not read when X-Forwarded-For is configured", xff, httpRequest("10.0.0.1:1", "Forwarded", `for=198.51.100.9`), "10.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, ok := c.ip.Key(c.r.RemoteAddr, c.r.Header)
			var buf [64]byte
			if b, bok := c.ip.AppendKey(buf[:0], c.r.RemoteAddr, c.r.Header); bok != ok || string(b) != got {
				t.Fatalf("AppendKey = %q, %v; Key = %q, %v", b, bok, got, ok)
			}
			if c.want == "" {
				if ok {
					t.Fatalf("Key = %q, want none", got)
				}
				return
			}
			if !ok || got != c.want {
				t.Fatalf("Key = %q, %v; want %q", got, ok, c.want)
			}
		})
	}
}

// TestClientIPHostileSizes: ten thousand entries cost a bounded walk, and the
// result is what the right end says.
func TestClientIPHostileSizes(t *testing.T) {
	ip := Config{TrustedProxies: trusted}
	spoof := strings.Repeat("1.1.1.1, ", 10_000)
	if got, _ := ip.Key(request("10.0.0.1:1", "X-Forwarded-For", spoof+"198.51.100.9")); got != "198.51.100.9" {
		t.Fatalf("ten thousand spoofed entries before the client: %q", got)
	}
	chain := strings.Repeat("10.0.0.9, ", 10_000)
	if got, _ := ip.Key(request("10.0.0.1:1", "X-Forwarded-For", "198.51.100.9, "+chain+"10.0.0.2")); got != "10.0.0.9" {
		t.Fatalf("ten thousand trusted hops: %q, want the last one read within MaxHops", got)
	}
	fwd := Config{TrustedProxies: trusted, Header: Forwarded}
	if got, _ := fwd.Key(request("10.0.0.1:1", "Forwarded", strings.Repeat(`for="a,;\"b", `, 10_000)+"for=198.51.100.9")); got != "198.51.100.9" {
		t.Fatalf("Forwarded with ten thousand quoted elements before the client: %q", got)
	}
	if got, _ := ip.Key(request("10.0.0.1:1", "X-Forwarded-For", strings.Repeat("9", 100_000))); got != "10.0.0.1" {
		t.Fatalf("a 100 kB entry: %q, want the trusted peer", got)
	}
}

// BenchmarkClientIPKey: the key of a request from behind two trusted proxies.
// The key string is the one allocation (netip's String).
func BenchmarkClientIPKey(b *testing.B) {
	for _, c := range []struct {
		name string
		ip   Config
		r    *http.Request
	}{
		{"source=peer", Config{}, httpRequest("203.0.113.7:1234", "")},
		{"source=xff", Config{TrustedProxies: trusted}, httpRequest("10.0.0.1:1", "X-Forwarded-For", "6.6.6.6, 198.51.100.9, 10.0.0.2")},
		{"source=forwarded", Config{TrustedProxies: trusted, Header: Forwarded}, httpRequest("10.0.0.1:1", "Forwarded", `for=198.51.100.9;proto=https, for=10.0.0.2`)},
		{"source=peer-ipv6", Config{}, httpRequest("[2001:db8:1:2:3:4:5:6]:443", "")},
	} {
		b.Run(c.name+"/form=string", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, ok := c.ip.Key(c.r.RemoteAddr, c.r.Header); !ok {
					b.Fatal("no key")
				}
			}
		})
		b.Run(c.name+"/form=append", func(b *testing.B) {
			b.ReportAllocs()
			var buf [64]byte
			for b.Loop() {
				if _, ok := c.ip.AppendKey(buf[:0], c.r.RemoteAddr, c.r.Header); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}

// parseIPv4 is a fast path in front of netip.ParseAddr: whatever it accepts,
// ParseAddr reads as the same IPv4 address, whose canonical text is the input
// (the key is that text, unformatted); whatever IPv4 ParseAddr reads from a
// dotted quad, parseIPv4 accepts.
func FuzzParseIPv4(f *testing.F) {
	for _, s := range []string{"192.0.2.1", "0.0.0.0", "255.255.255.255", "01.2.3.4", "1.2.3", "1.2.3.4.5", "256.1.1.1", "1..2.3", "::ffff:1.2.3.4", "", "1.2.3.4 "} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := parseIPv4(s)
		want, err := netip.ParseAddr(s)
		if ok {
			if err != nil || want != got || want.String() != s {
				t.Fatalf("parseIPv4(%q) = %v; ParseAddr: %v, %v", s, got, want, err)
			}
			return
		}
		if err == nil && want.Is4() {
			t.Fatalf("parseIPv4(%q) refused what ParseAddr reads as %v", s, want)
		}
	})
}

// TestPeerKey: a gRPC call's peer is keyed as a request from it is: its own
// address unless it is a trusted proxy, the forwarding header's client then;
// no address, no key.
func TestPeerKey(t *testing.T) {
	c := Config{TrustedProxies: trusted}
	for _, tc := range []struct {
		peer  string
		lines []string
		want  string
		ok    bool
	}{
		{"203.0.113.7", []string{"198.51.100.9"}, "203.0.113.7", true},           // untrusted: its header is not read
		{"10.1.2.3", []string{"6.6.6.6, 198.51.100.9"}, "198.51.100.9", true},    // the rightmost untrusted entry
		{"10.1.2.3", nil, "10.1.2.3", true},                                      // no header: the proxy itself
		{"::ffff:10.1.2.3", []string{"198.51.100.9"}, "198.51.100.9", true},      // mapped: read as IPv4
		{"2001:db8:1:2:3:4:5:6", nil, "2001:db8:1:2::/64", true},                 // IPv6: its /64
		{"2001:db8:ffff::1", []string{"2001:db8:1::9"}, "2001:db8:1::/64", true}, // a trusted IPv6 proxy
		{"", nil, "", false},
	} {
		var peer netip.Addr
		if tc.peer != "" {
			peer = netip.MustParseAddr(tc.peer)
		}
		got, ok := c.PeerKey(peer, lines(tc.lines))
		if got != tc.want || ok != tc.ok {
			t.Errorf("PeerKey(%s, %q) = %q, %v; want %q, %v", tc.peer, tc.lines, got, ok, tc.want, tc.ok)
		}
	}
}
