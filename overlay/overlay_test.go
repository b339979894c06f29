package overlay_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	limits "github.com/limitgen/limitgen/generated"
	"github.com/limitgen/limitgen/overlay"
)

const goodFile = `# numbers for policy.yaml's rules
rules:
  PerUser:
    rate: 20/s
    burst: 100
    plans:
      pro: {rate: 200/s, burst: 1000}
    keys:
      acme: {rate: 5000/s, burst: 10000}
  PerEndpoint:
    keys:
      "42": {tokens_per_second: 50, burst: 60}
  Login: {rate: 10 per 10s, burst: 10}
  Global: {rps: 3000, burst: 6000}
`

func per(tokens int64, period time.Duration, burst int64) atomicbucket.Numbers {
	return atomicbucket.Numbers{Tokens: tokens, Period: period, Burst: burst}
}

func TestParseFile(t *testing.T) {
	set, err := overlay.ParseFile("numbers.yaml", []byte(goodFile))
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
	for _, src := range []string{"rules: {}\n", "# the policy's numbers\nrules:\n"} {
		if set, err := overlay.ParseFile("none.yaml", []byte(src)); err != nil || set != nil {
			t.Errorf("%q: %v %v; want no numbers, no error", src, set, err)
		}
	}
	// A file with nothing in it is refused (a write caught half done would
	// otherwise clear every override), and so is one without rules:.
	for _, c := range []struct{ src, msg string }{
		{"", "empty.yaml: numbers refused, none applied: the file is empty"},
		{"# nothing changed\n", "the file is empty"},
		{"{}\n", "empty.yaml:1:1: no rules:"},
	} {
		if set, err := overlay.ParseFile("empty.yaml", []byte(c.src)); err == nil || !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v %v; want refused with %q", c.src, set, err, c.msg)
		}
	}

	for _, c := range []struct{ src, msg string }{
		{"rules:\n  A: {rate: 1/s}\n", "numbers.yaml:2:6: rule A: no burst"},
		{"rules:\n  A: {burst: 3}\n", "numbers.yaml:2:6: rule A: no rate"},
		{"rules:\n  A: {rate: 1/s, burst: 0}\n", "numbers.yaml:2:25: rule A: burst 0 admits nothing"},
		{"rules:\n  A: {rate: 1/s, burst: lots}\n", `numbers.yaml:2:25: rule A: burst "lots" is not a whole number`},
		{"rules:\n  A: {rate: fast, burst: 3}\n", `numbers.yaml:2:13: rule A: rate "fast" is not a rate`},
		{"rules:\n  A: {rate: 1/s, rps: 2, burst: 3}\n", "numbers.yaml:2:23: rule A: give the rate once"},
		{"rules:\n  A: {rate: 1/s, burst: 3, refill: interval}\n", `numbers.yaml:2:28: rule A: unknown field "refill"; an overlay gives numbers only`},
		{"rules:\n  A: {rate: 1/s, burst: 3}\n  A: {rate: 2/s, burst: 3}\n", `numbers.yaml:3:3: rules: "A" is given twice`},
		{"rules:\n  A:\n    keys: {k: {rate: 1/s}}\n", `numbers.yaml:3:15: rule A, key "k": no burst`},
		{"rules: [A]\n", "numbers.yaml:1:8: rules must be a mapping"},
		{"rules:\n\tA: {}\n", "not valid YAML"},
		{"limits: {}\n", `numbers.yaml:1:1: the file: unknown field "limits"`},
	} {
		_, err := overlay.ParseFile("numbers.yaml", []byte(c.src))
		if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: %v, want an error containing %q", c.src, err, c.msg)
		}
	}
}

