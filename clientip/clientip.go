// Package clientip finds the client of a request or call behind trusted
// proxies, from its connection's peer and the forwarding header the proxies
// write (X-Forwarded-For, or RFC 7239's Forwarded), and keys it for a rate
// limit: IPv4 clients by their address, IPv6 ones by their network. It knows
// no protocol: an HTTP door gives it r.RemoteAddr and r.Header, a gRPC door
// the peer's address and the call's metadata.
package clientip

import (
	"net/netip"
	"strings"
)

// ForwardingHeader names the header trusted proxies record the client's
// address in.
type ForwardingHeader uint8

const (
	// XForwardedFor is X-Forwarded-For: a comma-separated list of addresses,
	// each proxy appending the address of the peer it received the request from.
	XForwardedFor ForwardingHeader = iota
	// Forwarded is RFC 7239's Forwarded: elements separated by commas, each with
	// a for= parameter (a token, or a quoted string for IPv6 and ports).
	Forwarded
)

// Defaults of Config's zero fields.
const (
	// DefaultIPv6Prefix keys IPv6 clients by their /64: one end site's
	// network is typically a /64 or larger, and a client can pick any address
	// inside it, so keying single addresses would give one client 2^64 keys.
	DefaultIPv6Prefix = 64
	// DefaultMaxHops bounds how many forwarding entries are read from the
	// right. A chain of trusted proxies longer than this is a misconfiguration;
	// the bound keeps a hostile header (ten thousand entries) from costing more
	// than a few entries' work.
	DefaultMaxHops = 32
)

// Config finds a request's client address and keys it. The zero value keys
// the immediate peer and reads no forwarding header.
//
// Forwarding headers are read only when the immediate peer is inside
// TrustedProxies, and from the right: each trusted proxy appends the address it
// received the request from, so the entries to the right were written by
// trusted proxies and the leftmost ones by whoever sent the request (an
// attacker can put anything there). Config walks from the right past entries
// that are themselves trusted proxies, and takes the first entry that is not.
// An entry that is not an address (garbage, "unknown", an obfuscated RFC 7239
// identifier) stops the walk: the client is then the trusted proxy that wrote
// it, which no client can choose. So is a chain of more than MaxHops trusted
// entries, and one made only of trusted entries (a request from inside).
//
// IPv4-mapped IPv6 addresses are read as IPv4, zones are dropped, and IPv6
// clients are keyed by their IPv6Prefix network, IPv4 ones by IPv4Prefix (32:
// the address). A key is at most 43 bytes ("ffff:…:ffff/128").
type Config struct {
	// TrustedProxies are the networks of the proxies in front of the service
	// whose forwarding headers are believed. Write IPv4 networks as IPv4
	// (10.0.0.0/8), not as IPv4-mapped IPv6.
	TrustedProxies []netip.Prefix
	Header         ForwardingHeader // the header the trusted proxies set
	IPv6Prefix     int              // bits of an IPv6 client address that key it; 0 means DefaultIPv6Prefix
	IPv4Prefix     int              // bits of an IPv4 client address that key it; 0 means 32
	MaxHops        int              // forwarding entries read at most; 0 means DefaultMaxHops
}

// Fields reads the values of a forwarding header, in the order they came:
// an http.Header is one (its Values), a door's own type another. name is the
// header's canonical name (Config.HeaderName).
type Fields interface {
	Values(name string) []string
}

// Addr returns the address of the client whose connection's peer is remote
// (as http.Request's RemoteAddr holds it: "192.0.2.1:1234", "[2001:db8::1]:80",
// or an address alone) and whose forwarding header is read from h (only when
// the peer is a trusted proxy; h may be nil when none is), or false when
// remote holds no IP address (a Unix socket, a test that set none): then
// there is no client address to key, and the caller must decide (another key
// source, or a 4xx); it must not fall back to one shared key.
func (c *Config) Addr(remote string, h Fields) (netip.Addr, bool) {
	addr, _, ok := c.client(remote, h)
	return addr, ok
}

// client is Addr, with the text the address was read from when that text is
// its canonical IPv4 form ("" otherwise): the key of an IPv4 client is then
// that text, with nothing to format or allocate.
func (c *Config) client(remote string, h Fields) (netip.Addr, string, bool) {
	peer, text, ok := parseNode(remote)
	if !ok {
		return netip.Addr{}, "", false
	}
	if !c.trusted(peer) || h == nil {
		return peer, text, true
	}
	addr, text := c.forwarded(peer, text, h.Values(c.HeaderName()))
	return addr, text, true
}

