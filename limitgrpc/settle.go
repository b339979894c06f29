package limitgrpc

import (
	"context"

	"github.com/limitgen/limitgen/verdict"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Settled costs: an entry whose cost is settled after the call (the
// policy's settle: "trailer:name") is checked at an estimate, and when its
// handler returns the interceptors read the actual cost from the trailer
// metadata the handler set (grpc.SetTrailer, or ServerStream.SetTrailer)
// and settle the difference with each rule the call was charged by: given
// back when lower, owed as debt when higher (atomicbucket.Table.SettleAt,
// or a shared rule's store).

// InitSettle gives d the settlements of its policy's settled entries:
// settles reports whether method's entry settles (its calls' trailers are
// then recorded as the handler sets them); admit is the check of every call
// (check's, for an entry that does not settle), returning with its answer
// what the entry's settlement needs of the check (the time its local rules
// read, what a store's window counted); settle settles a call of method
// whose handler returned, with the trailer metadata it set and its check's
// mark, and returns the tokens forgiven, verdict.KeptEstimate,
// verdict.SettleFailed, or verdict.NoSettle. A handler that panics settles
// nothing. A generated NewGRPC calls it once, after InitDoor, when its
// policy settles costs. fromContext, when not nil, says which entries'
// handlers report their cost through their context (verdict.ReportCost):
// their calls' contexts hold a cell for it (verdict.WithCostCell).
func InitSettle(d *Door, settles func(method string) bool, admit func(ctx context.Context, method string) (verdict.Mark, error),
	settle func(ctx context.Context, method string, trailer metadata.MD, mk verdict.Mark) int64, fromContext func(method string) bool) {
	d.settles, d.admit, d.settle, d.fromContext = settles, admit, settle, fromContext
}

// SettleStats returns the door's settlement counts.
func (d *Door) SettleStats() verdict.SettleStats { return d.settled.Stats() }

// TrailerCost reads a settled call's actual cost from the trailer metadata
// its handler set: the first value of key (lower case), by
// verdict.ParseActual. ok is false when there is none or it is malformed:
// the call keeps its estimate.
func TrailerCost(trailer metadata.MD, key string) (cost int64, ok bool) {
	if v := trailer[key]; len(v) > 0 {
		return verdict.ParseActual(v[0])
	}
	return 0, false
}

// trailerRecorder is the call's transport stream as its handler sees it:
// the trailers the handler sets are kept, as well as sent.
type trailerRecorder struct {
	grpc.ServerTransportStream
	md metadata.MD
}

func (t *trailerRecorder) SetTrailer(md metadata.MD) error {
	t.md = metadata.Join(t.md, md)
	return t.ServerTransportStream.SetTrailer(md)
}

// recording returns ctx with a transport stream that keeps the trailers
// its handler sets, and the recorder; ctx itself and nil when ctx has no
// transport stream (a handler called outside a server).
func recording(ctx context.Context) (context.Context, *trailerRecorder) {
	st := grpc.ServerTransportStreamFromContext(ctx)
	if st == nil {
		return ctx, nil
	}
	rec := &trailerRecorder{ServerTransportStream: st}
	return grpc.NewContextWithServerTransportStream(ctx, rec), rec
}

// settledStream is a stream whose trailers are kept as its handler sets
// them, through the stream or through its context.
type settledStream struct {
	grpc.ServerStream
	ctx context.Context
	rec *trailerRecorder
}

func (s *settledStream) Context() context.Context { return s.ctx }

func (s *settledStream) SetTrailer(md metadata.MD) {
	s.rec.md = metadata.Join(s.rec.md, md)
	s.ServerStream.SetTrailer(md)
}

// settleUnary runs a unary handler whose entry settles, and settles the
// call with the trailers it set when it returns.
func (d *Door) settleUnary(ctx context.Context, req any, method string, handler grpc.UnaryHandler, mk verdict.Mark) (any, error) {
	if d.fromContext != nil && d.fromContext(method) {
		ctx = verdict.WithCostCell(ctx)
	}
	ctx, rec := recording(ctx)
	resp, err := handler(ctx, req)
	var md metadata.MD
	if rec != nil {
		md = rec.md
	}
	d.settled.Add(d.settle(ctx, method, md, mk))
	return resp, err
}

// settleStream runs a stream handler whose entry settles, and settles the
// stream with the trailers it set when it returns.
func (d *Door) settleStream(srv any, ss grpc.ServerStream, method string, handler grpc.StreamHandler, mk verdict.Mark) error {
	ctx := ss.Context()
	if d.fromContext != nil && d.fromContext(method) {
		ctx = verdict.WithCostCell(ctx)
	}
	ctx, rec := recording(ctx)
	if rec == nil {
		rec = &trailerRecorder{}
	}
	err := handler(srv, &settledStream{ServerStream: ss, ctx: ctx, rec: rec})
	d.settled.Add(d.settle(ctx, method, rec.md, mk))
	return err
}
