package clientip

import (
	"net/netip"
	"testing"
)

// FuzzClientIP sends arbitrary peers and forwarding headers. Whatever they
// hold, ClientIP must not panic, must give a bounded key, must ignore the
// headers of an untrusted peer, and, behind trusted proxies, must key the
// client the rightmost entry names, whatever the client wrote to its left.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:5555", "6.6.6.6, 198.51.100.9", false)
	f.Add("10.0.0.1:5555", `for="[2001:db8::1]:80";by="a,b", For=10.0.0.2`, true)
	f.Add("203.0.113.7:1", "1.1.1.1", false)
	f.Add("[::ffff:10.1.2.3]:9", `for="\"`, true)
	f.Add("@", "198.51.100.9", false)
	f.Fuzz(func(t *testing.T, remote, header string, forwarded bool) {
		ip := Config{TrustedProxies: trusted}
		name := "X-Forwarded-For"
		client := "198.51.100.9"
		if forwarded {
			ip.Header, name, client = Forwarded, "Forwarded", "for=198.51.100.9"
		}
		key, ok := ip.Key(request(remote, name, header))
		r := httpRequest(remote, name, header)
		if b, bok := ip.AppendKey(nil, r.RemoteAddr, r.Header); bok != ok || string(b) != key {
			t.Fatalf("AppendKey = %q, %v; Key = %q, %v", b, bok, key, ok)
		}
		if len(key) > 43 {
			t.Fatalf("a %d-byte key: %q", len(key), key)
		}
		peer, _, peerOK := parseNode(remote)
		// A gRPC call's peer is an address, its header a metadata value:
		// PeerKey must key it as Key keys the request.
		if peerOK {
			if pk, pok := ip.PeerKey(peer, lines{header}); !pok || pk != key {
				t.Fatalf("PeerKey(%v, %q) = %q, %v; Key = %q", peer, header, pk, pok, key)
			}
		}
		if ok != peerOK {
			t.Fatalf("Key ok = %v for RemoteAddr %q", ok, remote)
		}
		// With no proxy trusted, Key reads an IPv4 RemoteAddr in one pass:
		// the same key as the address parseNode reads.
		plain := Config{}
		if pk, pok := plain.Key(request(remote, name, header)); pok != peerOK || pok && pk != plain.KeyOf(peer) {
			t.Fatalf("no trusted proxy, RemoteAddr %q: key %q, %v; want %q, %v", remote, pk, pok, plain.KeyOf(peer), peerOK)
		}
		if !ok {
			return
		}
		if !ip.trusted(peer) {
			if key != ip.KeyOf(peer) {
				t.Fatalf("untrusted peer %q: key %q from its headers, want its own %q", remote, key, ip.KeyOf(peer))
			}
			return
		}
		// Behind a trusted peer, the entry the trusted proxy appended decides,
		// whatever is to its left.
		want := ip.KeyOf(netip.MustParseAddr("198.51.100.9"))
		if got, _ := ip.Key(request(remote, name, header, client)); got != want {
			t.Fatalf("trusted peer %q, client-written line %q then %q: key %q, want %q", remote, header, client, got, want)
		}
		if got, _ := ip.Key(request(remote, name, header+", "+client)); got != want {
			t.Fatalf("trusted peer %q, client-written %q, then %q on the same line: key %q, want %q", remote, header, client, got, want)
		}
	})
}
