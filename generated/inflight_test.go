package limits

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/overlay/yamlfile"
)

// TestExportSlots drives policy.yaml's in-flight rule through the generated
// limiter: 4 of a user's exports at once, a slot back at its release (once)
// or 10 minutes after it was taken.
func TestExportSlots(t *testing.T) {
	l := New()
	t0 := atomicbucket.Time(time.Hour)
	var held []atomicslot.Slot
	for i := range 4 {
		s, d := l.ExportSlots.AcquireAt("alice", t0)
		if !d.Allowed || d.Remaining != int64(3-i) {
			t.Fatalf("export %d: %+v, want admitted with %d left", i, d, 3-i)
		}
		held = append(held, s)
	}
	if _, d := l.ExportSlots.AcquireAt("alice", t0); d.Allowed || d.RetryAfter != 10*time.Minute {
		t.Fatalf("a fifth export: %+v, want denied until the first slot's max_hold", d)
	}
	if _, d := l.ExportSlots.AcquireAt("bob", t0); !d.Allowed {
		t.Fatal("another user's export denied: the rule is per key")
	}
	if !held[0].ReleaseAt(t0) || held[0].ReleaseAt(t0) {
		t.Fatal("release: want true once, then false")
	}
	if _, d := l.ExportSlots.AcquireAt("alice", t0); !d.Allowed {
		t.Fatal("an export after a release denied")
	}
	later := t0 + atomicbucket.Time(10*time.Minute)
	if _, d := l.ExportSlots.AcquireAt("alice", later-1); d.Allowed {
		t.Fatal("a slot came back before its max_hold")
	}
	if _, d := l.ExportSlots.AcquireAt("alice", later); !d.Allowed {
		t.Fatal("no slot came back at max_hold")
	}
	if held[1].ReleaseAt(later) {
		t.Fatal("a release after max_hold was in effect")
	}
	if got := l.ExportSlots.Stats().Expired; got < 1 {
		t.Fatalf("Stats().Expired = %d, want the slots that expired unreleased counted", got)
	}
}

// TestExportSlotsNumbers: an in-flight rule's numbers change at run time from
// a numbers file (in_flight and max_hold, or rate: slots per maximum hold
// with the slots as burst). A cut
// below what a key holds admits none of it until enough slots come back;
// the new hold applies to slots taken after the change; a key's own numbers
// and numbers that are not slots are refused, changing nothing; an empty
// file puts the policy's back.
func TestExportSlotsNumbers(t *testing.T) {
	l := New()
	t0 := atomicbucket.Time(time.Hour)
	var held []atomicslot.Slot
	for range 3 {
		s, _ := l.ExportSlots.AcquireAt("alice", t0)
		held = append(held, s)
	}
	apply := func(text string) error {
		t.Helper()
		set, err := yamlfile.Parse("numbers.yaml", []byte(text))
		if err != nil {
			t.Fatal(err)
		}
		return l.ApplyNumbers(set)
	}
	if err := apply("rules:\n  ExportSlots: {in_flight: 2, max_hold: 1m}\n"); err != nil {
		t.Fatal(err)
	}
	if n, o := l.ExportSlots.NumbersFor(); n.Tokens != 2 || n.Period != time.Minute || o != atomicbucket.FromOverride {
		t.Fatalf("NumbersFor = %v, %v", n, o)
	}
	// 3 held, limit 2: under it when the second of them expires (all at t0 + 10m).
	if _, d := l.ExportSlots.AcquireAt("alice", t0); d.Allowed || d.RetryAfter != 10*time.Minute {
		t.Fatalf("after the cut to 2: %+v, want denied for 10m", d)
	}
	held[0].ReleaseAt(t0)
	held[1].ReleaseAt(t0)
	s, d := l.ExportSlots.AcquireAt("alice", t0)
	if !d.Allowed || d.Remaining != 0 || d.Reset != 10*time.Minute {
		t.Fatalf("1 held under a limit of 2: %+v", d)
	}
	if later := t0 + atomicbucket.Time(time.Minute); s.ReleaseAt(later) {
		t.Fatal("a slot taken under a 1m hold still held after 1m")
	}
	for _, bad := range []string{
		"rules:\n  ExportSlots: {keys: {alice: {rate: 9/1m, burst: 9}}}\n",
		"rules:\n  ExportSlots: {rate: 2/1m, burst: 3}\n",
		"rules:\n  ExportSlots: {rate: 5000/1m, burst: 5000}\n",
		"rules:\n  ExportSlots: {in_flight: 0, max_hold: 1m}\n",
	} {
		if err := apply(bad); err == nil || !strings.Contains(err.Error(), "ExportSlots") {
			t.Errorf("ApplyNumbers(%q) = %v, want a refusal naming the rule", bad, err)
		}
	}
	if n, _ := l.ExportSlots.NumbersFor(); n.Tokens != 2 {
		t.Fatalf("refused numbers changed the rule: %v", n)
	}
	if err := apply("rules:\n  ExportSlots: {rate: 3/1m, burst: 3}\n"); err != nil { // the window rules' form, the same numbers
		t.Fatal(err)
	}
	if n, _ := l.ExportSlots.NumbersFor(); n.Tokens != 3 || n.Period != time.Minute {
		t.Fatalf("numbers as a rate: %v", n)
	}
	if err := apply("rules: {}\n"); err != nil {
		t.Fatal(err)
	}
	if n, o := l.ExportSlots.NumbersFor(); n.Tokens != 4 || o != atomicbucket.FromPolicy {
		t.Fatalf("after an empty file: %v, %v", n, o)
	}
}

