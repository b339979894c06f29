package limitgrpc

import (
	"context"
	"strconv"
	"sync"
	"time"

	"github.com/limitgen/limitgen/pace"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Obey makes the client interceptors of a client of a rate-limited service:
// each call and each stream's opening waits until the method's pacer lets it
// (pace.Pacer, by the ratelimit-policy and ratelimit metadata of the
// answers: a server with metadata: all sends them on every call, the default
// on denials only), and a unary call denied with a wait
// (RESOURCE_EXHAUSTED or UNAVAILABLE with grpc-retry-pushback-ms or a
// RetryInfo) is sent again after it, at most Retries times. A stream's
// denial tells the pacer the wait, for the next stream. The zero Obey is
// ready to use; keep one per client connection.
type Obey struct {
	Retries int // denied unary calls sent again; 0 means 3

	pacers sync.Map // full method → *pace.Pacer
}

// DialOptions are the interceptors as options for grpc.NewClient.
func (o *Obey) DialOptions() []grpc.DialOption {
	return []grpc.DialOption{grpc.WithChainUnaryInterceptor(o.Unary()), grpc.WithChainStreamInterceptor(o.Stream())}
}

func (o *Obey) pacer(method string) *pace.Pacer {
	if p, ok := o.pacers.Load(method); ok {
		return p.(*pace.Pacer)
	}
	p, _ := o.pacers.LoadOrStore(method, &pace.Pacer{})
	return p.(*pace.Pacer)
}

// Unary is the unary client interceptor.
func (o *Obey) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		p := o.pacer(method)
		retries := o.Retries
		if retries <= 0 {
			retries = 3
		}
		for attempt := 0; ; attempt++ {
			if err := p.Wait(ctx); err != nil {
				return status.FromContextError(err).Err()
			}
			var hdr, tr metadata.MD
			err := invoker(ctx, method, req, reply, cc, append(opts, grpc.Header(&hdr), grpc.Trailer(&tr))...)
			md := hdr
			if err != nil {
				md = tr
			}
			wait, denied := denialWait(err, tr)
			p.Observe(first(md, KeyPolicy), first(md, KeyRateLimit), denied, wait)
			if !denied || wait <= 0 || attempt >= retries {
				return err
			}
		}
	}
}

// Stream is the stream client interceptor: a stream opens when its method's
// pacer lets it, and what its header and its end say is told to the pacer.
func (o *Obey) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		p := o.pacer(method)
		if err := p.Wait(ctx); err != nil {
			return nil, status.FromContextError(err).Err()
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			wait, denied := denialWait(err, nil)
			p.Observe("", "", denied, wait)
			return nil, err
		}
		return &obeyedStream{ClientStream: cs, p: p}, nil
	}
}

type obeyedStream struct {
	grpc.ClientStream
	p    *pace.Pacer
	once sync.Once
}

// RecvMsg receives, and tells the pacer the stream's header (once) and how
// it ended when it ended with a denial.
func (s *obeyedStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	s.once.Do(func() {
		if hdr, herr := s.ClientStream.Header(); herr == nil && len(hdr) > 0 {
			s.p.Observe(first(hdr, KeyPolicy), first(hdr, KeyRateLimit), false, 0)
		}
	})
	if err != nil {
		tr := s.ClientStream.Trailer()
		if wait, denied := denialWait(err, tr); denied {
			s.p.Observe(first(tr, KeyPolicy), first(tr, KeyRateLimit), true, wait)
		}
	}
	return err
}

// denialWait is the wait a denial asks for: its grpc-retry-pushback-ms, else
// its RetryInfo; denied is false for any other outcome.
func denialWait(err error, tr metadata.MD) (time.Duration, bool) {
	st, ok := status.FromError(err)
	if err == nil || !ok || st.Code() != codes.ResourceExhausted && st.Code() != codes.Unavailable {
		return 0, false
	}
	if v := first(tr, KeyPushback); v != "" {
		if ms, err := strconv.ParseInt(v, 10, 64); err == nil && ms >= 0 {
			return time.Duration(ms) * time.Millisecond, true
		}
	}
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.RetryDelay != nil {
			return ri.RetryDelay.AsDuration(), true
		}
	}
	return 0, true
}

// first is md's first value of key, or "".
func first(md metadata.MD, key string) string {
	if v := md.Get(key); len(v) > 0 {
		return v[0]
	}
	return ""
}
