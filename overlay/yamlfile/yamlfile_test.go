package yamlfile_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/overlay/yamlfile"
)

// goodFile is an overlay file for policy.yaml's rules, which the overlay
// and yamlfile tests share.
var goodFile = func() string {
	b, err := os.ReadFile("testdata/numbers.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func per(tokens int64, period time.Duration, burst int64) atomicbucket.Numbers {
	return atomicbucket.Numbers{Tokens: tokens, Period: period, Burst: burst}
}

func TestParse(t *testing.T) {
	set, err := yamlfile.Parse("numbers.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	want := overlay.Set{
		{Rule: "PerUser", Numbers: per(20, time.Second, 100), Pos: "numbers.yaml:4:5"},
		{Rule: "PerUser", Plan: "pro", Numbers: per(200, time.Second, 1000), Pos: "numbers.yaml:7:12"},
		{Rule: "PerUser", Key: "acme", HasKey: true, Numbers: per(5000, time.Second, 10000), Pos: "numbers.yaml:9:13"},
		{Rule: "PerEndpoint", Key: "42", HasKey: true, Numbers: per(50, time.Second, 60), Pos: "numbers.yaml:12:13"},
		{Rule: "Login", Numbers: per(10, 10*time.Second, 10), Pos: "numbers.yaml:13:10"},
		{Rule: "Global", Numbers: per(3000, time.Second, 6000), Pos: "numbers.yaml:14:11"},
	}
	if !slices.Equal(set, want) {
		t.Errorf("parsed\n%+v\nwant\n%+v", set, want)
	}
	set, err = yamlfile.Parse("slots.yaml", []byte("rules:\n  ExportSlots: {in_flight: 2, max_hold: 5 min}\n"))
	if w := (overlay.Set{{Rule: "ExportSlots", Numbers: atomicbucket.Numbers{Tokens: 2, Period: 5 * time.Minute, Burst: 2}, Pos: "slots.yaml:2:16", InFlight: true}}); err != nil || !slices.Equal(set, w) {
		t.Errorf("an in-flight rule's entry: %+v, %v; want %+v", set, err, w)
	}
	for _, src := range []string{"rules: {}\n", "# the policy's numbers\nrules:\n"} {
		if set, err := yamlfile.Parse("none.yaml", []byte(src)); err != nil || set != nil {
			t.Errorf("%q: %v %v; want no numbers, no error", src, set, err)
		}
	}
	// A file with nothing in it is refused (a write caught half done would
	// otherwise clear every override), and so is one without rules:.
	for _, c := range []struct{ src, msg string }{
		{"", "empty.yaml: numbers refused, none applied: the file is empty"},
		{"# nothing changed\n", "the file is empty"},
		{"{}\n", "empty.yaml:1:1: numbers refused, none applied: no rules:"},
		{"rules:\n\tA: {}\n", "not valid YAML"},
	} {
		if set, err := yamlfile.Parse("empty.yaml", []byte(c.src)); err == nil || !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v %v; want refused with %q", c.src, set, err, c.msg)
		}
	}
	// Every other problem is an entry of the Set, refused by ApplyNumbers
	// at its line and column.
	l := limits.New()
	for _, c := range []struct{ src, msg string }{
		{"rules:\n  Global: {rate: 1/s}\n", "numbers.yaml:2:11: rule Global: no burst"},
		{"rules:\n  Global: {burst: 3}\n", "numbers.yaml:2:11: rule Global: no rate"},
		{"rules:\n  Global: {rate: 1/s, burst: lots}\n", `numbers.yaml:2:30: rule Global: burst "lots" is not a whole number`},
		{"rules:\n  Global: {rate: 1/s, burst: 99999999999999999999}\n", `numbers.yaml:2:30: rule Global: burst 99999999999999999999 is too large: at most 9223372036854775807`},
		{"rules:\n  Global: {rate: fast, burst: 3}\n", `numbers.yaml:2:18: rule Global: rate "fast" is not a rate`},
		{"rules:\n  Global: {rate: 1e30/s, burst: 3}\n", `numbers.yaml:2:18: rule Global: rate "1e30/s" is too large`},
		{"rules:\n  Global: {rate: 1/s, rps: 2, burst: 3}\n", "numbers.yaml:2:28: rule Global: give the rate once"},
		{"rules:\n  Global: {rate: 1/s, burst: 3, refill: interval}\n", `numbers.yaml:2:33: rule Global: unknown field "refill"; an overlay gives numbers only`},
		{"rules:\n  Global: {rate: 1/s, burst: 3}\n  Global: {rate: 2/s, burst: 3}\n", `numbers.yaml:3:3: rules: "Global" is given twice`},
		{"rules:\n  PerUser:\n    keys: {k: {rate: 1/s}}\n", `numbers.yaml:3:15: rule PerUser, key "k": no burst`},
		{"rules: [Global]\n", "numbers.yaml:1:8: rules must be a mapping"},
		{"limits: {}\n", `numbers.yaml:1:1: the file: unknown field "limits"`},
		{"rules:\n  ExportSlots: {in_flight: 2}\n", "numbers.yaml:2:16: rule ExportSlots: no max_hold"},
		{"rules:\n  ExportSlots: {max_hold: 1m}\n", "numbers.yaml:2:16: rule ExportSlots: no in_flight"},
		{"rules:\n  ExportSlots: {in_flight: two, max_hold: 1m}\n", `numbers.yaml:2:28: rule ExportSlots: in_flight "two" is not a whole number`},
		{"rules:\n  ExportSlots: {in_flight: 2, max_hold: soon}\n", `numbers.yaml:2:41: rule ExportSlots: max_hold "soon"`},
		{"rules:\n  ExportSlots: {in_flight: 2, max_hold: 1m, burst: 2}\n", "numbers.yaml:2:52: rule ExportSlots: an entry gives in_flight and max_hold"},
		{"rules:\n  Global: {in_flight: 2, max_hold: 1m}\n", "numbers.yaml:2:11: rule Global"},
	} {
		set, err := yamlfile.Parse("numbers.yaml", []byte(c.src))
		if err == nil {
			err = l.ApplyNumbers(set)
		}
		if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want an error containing %q", c.src, err, c.msg)
		}
	}
}