// TestReportsTierWaits: the Reports tier takes ReportSlots' one slot first,
// waiting for it (500 ms), then a PerUser token. A report queued behind the
// slot is admitted when it is released; one whose wait runs out is denied
// by ReportSlots having charged nothing; a PerUser denial gives the slot
// back.
func TestReportsTierWaits(t *testing.T) {
	l := New()
	ctx := context.Background()
	held, d := l.ReportSlots.Acquire()
	if !d.Allowed {
		t.Fatal("the report slot")
	}
	type report struct {
		set atomicslot.Set
		d   TierDecision
	}
	got := make(chan report, 1)
	go func() {
		set, d := l.Reports(ctx, PlanFree, "ann")
		got <- report{set, d}
	}()
	time.Sleep(50 * time.Millisecond)
	held.Release()
	var r report
	select {
	case r = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("a report waiting for the slot not admitted after its release")
	}
	if !r.d.Allowed || r.set.Len() != 1 {
		t.Fatalf("a report after the slot's release: %+v", r.d)
	}
	before := l.PerUser.Peek(PlanFree, "bob", 1)
	start := time.Now()
	if set, d := l.Reports(ctx, PlanFree, "bob"); d.Allowed || d.DeniedBy != RuleReportSlots || set.Len() != 0 {
		t.Fatalf("a report with the slot held throughout: %+v, want denied by ReportSlots", d)
	}
	if waited := time.Since(start); waited < 500*time.Millisecond {
		t.Fatalf("denied after %v, before ReportSlots' 500ms wait", waited)
	}
	if after := l.PerUser.Peek(PlanFree, "bob", 1); after.Remaining != before.Remaining {
		t.Fatalf("a report refused its slot charged PerUser: %d tokens before, %d after", before.Remaining, after.Remaining)
	}
	r.set.Release()
	for l.PerUser.AllowN(PlanFree, "cy", 1).Allowed {
	}
	if set, d := l.Reports(ctx, PlanFree, "cy"); d.Allowed || d.DeniedBy != RulePerUser || set.Len() != 0 {
		t.Fatalf("a report of a user out of tokens: %+v, want denied by PerUser", d)
	}
	if s, d := l.ReportSlots.Acquire(); !d.Allowed {
		t.Fatal("the slot a PerUser denial gave back is still held")
	} else {
		s.Release()
	}
}
