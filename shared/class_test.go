package shared

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/limitgen/limitgen/verdict"
)

// A check's error reaches a door's events with its class through
// verdict.ClassedError, found with errors.As: a Result's Err (classed) by
// ErrorClass over its whole chain, and this package's own errors wherever
// they are wrapped (a generated package's "no store given").
func TestErrorsNameTheirClass(t *testing.T) {
	for _, c := range []struct {
		err   error
		class string
	}{
		{fmt.Errorf("redis: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "unavailable"},
		{fmt.Errorf("%w: %w", ErrOverload, ErrLeaseWait), "lease_wait"},
		{fmt.Errorf("s: %w", ErrCircuitOpen), "circuit_open"},
		{errors.New("something else"), "store"},
	} {
		var cl verdict.ClassedError
		err := classed(c.err)
		if !errors.As(err, &cl) || cl.ErrorClass() != c.class || err.Error() != c.err.Error() || !errors.Is(err, c.err) {
			t.Errorf("classed(%v): class %q, text %q; want %q, the same text, and the error within", c.err, cl.ErrorClass(), err, c.class)
		}
	}
	for err, class := range map[error]string{ErrNoStore: "no_store", ErrClosed: "closed", ErrUnavailable: "unavailable",
		ErrInvalidStep: "invalid", ErrOverload: "overload", ErrLeaseWait: "lease_wait", ErrCircuitOpen: "circuit_open"} {
		var cl verdict.ClassedError
		if !errors.As(fmt.Errorf("pkg: %w", err), &cl) || cl.ErrorClass() != class || ErrorClass(err) != class {
			t.Errorf("%v wrapped: no class %q", err, class)
		}
	}
	if classed(nil) != nil {
		t.Error("classed(nil) is not nil")
	}
}
