package limithttp

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/limitgen/limitgen/pace"
)

// Obey is an http.RoundTripper for a client of a rate-limited service: it
// paces its requests by the RateLimit-Policy and RateLimit fields of the
// responses (pace.Pacer: no request while the last response said none is
// left, until its t or its quota's time per token), and when a response is
// 429 or 503 with a Retry-After, waits that long and sends the request again
// (at most Retries times; a request whose body cannot be sent again,
// without GetBody, is not). It keeps a pace.Pacer per host. Next is the transport
// that sends the requests (http.DefaultTransport when nil).
type Obey struct {
	Next    http.RoundTripper
	Retries int // denials sent again; 0 means 3

	pacers sync.Map // host → *pace.Pacer
}

// RoundTrip sends req when the host's pacer lets it, and again after a
// denial's Retry-After.
func (o *Obey) RoundTrip(req *http.Request) (*http.Response, error) {
	next := o.Next
	if next == nil {
		next = http.DefaultTransport
	}
	p := o.pacer(req.URL.Host)
	retries := o.Retries
	if retries <= 0 {
		retries = 3
	}
	for attempt := 0; ; attempt++ {
		if err := p.Wait(req.Context()); err != nil {
			return nil, err
		}
		resp, err := next.RoundTrip(req)
		if err != nil {
			return nil, err
		}
		h := resp.Header
		denied := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
		wait, hasWait := retryAfter(h.Get(HeaderRetryAfter))
		p.Observe(h.Get(HeaderPolicy), h.Get(HeaderRateLimit), denied && hasWait, wait)
		if !denied || !hasWait || attempt >= retries {
			return resp, nil
		}
		again := req
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return resp, nil // its body is spent: the caller decides
			}
			body, err := req.GetBody()
			if err != nil {
				return resp, nil
			}
			again = req.Clone(req.Context())
			again.Body = body
		}
		io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) //nolint:errcheck // draining for reuse
		resp.Body.Close()
		req = again
	}
}

func (o *Obey) pacer(host string) *pace.Pacer {
	if p, ok := o.pacers.Load(host); ok {
		return p.(*pace.Pacer)
	}
	p, _ := o.pacers.LoadOrStore(host, &pace.Pacer{})
	return p.(*pace.Pacer)
}

// retryAfter reads a Retry-After of delay-seconds (an HTTP date is read too,
// as the time until it).
func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
		return time.Duration(min(n, 1<<30)) * time.Second, true
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(time.Until(t), 0), true
	}
	return 0, false
}
