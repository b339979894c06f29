package envoy

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/limitgen/limitgen/gen/internal/policy"
)

// The checked-in translation of limitrls's envoyproxy/ratelimit fixture is
// what gen envoy writes now (limitrls's tests serve the package generated
// from it), and it is a valid policy.
func TestEnvoyTranslationUpToDate(t *testing.T) {
	var out, errs bytes.Buffer
	// The translation names its source as given: run it from the
	// repository's root, as make generate does.
	t.Chdir(filepath.Join("..", "..", ".."))
	in := filepath.Join("limitrls", "testdata", "envoy", "rl.yaml")
	if code := Main([]string{"-local", "-package", "envoylimits", in}, &out, &errs); code != 0 {
		t.Fatalf("gen envoy: exit %d: %s", code, errs.String())
	}
	want, err := os.ReadFile(filepath.Join("limitrls", "testdata", "envoy.policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if out.String() != string(want) {
		t.Errorf("limitrls/testdata/envoy.policy.yaml is not what gen envoy writes (make generate):\n%s", out.String())
	}
}

// What a policy cannot say is refused, with the file, line and column of
// what says it.
func TestEnvoyRefusals(t *testing.T) {
	for _, c := range []struct{ name, src, want string }{
		{"composite key of 9 fields", "domain: d\ndescriptors:\n  - key: a\n    descriptors:\n      - key: b\n        descriptors:\n          - key: c\n            descriptors:\n              - key: d\n                descriptors:\n                  - key: e\n                    descriptors:\n                      - key: f\n                        descriptors:\n                          - key: g\n                            descriptors:\n                              - key: h\n                                descriptors:\n                                  - key: i\n                                    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`x.yaml:19:42: "i": a descriptor path with more than 8 entries without a value: a composite key has at most 8 fields`},
		{"replaces", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1\n      replaces: [{name: other}]\n",
			"x.yaml:7:7: replaces cannot be translated"},
		{"wildcard", "domain: d\ndescriptors:\n  - key: path\n    value: /api/*\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`x.yaml:4:12: value "/api/*": a wildcard value`},
		{"unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
			`x.yaml:4:24: unit "fortnight": use second, minute, hour, day, week, month or year`},
		{"zero", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 0}\n",
			`x.yaml:4:51: requests_per_unit "0": a whole number, at least 1`},
		{"unknown field", "domain: d\ndescriptors:\n  - key: a\n    quota: 5\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			`x.yaml:4:5: descriptor field "quota" cannot be translated`},
		{"no domain", "descriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
			"x.yaml:1:1: the file names no domain"},
		{"duplicate", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    rate_limit: {unit: second, requests_per_unit: 1}\n  - key: a\n    value: b\n    rate_limit: {unit: minute, requests_per_unit: 5}\n",
			"x.yaml:6:5: descriptor a=b is given twice (first at line 3)"},
		{"nested duplicate", "domain: d\ndescriptors:\n  - key: t\n    descriptors:\n      - key: u\n        rate_limit: {unit: second, requests_per_unit: 1}\n      - key: u\n        rate_limit: {unit: second, requests_per_unit: 2}\n",
			"x.yaml:7:9: descriptor t, u is given twice (first at line 5)"},
	} {
		_, errs := translateEnvoy("x.yaml", []byte(c.src))
		var msgs []string
		for _, e := range errs {
			msgs = append(msgs, e.Error())
		}
		if !strings.Contains(strings.Join(msgs, "\n"), c.want) {
			t.Errorf("%s: errors %q, want one saying %q", c.name, msgs, c.want)
		}
	}
}

// A translation compiles as a policy: keyed window rules for descriptors
// without a value, shared in the domain's namespace and denying while their
// store cannot decide (or each process's own with -local), the most specific
// pattern first, shadow_mode as shadow, unlimited as a pattern that limits
// nothing; weeks as 168 hours.
func TestEnvoyTranslates(t *testing.T) {
	src := "domain: Edge.Proxy\ndescriptors:\n" +
		"  - key: user\n    rate_limit: {unit: week, requests_per_unit: 7}\n" +
		"  - key: user\n    value: vip\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 100}\n" +
		"  - key: health\n    rate_limit: {unlimited: true}\n"
	d, errs := translateEnvoy("edge.yaml", []byte(src))
	if len(errs) != 0 {
		t.Fatal(errs)
	}
	for _, shared := range []bool{true, false} {
		o := envoyOptions{pkg: "limits", shared: shared}
		if shared {
			o.namespace = namespaceOf([]envoyDomain{d})
		}
		pol, err := envoyPolicy(o, []envoyDomain{d})
		if err != nil {
			t.Fatal(err)
		}
		m, err := policy.Compile("translated", pol)
		if err != nil {
			t.Fatalf("%v\n%s", err, pol)
		}
		if len(m.Rules) != 2 || m.Rules[0].KeyType != "string" || m.Rules[1].KeyType != "" || !m.Rules[0].Limits[0].Window || m.Rules[0].Limits[0].PeriodNs != int64(168*3600e9) {
			t.Errorf("rules %+v\n%s", m.Rules, pol)
		}
		for _, r := range m.Rules {
			if r.Shared != shared || shared && r.Failure != "FailDeny" {
				t.Errorf("shared %v: rule %s shared %v, failure %q\n%s", shared, r.Name, r.Shared, r.Failure, pol)
			}
		}
		if shared && m.Namespace != "edge.proxy" {
			t.Errorf("namespace %q, want edge.proxy (from the domain)", m.Namespace)
		}
		s := m.RLS
		if len(s.Routes) != 3 || s.Routes[1].Mode != "Shadow" || s.Domains[0].Match[0] != 1 || !s.Routes[2].Unlimited {
			t.Errorf("patterns %+v, match order %v\n%s", s.Routes, s.Domains[0].Match, pol)
		}
	}
}
