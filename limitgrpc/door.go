package limitgrpc

import (
	"context"
	"sync/atomic"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/clientip"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Door is what every generated GRPC is, whatever its policy: the settings a
// service may change before serving (ClientIP, Clock, Config), the unary and
// stream server interceptors, ServerOptions and Coverage over the policy's
// entries, whose checks the generated code holds. A generated GRPC embeds it.
//
// A call's entry is its full method's own, else its service's. A stream is
// checked when it opens, and each message too where its entry counts
// messages (CountMessages). A call no entry covers goes on unchecked:
// Coverage lists a server's methods that no entry covers, or that the
// interceptors made here do not see (a server given UnaryInterceptor alone
// serves its streams unchecked).
type Door struct {
	// ClientIP finds the client address that ip key sources read: the peer,
	// or behind a trusted proxy the client its forwarding metadata names. It
	// starts as the policy's grpc: client_ip.
	ClientIP clientip.Config
	// Clock, when set, is read instead of atomicbucket.Now: tests drive the
	// interceptors through time with it.
	Clock func() atomicbucket.Time
	// Config is what every entry shares: the metadata, the jitter, the
	// counters, the observer. Set it before serving.
	Config Config

	unary, stream atomic.Bool // which interceptors were made, for Coverage
	entries       []string
	entry         func(method string) int
	check         func(ctx context.Context, method string) error
	count         func(ss grpc.ServerStream, method string) grpc.ServerStream
	acquire       func(ctx context.Context, method string) (atomicslot.Set, error)
	settles       func(method string) bool
	admit         func(ctx context.Context, method string) (verdict.Mark, error)
	settle        func(ctx context.Context, method string, trailer metadata.MD, mk verdict.Mark) int64
	fromContext   func(method string) bool
	settled       verdict.SettleCounts
}

// InitDoor makes d the door of a policy's entries (full methods and services,
// in policy order; entry finds a method's, -1 for none): check checks a call
// and returns the status that ends it, or nil; count, when not nil, wraps a
// stream whose entry counts its messages (CountMessages), and returns nil for
// the others. A nil check (every entry off) checks nothing. A generated
// NewGRPC calls it once, before serving.
func InitDoor(d *Door, entries []string, entry func(method string) int, check func(ctx context.Context, method string) error,
	count func(ss grpc.ServerStream, method string) grpc.ServerStream) {
	d.entries, d.entry, d.check, d.count = entries, entry, check, count
}

// InitSlots gives d the acquisitions of its policy's in-flight entries:
// acquire takes the slots of the in-flight rules of method's entry (its
// rule's, or its tier's), or returns the status that ends the call, giving
// back what it took (the zero Set and nil for an entry of no in-flight
// rule). The door acquires before the call's check and gives the slots back
// when the check denies (all or nothing), and releases them when the handler
// returns: at the end of a unary call, or of a stream. A generated NewGRPC
// calls it once, after InitDoor, when its policy's entries check in-flight
// rules.
func InitSlots(d *Door, acquire func(ctx context.Context, method string) (atomicslot.Set, error)) {
	d.acquire = acquire
}

// release returns the slots of s at a reading of the door's clock.
func (d *Door) release(s *atomicslot.Set) {
	if s.Len() > 0 {
		s.ReleaseAt(d.Now())
	}
}

// Now reads the clock once for a check: Clock, or atomicbucket.Now.
func (d *Door) Now() atomicbucket.Time {
	if d.Clock != nil {
		return d.Clock()
	}
	return atomicbucket.Now()
}

// UnaryInterceptor checks each unary call before its handler runs.
func (d *Door) UnaryInterceptor() grpc.UnaryServerInterceptor {
	d.unary.Store(true)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if d.acquire != nil { // a policy of in-flight entries: their slots first
			return d.unaryHeld(ctx, req, info, handler)
		}
		mk, err := d.pass(ctx, info.FullMethod)
		if err != nil {
			return nil, err
		}
		if d.settles != nil && d.settles(info.FullMethod) {
			return d.settleUnary(ctx, req, info.FullMethod, handler, mk)
		}
		return handler(ctx, req)
	}
}

// pass checks a call of method, and returns the status that ends it, or
// nil with its check's mark for its settlement (verdict.Mark).
func (d *Door) pass(ctx context.Context, method string) (verdict.Mark, error) {
	switch {
	case d.admit != nil:
		return d.admit(ctx, method)
	case d.check != nil:
		return verdict.Mark{}, d.check(ctx, method)
	}
	return verdict.Mark{}, nil
}

// unaryHeld is the unary interceptor of a policy with in-flight entries:
// the entry's slots are taken before its check, given back when the check
// denies (all or nothing), and released when the handler returns.
func (d *Door) unaryHeld(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	s, err := d.acquire(ctx, info.FullMethod)
	if err != nil {
		return nil, err
	}
	mk, err := d.pass(ctx, info.FullMethod)
	if err != nil {
		d.release(&s)
		return nil, err
	}
	if s.Len() > 0 {
		defer d.release(&s)
	}
	if d.settles != nil && d.settles(info.FullMethod) {
		return d.settleUnary(ctx, req, info.FullMethod, handler, mk)
	}
	return handler(ctx, req)
}

// StreamInterceptor checks each stream when it opens, before its handler
// runs, and each message of the streams whose entry counts them.
func (d *Door) StreamInterceptor() grpc.StreamServerInterceptor {
	d.stream.Store(true)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		var s atomicslot.Set
		if d.acquire != nil {
			var err error
			if s, err = d.acquire(ss.Context(), info.FullMethod); err != nil {
				return err
			}
		}
		mk, err := d.pass(ss.Context(), info.FullMethod)
		if err != nil {
			d.release(&s)
			return err
		}
		if s.Len() > 0 {
			defer d.release(&s)
		}
		if d.count != nil {
			if counted := d.count(ss, info.FullMethod); counted != nil {
				if d.settles != nil && d.settles(info.FullMethod) {
					return Ended(counted, d.settleStream(srv, counted, info.FullMethod, handler, mk))
				}
				return Ended(counted, handler(srv, counted))
			}
		}
		if d.settles != nil && d.settles(info.FullMethod) {
			return d.settleStream(srv, ss, info.FullMethod, handler, mk)
		}
		return handler(srv, ss)
	}
}

// ServerOptions chains both interceptors onto a server:
// grpc.NewServer(g.ServerOptions()...).
func (d *Door) ServerOptions() []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(d.UnaryInterceptor()),
		grpc.ChainStreamInterceptor(d.StreamInterceptor()),
	}
}

// Coverage compares the policy's entries with the methods s serves (a
// *grpc.Server): unlimited are s's methods no entry covers, and those of a
// kind (unary, streaming) whose interceptor was never made here, which go
// unchecked; stale are the entries that cover none of them, a sign of a
// policy out of step with the service. Both are sorted. Call it once the
// server is set up.
func (d *Door) Coverage(s ServiceInfoProvider) (unlimited, stale []string) {
	return coverage(s, d.entries, d.entry, d.unary.Load(), d.stream.Load())
}