// One pass, one voice: a file's refusal names every problem of every entry
// at once (a rate that does not read beside an unknown rule, plan or key,
// in one entry or several), and the numbers a file gives are refused with
// the words the Go API uses for the same numbers.
func TestOnePassOneVoice(t *testing.T) {
	l := limits.New()
	src := `rules:
  Nope: {rate: fast, burst: 3}
  PerUser:
    plans:
      gold: {rate: 1/s, burst: 1}
    keys:
      acme: {rate: 1/s, burst: lots}
  PerEndpoint:
    keys:
      forty-two: {rate: 1/s, burst: 1}
      "7": {rate: 5/s, burst: 0}
  Global: {rate: 0/s, burst: 5000}
  Upload: {rate: 10/ns, burst: 1000}
`
	set, err := yamlfile.Parse("n.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	err = l.ApplyNumbers(set)
	if !errors.Is(err, overlay.ErrInvalid) {
		t.Fatalf("refusal: %v", err)
	}
	goKey := l.PerEndpoint.SetKeyNumbers(7, per(5, time.Second, 0), atomicbucket.CarryAsIs)
	goGlobal := l.Global.SetNumbers(per(0, time.Second, 5000), atomicbucket.CarryAsIs)
	goUpload := l.Upload.SetNumbers(per(10, time.Nanosecond, 1000), atomicbucket.CarryAsIs)
	for _, e := range []error{goKey, goGlobal, goUpload} {
		if !errors.Is(e, atomicbucket.ErrInvalidLimit) {
			t.Fatalf("the Go API took bad numbers: %v", e)
		}
	}
	lines := strings.Split(err.Error(), "\n")
	for _, want := range []string{
		`n.yaml:2:16: no rule "Nope" in the policy`,
		`n.yaml:2:16: rule Nope: rate "fast" is not a rate`,
		`n.yaml:5:13: rule PerUser: no plan "gold" in the policy`,
		`n.yaml:7:32: rule PerUser, key "acme": burst "lots" is not a whole number`,
		`n.yaml:10:18: rule PerEndpoint, key "forty-two": strconv.ParseInt`,
		`n.yaml:11:12: rule PerEndpoint, key "7": ` + goKey.Error(),
		"n.yaml:12:11: rule Global: " + goGlobal.Error(),
		"n.yaml:13:11: rule Upload: " + goUpload.Error(),
	} {
		if !slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("the refusal lacks %q; it says:\n%v", want, err)
		}
	}
	if n := strings.Count(err.Error(), "\n"); n != 8 {
		t.Errorf("%d problems reported, want the 8 above:\n%v", n, err)
	}
}

