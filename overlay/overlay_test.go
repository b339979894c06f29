package overlay_test

import (
	"errors"
	"os"
	"slices"
	"strings"
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
	b, err := os.ReadFile("yamlfile/testdata/numbers.yaml")
	if err != nil {
		panic(err)
	}
	return string(b)
}()

func per(tokens int64, period time.Duration, burst int64) atomicbucket.Numbers {
	return atomicbucket.Numbers{Tokens: tokens, Period: period, Burst: burst}
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
	set, err := yamlfile.Parse("numbers.yaml", []byte(goodFile))
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