// forwarded walks the forwarding header's lines from the right, from the
// trusted peer, to the client (see Config).
func (c *Config) forwarded(peer netip.Addr, text string, lines []string) (netip.Addr, string) {
	client, clientText := peer, text // the innermost trusted hop so far
	hops := 0
	maxHops := c.MaxHops
	if maxHops <= 0 {
		maxHops = DefaultMaxHops
	}
	for i := len(lines) - 1; i >= 0; i-- {
		rest := lines[i]
		for rest != "" { // an empty line has no entries
			var entry string
			if c.Header == Forwarded {
				entry, rest = lastForwardedElement(rest)
			} else {
				entry, rest = lastListItem(rest)
			}
			if hops++; hops > maxHops {
				return client, clientText
			}
			addr, text, ok := c.entryAddr(entry)
			if !ok {
				return client, clientText // not an address: the trusted hop that wrote it is the client
			}
			if !c.trusted(addr) {
				return addr, text
			}
			client, clientText = addr, text
		}
	}
	return client, clientText
}

// HeaderName is the canonical name of the forwarding header c reads:
// "X-Forwarded-For" or "Forwarded" (gRPC's metadata spells them in lower
// case).
func (c *Config) HeaderName() string {
	if c.Header == Forwarded {
		return "Forwarded"
	}
	return "X-Forwarded-For"
}

// Trusts reports whether peer is one of the trusted proxies: only then is
// a forwarding header read.
func (c *Config) Trusts(peer netip.Addr) bool {
	return peer.IsValid() && c.trusted(peer.Unmap().WithZone(""))
}

// PeerKey is Key for a caller known by its peer's address rather than its
// text (what a gRPC server knows of a call), with the forwarding header read
// from h only when the peer is a trusted proxy. False when peer is not an
// address (the peer of a Unix socket, of an in-memory listener).
func (c *Config) PeerKey(peer netip.Addr, h Fields) (string, bool) {
	if !peer.IsValid() {
		return "", false
	}
	addr, text := peer.Unmap().WithZone(""), ""
	if c.trusted(addr) && h != nil {
		addr, text = c.forwarded(addr, "", h.Values(c.HeaderName()))
	}
	if text != "" && c.bitsFor(addr) == 32 {
		return text, true
	}
	return c.KeyOf(addr), true
}

// Key returns the key of the client (remote and h as for Addr): its address,
// or for IPv6 (and IPv4 with IPv4Prefix below 32) its network in CIDR form;
// false as for Addr. An IPv4 client's key is the text the address came in
// (remote, or the forwarding header), which is already canonical: no
// allocation.
func (c *Config) Key(remote string, h Fields) (string, bool) {
	if len(c.TrustedProxies) == 0 && (c.IPv4Prefix <= 0 || c.IPv4Prefix >= 32) {
		// No forwarding header is read, and an IPv4 key is its address: the
		// text of remote's, when it is one.
		if host, ok := peerIPv4(remote); ok {
			return host, true
		}
	}
	addr, text, ok := c.client(remote, h)
	if !ok {
		return "", false
	}
	if text != "" && c.bitsFor(addr) == 32 {
		return text, true
	}
	return c.KeyOf(addr), true
}

// AppendKey appends the client's key to dst, as Key returns it, without
// allocating when dst has room (64 bytes always are).
func (c *Config) AppendKey(dst []byte, remote string, h Fields) ([]byte, bool) {
	addr, _, ok := c.client(remote, h)
	if !ok {
		return dst, false
	}
	bits := c.bitsFor(addr)
	if bits == addr.BitLen() {
		return addr.AppendTo(dst), true
	}
	p, _ := addr.Prefix(bits) // bits is in range for addr's family
	return p.AppendTo(dst), true
}

// KeyOf is the key of a client address.
func (c *Config) KeyOf(addr netip.Addr) string {
	bits := c.bitsFor(addr)
	if bits == addr.BitLen() {
		return addr.String()
	}
	p, _ := addr.Prefix(bits) // bits is in range for addr's family
	return p.String()
}

// bitsFor is the prefix length that keys addr.
func (c *Config) bitsFor(addr netip.Addr) int {
	bits := c.IPv4Prefix
	if bits <= 0 || bits > 32 {
		bits = 32
	}
	if addr.Is6() {
		bits = c.IPv6Prefix
		if bits <= 0 || bits > 128 {
			bits = DefaultIPv6Prefix
		}
	}
	return bits
}