// numbersOf is what a generated package reports in force, for the checks
// below: PerUser on each plan for key "someone" and for "acme", PerEndpoint
// for 42 and 7, Login, Global.
func numbersOf(l *limits.Limits) map[string]string {
	out := map[string]string{}
	put := func(what string, n atomicbucket.Numbers, o atomicbucket.Origin) {
		out[what] = n.String() + " (" + o.String() + ")"
	}
	for _, p := range []limits.Plan{limits.PlanFree, limits.PlanPro, limits.PlanEnterprise} {
		n, o := l.PerUser.NumbersFor(p, "someone")
		put("PerUser "+p.String(), n, o)
		n, o = l.PerUser.NumbersFor(p, "acme")
		put("PerUser "+p.String()+" acme", n, o)
	}
	n, o := l.PerEndpoint.NumbersFor(42)
	put("PerEndpoint 42", n, o)
	n, o = l.PerEndpoint.NumbersFor(7)
	put("PerEndpoint 7", n, o)
	n, o = l.Login.NumbersFor("x")
	put("Login", n, o)
	n, o = l.Global.NumbersFor()
	put("Global", n, o)
	return out
}

func TestApplyNumbers(t *testing.T) {
	l := limits.New()
	policy := numbersOf(l)
	set, err := overlay.ParseFile("numbers.yaml", []byte(goodFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := l.ApplyNumbers(set); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"PerUser free":            "20 per 1s, burst 100 (override)",
		"PerUser free acme":       "5000 per 1s, burst 10000 (key override)",
		"PerUser pro":             "200 per 1s, burst 1000 (override)",
		"PerUser pro acme":        "5000 per 1s, burst 10000 (key override)",
		"PerUser enterprise":      "20 per 1s, burst 100 (override)",
		"PerUser enterprise acme": "5000 per 1s, burst 10000 (key override)",
		"PerEndpoint 42":          "50 per 1s, burst 60 (key override)",
		"PerEndpoint 7":           policy["PerEndpoint 7"],
		"Login":                   "10 per 10s, burst 10 (override)",
		"Global":                  "3000 per 1s, burst 6000 (override)",
	}
	got := numbersOf(l)
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %s, want %s", k, got[k], v)
		}
	}
	if n, sets, _ := l.NumbersApplied(); n != 7 || sets != 1 {
		t.Errorf("NumbersApplied: %d numbers, %d sets; want 7 (PerUser on 3 plans and acme, PerEndpoint 42, Login, Global) and 1", n, sets)
	}
	// The numbers decide: endpoint 42 holds its own burst of 60, endpoint 7
	// the policy's 200.
	now := atomicbucket.Now()
	if !l.PerEndpoint.AllowNAt(42, now, 60).Allowed || l.PerEndpoint.AllowAt(42, now) {
		t.Error("endpoint 42 with a burst of 60 of its own: not 60 and no more at once")
	}
	if d := l.PerEndpoint.AllowNAt(7, now, 61); !d.Allowed || d.Remaining != 139 {
		t.Errorf("endpoint 7 on the policy's burst of 200: %+v", d)
	}

	// A Set with bad entries is refused whole, each bad entry named by its
	// position; the numbers in force stay.
	bad := append(slices.Clone(set), []overlay.Entry{
		{Rule: "Nope", Numbers: per(1, time.Second, 1), Pos: "p1"},
		{Rule: "PerUser", Plan: "gold", Numbers: per(1, time.Second, 1), Pos: "p2"},
		{Rule: "Global", Key: "k", HasKey: true, Numbers: per(1, time.Second, 1), Pos: "p3"},
		{Rule: "PerEndpoint", Plan: "pro", Numbers: per(1, time.Second, 1), Pos: "p4"},
		{Rule: "PerEndpoint", Key: "forty-two", HasKey: true, Numbers: per(1, time.Second, 1), Pos: "p5"},
		{Rule: "Login", Key: "k", HasKey: true, Numbers: per(5, time.Minute, 5), Pos: "p6"},
		{Rule: "Global", Numbers: per(1, time.Second, 1), Pos: "p7"},
		{Rule: "Upload", Numbers: per(0, time.Second, 10), Pos: "p8"},
		{Rule: "PerUser", Key: "acme", Plan: "pro", HasKey: true, Numbers: per(1, time.Second, 1), Pos: "p9"},
		{Rule: "Upload", Key: "big", HasKey: true, Numbers: per(100, time.Second, 5), Pos: "p10"},
	}...)
	err = l.ApplyNumbers(bad)
	for _, msg := range []string{
		`p1: no rule "Nope" in the policy`,
		`p2: rule PerUser: no plan "gold"`,
		"p3: rule Global has no keys",
		"p4: rule PerEndpoint has the same numbers on every plan",
		`p5: rule PerEndpoint, key "forty-two": strconv.ParseInt`,
		`p6: rule Login, key "k": atomicbucket: invalid limit: interval rule's period 10s cannot change to 1m0s`,
		"p7: rule Global: given twice",
		"p8: rule Upload: ",
		`p9: rule PerUser, key "acme": a key's numbers are on every plan`,
		// Upload's requests cost 10: the generator's own refusal.
		`p10: rule Upload, key "big": atomicbucket: invalid limit: burst 5 is below the cost 10 of one request, which could never pass; raise burst to at least 10`,
	} {
		if !errors.Is(err, overlay.ErrInvalid) || !strings.Contains(err.Error(), msg) {
			t.Errorf("the bad Set's error %v\nlacks %q", err, msg)
		}
	}
	if got := numbersOf(l); !equalMaps(got, want) {
		t.Errorf("a refused Set changed the numbers: %v", got)
	}
	// The limiter's own methods refuse a burst below the cost alike.
	for what, err := range map[string]error{
		"SetNumbers":    l.Upload.SetNumbers(per(100, time.Second, 9), atomicbucket.CarryAsIs),
		"SetKeyNumbers": l.Upload.SetKeyNumbers("big", per(100, time.Second, 9), atomicbucket.CarryAsIs),
	} {
		if !errors.Is(err, atomicbucket.ErrInvalidLimit) || !strings.Contains(err.Error(), "burst 9 is below the cost 10") {
			t.Errorf("Upload.%s with a burst of 9 under a cost of 10: %v", what, err)
		}
	}
	if n, origin := l.Upload.NumbersFor("big"); origin != atomicbucket.FromPolicy || n.Burst != 1000 {
		t.Errorf("after refused changes Upload's numbers are %v (%v)", n, origin)
	}

	// A smaller Set: what it no longer gives goes back to the policy's.
	if err := l.ApplyNumbers(overlay.Set{{Rule: "PerUser", Plan: "pro", Numbers: per(300, time.Second, 900), Pos: "q"}}); err != nil {
		t.Fatal(err)
	}
	want = maps(policy)
	want["PerUser pro"] = "300 per 1s, burst 900 (override)"
	want["PerUser pro acme"] = "300 per 1s, burst 900 (override)"
	if got := numbersOf(l); !equalMaps(got, want) {
		t.Errorf("after a smaller Set:\n got %v\nwant %v", got, want)
	}
	if err := l.ApplyNumbers(nil); err != nil {
		t.Fatal(err)
	}
	if got := numbersOf(l); !equalMaps(got, policy) {
		t.Errorf("after an empty Set: %v, want the policy's %v", got, policy)
	}
}