// watcher runs overlay.Watch of f until the test ends, collecting reports.
type watcher struct {
	mu      sync.Mutex
	reports []string
}

func (w *watcher) said() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.reports)
}

func watch(t *testing.T, f *yamlfile.File, apply func(overlay.Set) error, refresh time.Duration) *watcher {
	w := &watcher{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		overlay.Watch(ctx, f, apply, overlay.WatchOptions{Refresh: refresh, Report: func(err error) {
			w.mu.Lock()
			defer w.mu.Unlock()
			w.reports = append(w.reports, err.Error())
		}})
	}()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 5 s: %s", what)
		}
	}
}

// An overlay file applied at start and whenever it changes; a bad version
// is reported once and leaves the numbers as they were; a missing file is
// reported once when it goes, not at every read, and again once it comes
// back and goes again.
func TestWatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "numbers.yaml")
	write := func(src string) { // whole, as the README says: renamed over it
		t.Helper()
		tmp := path + ".new"
		if err := os.WriteFile(tmp, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	l := limits.New()
	f := yamlfile.New(path)
	if err := f.Apply(l.ApplyNumbers); err == nil || !strings.Contains(err.Error(), "numbers.yaml") {
		t.Errorf("Apply of a missing file: %v", err)
	}
	write("rules:\n  Global: {rate: 100/s, burst: 100}\n")
	if err := f.Apply(l.ApplyNumbers); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Global.NumbersFor(); n != per(100, time.Second, 100) {
		t.Fatalf("after Apply Global has %v", n)
	}
	w := watch(t, f, l.ApplyNumbers, 2*time.Millisecond)
	global := func() atomicbucket.Numbers { n, _ := l.Global.NumbersFor(); return n }
	write("rules:\n  Global: {rate: 200/s, burst: 300}\n")
	waitFor(t, "the changed file applied", func() bool { return global() == per(200, time.Second, 300) })
	write("rules:\n  Global: {rate: 200/s, burst: 300}\n  Nope: {rate: 1/s, burst: 1}\n")
	waitFor(t, "the bad file reported", func() bool { return len(w.said()) > 0 })
	time.Sleep(40 * time.Millisecond) // twenty reads
	if said := w.said(); len(said) != 1 || !strings.Contains(said[0], `numbers.yaml:3:9: no rule "Nope"`) || global() != per(200, time.Second, 300) {
		t.Fatalf("the bad file: reports %q, Global %v; want one report and the numbers kept", said, global())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the missing file reported", func() bool { return len(w.said()) > 1 })
	time.Sleep(40 * time.Millisecond)
	if said := w.said(); len(said) != 2 || !strings.Contains(said[1], "no such file") {
		t.Fatalf("a missing file: reports %q; want it said once", said)
	}
	write("rules:\n  Global: {rate: 400/s, burst: 400}\n")
	waitFor(t, "the fixed file applied", func() bool { return global() == per(400, time.Second, 400) })
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the file missing again reported", func() bool { return len(w.said()) > 2 })
	time.Sleep(40 * time.Millisecond)
	if said := w.said(); len(said) != 3 || global() != per(400, time.Second, 400) {
		t.Fatalf("missing again: reports %q, Global %v", said, global())
	}
}

// A content is taken only when two reads in a row find it, so a write caught
// half done (here: emptied, then cut short in a way that still parses) is
// never applied, and an empty file that stays empty is refused, not taken
// for "every number back to the policy's". Each poll is one Load.
func TestHalfWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "numbers.yaml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := limits.New()
	f := yamlfile.New(path)
	poll := func() error {
		set, err := f.Load(context.Background())
		if errors.Is(err, overlay.ErrSettling) {
			return nil // read once: nothing taken yet
		}
		if err == nil {
			err = l.ApplyNumbers(set)
		}
		return err
	}
	global := func() atomicbucket.Numbers { n, _ := l.Global.NumbersFor(); return n }
	keyed := func() atomicbucket.Origin { _, o := l.PerEndpoint.NumbersFor(42); return o }

	write("rules:\n  Global: {rate: 100/s, burst: 100}\n  PerEndpoint:\n    keys: {\"42\": {rate: 5/s, burst: 5}}\n")
	if err := poll(); err != nil || global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride {
		t.Fatalf("first read: %v; Global %v, key 42 %v", err, global(), keyed())
	}
	write("") // truncated, before the new content is written
	if err := poll(); err != nil || global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride {
		t.Fatalf("an empty file read once: %v, Global %v, key 42 %v; want nothing changed, nothing said", err, global(), keyed())
	}
	if err := poll(); err == nil || !strings.Contains(err.Error(), "the file is empty") || global() != per(100, time.Second, 100) {
		t.Fatalf("an empty file read twice: %v, Global %v; want it refused", err, global())
	}
	write("rules:\n  Global: {rate: 200/s, burst: 200}\n") // cut short: PerEndpoint's key not yet written
	if err := poll(); err != nil {
		t.Fatalf("a new content read once: %v", err)
	}
	write("rules:\n  Global: {rate: 200/s, burst: 200}\n  PerEndpoint:\n    keys: {\"42\": {rate: 5/s, burst: 5}}\n")
	if err := poll(); err != nil {
		t.Fatalf("another new content read once: %v", err)
	}
	if global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride {
		t.Fatalf("two different contents in two reads: Global %v, key 42 %v; want neither applied", global(), keyed())
	}
	if err := poll(); err != nil || global() != per(200, time.Second, 200) || keyed() != atomicbucket.FromKeyOverride {
		t.Fatalf("the whole file read twice: %v, Global %v, key 42 %v; want it applied", err, global(), keyed())
	}
}

// A Watch given no Report logs a refused file with log/slog's default
// logger instead of dropping it.
func TestWatchWithoutReport(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil)))
	defer slog.SetDefault(old)
	path := filepath.Join(t.TempDir(), "numbers.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  Nope: {rate: 1/s, burst: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	overlay.Watch(ctx, yamlfile.New(path), limits.New().ApplyNumbers, overlay.WatchOptions{Refresh: 5 * time.Millisecond})
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), `no rule \"Nope\"`) {
		t.Errorf("the log after a refused file: %q", buf.String())
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// FuzzParseFile: any input is parsed or refused with ErrInvalid, never a
// panic; every entry has a position in the file, and one without a problem
// of its own has a rate that read (a period of at least 1 ns).
func FuzzParseFile(f *testing.F) {
	f.Add([]byte(goodFile))
	f.Add([]byte("rules:\n  A: {rate: 0.5/s, burst: 3}\n"))
	f.Add([]byte("rules:\n  A:\n    keys: {\"\": {rps: 1e3, burst: 1_000}}\n"))
	f.Add([]byte("rules: {A: &x {rate: 1/s, burst: 1}, B: *x}\n"))
	f.Add([]byte("rules: {?:{rate: 0/s,burst: 0}}")) // a rule with no name
	f.Add([]byte("rules: {? [A]: {rate: 1/s, burst: 1}}"))
	f.Add([]byte("rules: {A: {plans: {'': {rate: 1/s, burst: 1}}}}"))
	f.Fuzz(func(t *testing.T, src []byte) {
		set, err := yamlfile.Parse("f.yaml", src)
		if err != nil {
			if !errors.Is(err, overlay.ErrInvalid) {
				t.Fatalf("an error not wrapping ErrInvalid: %v", err)
			}
			return
		}
		for _, e := range set {
			if !strings.HasPrefix(e.Pos, "f.yaml:") || e.Err == nil && (e.Numbers.Period < 1 || e.Rule == "") {
				t.Fatalf("parsed %+v from %q", e, src)
			}
		}
	})
}