// trusted reports whether addr is inside one of the trusted networks.
func (c *Config) trusted(addr netip.Addr) bool {
	for _, p := range c.TrustedProxies {
		if p.Contains(addr) {
			return true
		}
	}
	return false
}

// entryAddr reads one forwarding entry: an X-Forwarded-For item, or the for=
// parameter of a Forwarded element; with the canonical IPv4 text as parseNode.
func (c *Config) entryAddr(entry string) (netip.Addr, string, bool) {
	if c.Header == Forwarded {
		v, ok := forParam(entry)
		if !ok {
			return netip.Addr{}, "", false
		}
		entry = v
	}
	return parseNode(strings.TrimSpace(entry))
}

// parseNode reads an address, with or without a port, IPv6 bracketed or not:
// "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]", "[2001:db8::1]:80".
// The port, whatever it holds (RFC 7239 allows an obfuscated one), is
// dropped. IPv4-mapped addresses are unmapped and zones dropped. It tells the
// forms apart by their syntax rather than by trying each parser in turn, so a
// well-formed entry costs no error allocation. text is the address's text when
// it was written as plain IPv4, which netip only accepts in canonical form (no
// leading zeros): then text is what addr.String() would return; "" otherwise.
func parseNode(s string) (addr netip.Addr, text string, ok bool) {
	if s == "" || len(s) > 64 { // longer than any address with a port
		return netip.Addr{}, "", false
	}
	host := s
	switch colon := strings.IndexByte(s, ':'); {
	case s[0] == '[':
		end := strings.LastIndexByte(s, ']') // the last: a zone may hold one, as net/netip reads it
		if end < 0 || end+1 < len(s) && s[end+1] != ':' {
			return netip.Addr{}, "", false
		}
		host = s[1:end]
	case colon >= 0 && strings.IndexByte(s[colon+1:], ':') < 0:
		host = s[:colon] // IPv4 and a port: IPv6 has two colons at least
	}
	if a, ok := parseIPv4(host); ok {
		return a, host, true
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	if a.Is4() {
		return a, host, true
	}
	return a.Unmap().WithZone(""), "", true
}

// parseIPv4 reads s when it is a dotted-quad IPv4 address in the form
// netip.ParseAddr accepts (four decimal octets up to 255, no leading zeros),
// and reports false for anything else, which netip.ParseAddr then reads. It is
// the common case of every request, at a third of ParseAddr's cost.
func parseIPv4(s string) (netip.Addr, bool) {
	ip, n, ok := scanIPv4(s)
	if !ok || n != len(s) {
		return netip.Addr{}, false
	}
	return netip.AddrFrom4(ip), true
}

// scanIPv4 reads a dotted-quad IPv4 address in netip's form from the start
// of s, up to its end or a ':', and returns it and where it stopped. An octet
// is read by its length (one to three digits) with its digits weighed at
// once, not folded one after the other: keying a request by its address is
// mostly this.
func scanIPv4(s string) (ip [4]byte, n int, ok bool) {
	for field := range 4 {
		if field > 0 {
			if n >= len(s) || s[n] != '.' {
				return ip, n, false
			}
			n++
		}
		if n >= len(s) {
			return ip, n, false
		}
		d0 := uint(s[n]) - '0'
		if d0 > 9 {
			return ip, n, false
		}
		if n+1 >= len(s) || uint(s[n+1])-'0' > 9 {
			ip[field], n = byte(d0), n+1
			continue
		}
		if d0 == 0 { // a leading zero
			return ip, n, false
		}
		d1 := uint(s[n+1]) - '0'
		if n+2 >= len(s) || uint(s[n+2])-'0' > 9 {
			ip[field], n = byte(d0*10+d1), n+2
			continue
		}
		v := d0*100 + d1*10 + (uint(s[n+2]) - '0')
		if v > 255 || n+3 < len(s) && uint(s[n+3])-'0' <= 9 {
			return ip, n, false
		}
		ip[field], n = byte(v), n+3
	}
	if n < len(s) && s[n] != ':' {
		return ip, n, false
	}
	return ip, n, true
}

// peerIPv4 is the text of RemoteAddr's IPv4 address, when it is one in
// netip's form, with or without a port (what parseNode reads as such), in
// one pass: Key's common case when no proxy is trusted.
func peerIPv4(s string) (string, bool) {
	if len(s) > 64 {
		return "", false
	}
	_, n, ok := scanIPv4(s)
	if !ok || n < len(s) && strings.IndexByte(s[n+1:], ':') >= 0 {
		return "", false
	}
	return s[:n], true
}