func maps(m map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = v
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFileWatch: an overlay file applied on demand and whenever it changes;
// a bad version is reported and leaves the numbers as they were.
func TestFileWatch(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "numbers.yaml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := limits.New()
	f := overlay.NewFile(path, l.ApplyNumbers)
	if err := f.Reload(); err == nil {
		t.Error("Reload of a missing file: no error")
	}
	write("rules:\n  Global: {rate: 100/s, burst: 100}\n")
	if err := f.Reload(); err != nil {
		t.Fatal(err)
	}
	if n, _ := l.Global.NumbersFor(); n != per(100, time.Second, 100) {
		t.Fatalf("after Reload Global has %v", n)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var reported atomic.Int64
	done := make(chan struct{})
	go func() {
		f.Watch(ctx, 5*time.Millisecond, func(error) { reported.Add(1) })
		close(done)
	}()
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 5 s: %s", what)
			}
		}
	}
	write("rules:\n  Global: {rate: 200/s, burst: 300}\n")
	waitFor("the changed file applied", func() bool { n, _ := l.Global.NumbersFor(); return n == per(200, time.Second, 300) })
	write("rules:\n  Global: {rate: 200/s, burst: 300}\n  Nope: {rate: 1/s, burst: 1}\n")
	waitFor("the bad file reported", func() bool { return reported.Load() > 0 })
	if n, _ := l.Global.NumbersFor(); n != per(200, time.Second, 300) {
		t.Errorf("a refused file changed Global to %v", n)
	}
	if err := f.Err(); err == nil || !strings.Contains(err.Error(), `numbers.yaml:3:9: no rule "Nope"`) {
		t.Errorf("Err after the bad file: %v", err)
	}
	time.Sleep(30 * time.Millisecond)
	if r := reported.Load(); r != 1 {
		t.Errorf("the bad file was reported %d times; once, until it changes", r)
	}
	write("rules:\n  Global: {rate: 400/s, burst: 400}\n")
	waitFor("the fixed file applied", func() bool { n, _ := l.Global.NumbersFor(); return n == per(400, time.Second, 400) })
	if err := f.Err(); err != nil {
		t.Errorf("Err after the fix: %v", err)
	}
	cancel()
	<-done
}

