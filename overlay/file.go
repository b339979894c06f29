package overlay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"
)

// File is an overlay file kept applied to a generated package: Reload reads
// and applies it on demand, Watch whenever its content changes. A file that
// cannot be read or parsed, or whose Set is refused, leaves the numbers in
// force as they were, and its error is reported (and kept: Err).
//
// Write the file whole (a temporary file renamed over it): Watch reads it
// while it may be being written, so it applies a new content only once two
// reads in a row have found it, and an empty file is refused (ParseFile).
type File struct {
	path  string
	apply func(Set) error

	mu      sync.Mutex
	seen    [32]byte // the content last applied or refused
	seenAny bool
	pending [32]byte // a new content read once, to be read again before it is applied
	pends   bool
	err     error
}

// NewFile returns the overlay file at path, applied by apply (a generated
// package's ApplyNumbers).
func NewFile(path string, apply func(Set) error) *File {
	return &File{path: path, apply: apply}
}

// Reload reads the file and applies it, whether or not it changed.
func (f *File) Reload() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.load(true)
}

// load reads the file and, if force or its content is not what was last
// seen, applies it. Called with f.mu held.
func (f *File) load(force bool) error {
	src, err := os.ReadFile(f.path)
	if err != nil {
		f.err = fmt.Errorf("overlay: %w; the numbers in force stay", err)
		return f.err
	}
	sum := sha256.Sum256(src)
	if !force && f.seenAny {
		if sum == f.seen {
			f.pends = false
			return nil
		}
		if !f.pends || sum != f.pending {
			f.pending, f.pends = sum, true // new: applied if the next read finds it again
			return nil
		}
	}
	f.seen, f.seenAny, f.pends = sum, true, false
	set, err := ParseFile(f.path, src)
	if err != nil { // it names the file
		f.err = fmt.Errorf("overlay: %w; the numbers in force stay", err)
		return f.err
	}
	if err := f.apply(set); err != nil {
		f.err = fmt.Errorf("overlay: %s: %w; the numbers in force stay", f.path, err)
		return f.err
	}
	f.err = nil
	return nil
}

// Watch reads the file every interval and applies it when its content has
// changed since it was last applied or refused and the next read finds the
// same content (so a change takes one to two intervals; a refused content is
// not retried until it changes again), calling report with each error (nil:
// log/slog's default logger), until ctx is done. The first read, when
// neither Reload nor Watch has read the file before, applies at once. An
// interval ≤ 0 is a second.
func (f *File) Watch(ctx context.Context, interval time.Duration, report func(error)) {
	if interval <= 0 {
		interval = time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		f.mu.Lock()
		err := f.load(false)
		f.mu.Unlock()
		switch {
		case err == nil:
		case report == nil:
			slog.Error(err.Error())
		default:
			report(err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Err is the last read's error: nil when the file's content in force was
// applied.
func (f *File) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
