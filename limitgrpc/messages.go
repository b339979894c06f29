package limitgrpc

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/status"
)

// Messages is how a stream's messages are counted: each message received
// (Recv) and, or, sent (Send) is checked against the stream's rule or tier
// at its cost, by Check, which reads the stream's keys from its context as
// the check at its opening did and returns the decision unanswered (or the
// status that ends the stream when it has no key). A denied message ends the
// stream with the denial (ResourceExhausted, RetryInfo and the pushback, as
// a unary call's), or, with Pace, waits until its tokens are there and goes
// on: a paced message is counted once, when it is admitted, and a wait that
// the stream's context does not outlast ends the stream with the context's
// status. A message that can never be admitted (its cost above the burst)
// ends the stream whatever Pace says.
type Messages struct {
	Mode       verdict.Mode
	Recv, Send bool
	Pace       bool
	Check      func(ctx context.Context) (verdict.Result, string, error)
}

// CountMessages returns ss with its messages counted as m says, answered by
// c. The generated stream interceptor wraps the streams of the entries whose
// policy counts messages.
func CountMessages(ss grpc.ServerStream, c *Config, m Messages) grpc.ServerStream {
	if m.Mode == verdict.Off || !m.Recv && !m.Send {
		return ss
	}
	return &countedStream{ServerStream: ss, c: c, m: m}
}

type countedStream struct {
	grpc.ServerStream
	c      *Config
	m      Messages
	denied atomic.Pointer[error] // the denial that ended the stream, if one did (RecvMsg and SendMsg may run on two goroutines)
}

// Ended is the status a stream's handler ends it with: the denial of a
// message, when one ended it (a handler may report a failed SendMsg as
// something else: grpc's health service says Canceled), else err.
func Ended(ss grpc.ServerStream, err error) error {
	if s, ok := ss.(*countedStream); ok {
		if d := s.denied.Load(); d != nil {
			return *d
		}
	}
	return err
}

// RecvMsg receives a message, then counts it: a denied one ends the stream.
func (s *countedStream) RecvMsg(msg any) error {
	if err := s.ServerStream.RecvMsg(msg); err != nil || !s.m.Recv {
		return err
	}
	return s.take()
}

// SendMsg counts a message, then sends it when it is admitted.
func (s *countedStream) SendMsg(msg any) error {
	if s.m.Send {
		if err := s.take(); err != nil {
			return err
		}
	}
	return s.ServerStream.SendMsg(msg)
}

// take checks one message: answered as a call is (Respond), but for a
// paced denial, which waits and checks again.
func (s *countedStream) take() error {
	ctx := s.Context()
	for {
		res, key, err := s.m.Check(ctx)
		if err != nil {
			return err
		}
		if res.Policy == nil {
			return nil // refused unchecked on a Shadow route (no key): recorded, let through
		}
		d := res.Decision
		if s.m.Pace && s.m.Mode == verdict.Enforce && !d.Allowed && !res.Outage && d.RetryAfter > 0 && d.RetryAfter != atomicbucket.Never {
			t := time.NewTimer(d.RetryAfter)
			select {
			case <-t.C:
				continue
			case <-ctx.Done():
				t.Stop()
				return status.FromContextError(ctx.Err()).Err()
			}
		}
		if err := s.c.respondMessage(ctx, s.m.Mode, &res, key); err != nil {
			s.denied.Store(&err)
			return err
		}
		return nil
	}
}

// respondMessage answers a message's decision as Respond answers a call's,
// but that an admitted message sets no header metadata (the stream's is its
// opening's): a denied one ends the stream as a denied call ends.
func (c *Config) respondMessage(ctx context.Context, mode verdict.Mode, res *verdict.Result, key string) error {
	return c.respond(ctx, mode, res, key, false)
}