// TestWatchHalfWritten: Watch reads a file while it may be being written. A
// content is applied only when two reads in a row find it, so a write caught
// half done (here: emptied, then cut short in a way that still parses) is
// never applied, and an empty file that stays empty is refused, not taken
// for "every number back to the policy's". Each poll is one Watch with a
// cancelled context: one read, no timing.
func TestWatchHalfWritten(t *testing.T) {
	path := filepath.Join(t.TempDir(), "numbers.yaml")
	write := func(src string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l := limits.New()
	f := overlay.NewFile(path, l.ApplyNumbers)
	var reports []error
	done, cancel := context.WithCancel(context.Background())
	cancel()
	poll := func() { f.Watch(done, time.Hour, func(err error) { reports = append(reports, err) }) }
	global := func() atomicbucket.Numbers { n, _ := l.Global.NumbersFor(); return n }
	keyed := func() atomicbucket.Origin { _, o := l.PerEndpoint.NumbersFor(42); return o }

	write("rules:\n  Global: {rate: 100/s, burst: 100}\n  PerEndpoint:\n    keys: {\"42\": {rate: 5/s, burst: 5}}\n")
	if err := f.Reload(); err != nil || global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride {
		t.Fatalf("Reload: %v; Global %v, key 42 %v", err, global(), keyed())
	}
	write("") // truncated, before the new content is written
	poll()
	if global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride || len(reports) != 0 {
		t.Fatalf("an empty file read once: Global %v, key 42 %v, reports %v; want nothing changed, nothing said", global(), keyed(), reports)
	}
	poll() // still empty: refused, said once
	if global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride || len(reports) != 1 || !strings.Contains(reports[0].Error(), "the file is empty") {
		t.Fatalf("an empty file read twice: Global %v, key 42 %v, reports %v; want it refused", global(), keyed(), reports)
	}
	write("rules:\n  Global: {rate: 200/s, burst: 200}\n") // cut short: PerEndpoint's key not yet written
	poll()
	write("rules:\n  Global: {rate: 200/s, burst: 200}\n  PerEndpoint:\n    keys: {\"42\": {rate: 5/s, burst: 5}}\n")
	poll()
	if global() != per(100, time.Second, 100) || keyed() != atomicbucket.FromKeyOverride {
		t.Fatalf("two different contents in two reads: Global %v, key 42 %v; want neither applied", global(), keyed())
	}
	poll()
	if global() != per(200, time.Second, 200) || keyed() != atomicbucket.FromKeyOverride || len(reports) != 1 {
		t.Fatalf("the whole file read twice: Global %v, key 42 %v, reports %v; want it applied", global(), keyed(), reports)
	}
}

// TestWatchWithoutReport: a Watch given no report logs a refused file with
// log/slog's default logger instead of dropping it.
func TestWatchWithoutReport(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(old)
	path := filepath.Join(t.TempDir(), "numbers.yaml")
	if err := os.WriteFile(path, []byte("rules:\n  Nope: {rate: 1/s, burst: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { time.Sleep(50 * time.Millisecond); cancel() }()
	overlay.NewFile(path, limits.New().ApplyNumbers).Watch(ctx, 5*time.Millisecond, nil)
	if !strings.Contains(buf.String(), `no rule \"Nope\"`) {
		t.Errorf("the log after a refused file: %q", buf.String())
	}
}
