package clientip_test

import (
	"fmt"
	"net/http"
	"net/netip"

	"github.com/limitgen/limitgen/clientip"
)

// Behind a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For: the
// key is the address the balancer saw, never what the client wrote.
func ExampleConfig() {
	ip := clientip.Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}}

	r := &http.Request{RemoteAddr: "10.0.0.7:51234", Header: http.Header{}}
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 198.51.100.9") // 6.6.6.6 is the client's own claim
	key, ok := ip.Key(r.RemoteAddr, r.Header)
	fmt.Println(key, ok)

	direct := &http.Request{RemoteAddr: "[2001:db8:1:2:3:4:5:6]:443", Header: r.Header}
	key, ok = ip.Key(direct.RemoteAddr, direct.Header) // not from a trusted proxy: the header is ignored; IPv6 keyed by its /64
	fmt.Println(key, ok)
	// Output:
	// 198.51.100.9 true
	// 2001:db8:1:2::/64 true
}
