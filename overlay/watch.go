package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Source is where a generated package's numbers come from: an overlay file
// (yamlfile.Source), a table (pgstore.NumbersSource), a hash
// (redisstore.NumbersSource). Watch reads it whole each time.
type Source interface {
	// String names the source in reports ("numbers.yaml", "PostgreSQL
	// table limitgen_numbers").
	String() string
	// Load reads the whole source as a Set. An entry that does not read is
	// in the Set with its Err, so that the Set's refusal names every
	// problem at once; an error is a source that could not be read (a file
	// missing, a server down), or a whole form that is wrong.
	Load(ctx context.Context) (Set, error)
}

// Notifier is a Source that tells when it may have changed (a
// notification, a message), so that Watch reads it at once rather than at
// its next refresh.
type Notifier interface {
	Source
	// Changes returns a channel that receives after every change, from one
	// made right after Changes returns (it is listening by then, or says
	// why not through report), until ctx is done. Problems with the
	// notifications themselves go to report, and nil once it listens again;
	// Watch reports each change of that state once.
	Changes(ctx context.Context, report func(error)) <-chan struct{}
}

// ErrSettling is what a Source's Load says of a content it has seen change
// but does not take yet (a file read while it may be being written): no
// news, to be read again. Watch neither applies nor reports anything for it.
var ErrSettling = errors.New("overlay: the source is changing; read it again")

// DefaultRefresh is how often Watch reads a source without a notice unless
// WatchOptions say: a safety net for a notifier (which may lose notices
// while disconnected), the whole mechanism for a file.
const DefaultRefresh = time.Minute

// WatchOptions configure Watch.
type WatchOptions struct {
	// Refresh is how often the source is read without a notice
	// (DefaultRefresh when 0 or less).
	Refresh time.Duration
	// Report is given each change of the source's state: the first error,
	// and then an error that says something else; while the same error
	// persists it is not repeated, and when the source is applied again the
	// next error is new. nil logs with log/slog's default logger, so that a
	// source that stopped applying is never silent.
	Report func(error)
	// Applied, if set, is called after each Set applied, with its entries.
	Applied func(entries int)
}

// Watch keeps a generated package's numbers equal to src, applying each Set
// with apply (the package's ApplyNumbers), all or nothing: at once, then on
// every notice (Notifier) and every Refresh, until ctx is done. A Set equal
// to the one read before is not applied again (a refused one is not retried
// until it changes). A Set refused, or a source that cannot be read, leaves
// the numbers in force as they were, and goes to Report.
func Watch(ctx context.Context, src Source, apply func(Set) error, o WatchOptions) {
	if o.Refresh <= 0 {
		o.Refresh = DefaultRefresh
	}
	said := "" // the error last reported; "" while the source applies
	report := func(err error) {
		if ctx.Err() != nil {
			return
		}
		msg := ""
		if err != nil {
			msg = fmt.Sprintf("overlay: %s: %v; the numbers in force stay", src, err)
		}
		if msg == said {
			return
		}
		said = msg
		if err == nil {
			return
		}
		if o.Report == nil {
			slog.Error(msg)
			return
		}
		o.Report(fmt.Errorf("overlay: %s: %w; the numbers in force stay", src, err))
	}
	var last Set      // the Set read last
	var lastErr error // what applying it said
	read := false     // last is a Set read
	reload := func() {
		set, err := src.Load(ctx)
		switch {
		case errors.Is(err, ErrSettling):
			return
		case err != nil:
		case read && slices.EqualFunc(set, last, sameEntry):
			err = lastErr
		default:
			last, read = set, true
			err = apply(set)
			lastErr = err
			if err == nil && o.Applied != nil {
				o.Applied(len(set))
			}
		}
		report(err)
	}
	var notices <-chan struct{}
	if n, ok := src.(Notifier); ok {
		// The notifier's own state, reported from its goroutine on change,
		// as the source's is: nil says it listens again.
		var mu sync.Mutex
		noticeSaid := ""
		notices = n.Changes(ctx, func(err error) {
			mu.Lock()
			defer mu.Unlock()
			msg := ""
			if err != nil {
				msg = err.Error()
			}
			if msg == noticeSaid || ctx.Err() != nil {
				return
			}
			noticeSaid = msg
			switch {
			case err == nil:
			case o.Report == nil:
				slog.Error(fmt.Sprintf("overlay: %s: %v", src, err))
			default:
				o.Report(fmt.Errorf("overlay: %s: %w", src, err))
			}
		})
	}
	reload()
	tick := time.NewTicker(o.Refresh)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-notices:
			reload()
		case <-tick.C:
			reload()
		}
	}
}

// sameEntry reports whether two entries say the same.
func sameEntry(a, b Entry) bool {
	ae, be := "", ""
	if a.Err != nil {
		ae = a.Err.Error()
	}
	if b.Err != nil {
		be = b.Err.Error()
	}
	a.Err, b.Err = nil, nil
	return a == b && ae == be
}
