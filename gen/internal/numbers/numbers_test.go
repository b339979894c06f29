package numbers

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestNumbersCommand: gen numbers checks overlay files against a policy
// offline, with the checks a service's ApplyNumbers makes: the rule, plan
// and key exist, the numbers are what the generator accepts, and a shared
// rule's are what a store on a microsecond clock can hold.
func TestNumbersCommand(t *testing.T) {
	file := tempFiles(t)
	good := file("good.yaml", "rules:\n  PerUser:\n    plans: {pro: {rate: 200/min, burst: 200}}\n    keys: {acme: {rate: 1000/min, burst: 1000}}\n  Login: {rate: 10/min, burst: 10}\n")
	bad := file("bad.yaml", "rules:\n  PerUser:\n    keys: {acme: {rate: 1000000000/s, burst: 5000000000000000}}\n  Login:\n    plans: {pro: {rate: 1/s, burst: 1}}\n  Global: {rate: 0.5/s, burst: 0}\n")
	policy := filepath.Join("..", "..", "..", "examples", "quickstart", "policy.yaml")

	var out, errs bytes.Buffer
	if code := Main([]string{"-policy", policy, good}, &out, &errs); code != 0 {
		t.Fatalf("a good file: exit %d: %s", code, errs.String())
	}
	if !strings.Contains(out.String(), "good.yaml: 3 entries, all good") {
		t.Errorf("a good file: %q", out.String())
	}
	out.Reset()
	if code := Main([]string{"-policy", policy, good, bad}, &out, &errs); code != 1 {
		t.Fatalf("a bad file: exit %d", code)
	}
	for _, msg := range []string{
		"bad.yaml:6:11: rule Global: atomicbucket: invalid limit: burst 0 admits nothing",
	} {
		if !strings.Contains(errs.String(), msg) {
			t.Errorf("stderr %q lacks %q", errs.String(), msg)
		}
	}
	fixed := file("bad2.yaml", "rules:\n  PerUser:\n    keys: {acme: {rate: 1000000000/s, burst: 5000000000000000}}\n  Login:\n    plans: {pro: {rate: 1/s, burst: 1}}\n")
	errs.Reset()
	if code := Main([]string{"-policy", policy, fixed}, &out, &errs); code != 1 {
		t.Fatalf("a file the policy refuses: exit %d", code)
	}
	for _, msg := range []string{
		`bad2.yaml:3:18: rule PerUser, key "acme", plan free: invalid numbers: a store cannot hold`,
		"bad2.yaml:5:18: rule Login has the same numbers on every plan",
	} {
		if !strings.Contains(errs.String(), msg) {
			t.Errorf("stderr %q lacks %q", errs.String(), msg)
		}
	}
	// A burst below the cost of a request, as the generator refuses it.
	upload := file("upload.yaml", "rules:\n  Upload: {rate: 100/s, burst: 9}\n")
	errs.Reset()
	if code := Main([]string{"-policy", filepath.Join("..", "..", "..", "policy.yaml"), upload}, &out, &errs); code != 1 ||
		!strings.Contains(errs.String(), "upload.yaml:2:11: rule Upload: atomicbucket: invalid limit: burst 9 is below the cost 10 of one request") {
		t.Errorf("a burst below Upload's cost of 10: exit %d, %q", code, errs.String())
	}
	if code := Main([]string{"-policy", policy}, &out, &errs); code != 2 {
		t.Errorf("no file: exit %d, want 2 (usage)", code)
	}
}

// gen numbers on window rules: a shared window's limit may change (its store
// carries each key's window), within what the store can hold (a counted
// window's sixteenths whole microseconds); a window with plans keeps the
// policy's limits.
func TestNumbersCommandWindows(t *testing.T) {
	file := tempFiles(t)
	policy := filepath.Join("..", "..", "testdata", "valid", "26_shared_windows.yaml")
	var out, errs bytes.Buffer
	good := file("good.yaml", "rules:\n  Quota: {rate: 80/h, burst: 80}\n")
	if code := Main([]string{"-policy", policy, good}, &out, &errs); code != 0 {
		t.Fatalf("a shared window's new limit: exit %d: %s", code, errs.String())
	}
	odd := file("odd.yaml", "rules:\n  Quota: {rate: 100 per 50002us, burst: 100}\n")
	errs.Reset()
	if code := Main([]string{"-policy", policy, odd}, &out, &errs); code != 1 || !strings.Contains(errs.String(), "sixteenths are whole microseconds") {
		t.Errorf("a shared counted window of 50.002 ms: exit %d, %q", code, errs.String())
	}
}

// tempFiles returns a function writing a file of src in a directory of the
// test's own, returning its path.
func tempFiles(t *testing.T) func(name, src string) string {
	dir := t.TempDir()
	return func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
}
