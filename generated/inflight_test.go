package limits

import (
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

// TestExportSlotsNumbersRefused: an in-flight rule's numbers do not change
// at run time, and a numbers file that names it is refused, saying why.
func TestExportSlotsNumbersRefused(t *testing.T) {
	set, err := yamlfile.Parse("numbers.yaml", []byte("rules:\n  ExportSlots: {rate: 10/s, burst: 10}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = New().ApplyNumbers(set)
	if err == nil || !strings.Contains(err.Error(), "in-flight rule's numbers do not change") {
		t.Fatalf("ApplyNumbers = %v, want a refusal naming the in-flight rule", err)
	}
}
