package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"text/template"

	"github.com/limitgen/limitgen/gen/internal/emit"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/internal/keycap"
)

// TestGeneratedPackagesRun generates every policy in testdata/valid (and the
// repository's policy.yaml) into its own package of a scratch module, together
// with a test written from the model: each rule (each plan of it) and each tier
// is driven through a seeded sequence of requests at explicit times and compared,
// decision for decision, with the exact reference of package fuzz (tiers with
// the reference composed all-or-nothing). One `go test ./...` builds and runs
// them all.
// staticcheck is the staticcheck TestGeneratedPackagesRun runs, fetched
// through the module proxy by go run.
const staticcheck = "honnef.co/go/tools/cmd/staticcheck@v0.8.2"

func TestGeneratedPackagesRun(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	policies, _ := filepath.Glob("testdata/valid/*.yaml")
	// gen envoy's translations, local and shared: an rls: section with no
	// shared rule once gave a ready server that did not build.
	policies = append(policies, "../policy.yaml", "../limitrls/testdata/envoy.policy.yaml", "../examples/envoy/translated/policy.yaml")
	// A sample of what the front end accepts beyond the hand-written policies:
	// every FuzzPolicy corpus input it accepts, and seeded random valid policies.
	fuzzed := append(acceptedFuzzInputs(t), randomPolicies(t, 24)...)
	policies = append(policies, fuzzed...)
	if len(policies)-len(fuzzed) < 20 {
		t.Fatalf("%d valid policies, want at least 20", len(policies))
	}
	mod := t.TempDir()
	// A policy with a grpc: section imports limitgrpc, a module of its own
	// (whose test-only requirement, pgstore, needs its replace line too), one
	// with an rls: section limitrls.
	// A ready server (-main) imports rlsserver, which imports the stores'
	// modules and limitprom.
	gomod := fmt.Sprintf("module gentest\n\ngo 1.26.0\n\nrequire (\n"+
		"\tgithub.com/limitgen/limitgen v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/limitgen/limitgen/limitgrpc v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/limitgen/limitgen/limitrls v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/limitgen/limitgen/limitprom v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/limitgen/limitgen/redisstore v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/limitgen/limitgen/pgstore v0.0.0-00010101000000-000000000000\n"+
		"\tgithub.com/limitgen/limitgen/rlsserver v0.0.0-00010101000000-000000000000\n)\n\n"+
		"replace github.com/limitgen/limitgen => %[1]s\n\n"+
		"replace github.com/limitgen/limitgen/limitgrpc => %[1]s/limitgrpc\n\n"+
		"replace github.com/limitgen/limitgen/limitrls => %[1]s/limitrls\n\n"+
		"replace github.com/limitgen/limitgen/limitprom => %[1]s/limitprom\n\n"+
		"replace github.com/limitgen/limitgen/redisstore => %[1]s/redisstore\n\n"+
		"replace github.com/limitgen/limitgen/pgstore => %[1]s/pgstore\n\n"+
		"replace github.com/limitgen/limitgen/rlsserver => %[1]s/rlsserver\n", root)
	must(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(mod, "go.sum"), sum, 0o644))
	// The harness holds each package to the exact reference, which is
	// internal to limitgen's module: it gets a copy, as package
	// gentest/reference.
	refs, _ := filepath.Glob(filepath.Join(root, "internal", "reference", "*.go"))
	must(t, os.MkdirAll(filepath.Join(mod, "reference"), 0o755))
	for _, f := range refs {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		must(t, err)
		must(t, os.WriteFile(filepath.Join(mod, "reference", filepath.Base(f)), src, 0o644))
	}

	mains := 0
	type linkCase struct {
		path           string
		shared, noDoor bool
	}
	var links []linkCase
	for i, path := range policies {
		raw, err := os.ReadFile(path)
		must(t, err)
		m, err := compile(filepath.Base(path), raw)
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		src, err := render(m)
		must(t, err)
		dir := filepath.Join(mod, fmt.Sprintf("p%02d", i))
		must(t, os.MkdirAll(dir, 0o755))
		must(t, os.WriteFile(filepath.Join(dir, m.Pkg+".go"), src, 0o644))
		var harness bytes.Buffer
		if err := harnessTmpl.Execute(&harness, harnessData(m)); err != nil {
			t.Fatal(err)
		}
		must(t, os.WriteFile(filepath.Join(dir, "harness.go"), harness.Bytes(), 0o644))
		// The package alone (no harness), for what it links and for
		// staticcheck, which reports nothing unused in a file that says it
		// is generated: this copy does not say so.
		alone := filepath.Join(mod, fmt.Sprintf("d%02d", i))
		must(t, os.MkdirAll(alone, 0o755))
		must(t, os.WriteFile(filepath.Join(alone, m.Pkg+".go"), bytes.Replace(src, []byte("// Code generated by limitgen. DO NOT EDIT."), []byte("// Written by limitgen."), 1), 0o644))
		links = append(links, linkCase{path, slices.ContainsFunc(m.Rules, func(r model.Rule) bool { return r.Shared }),
			m.HTTP == nil && m.GRPC == nil && m.RLS == nil})
		// Every policy the generator accepts with -main (an rls: section,
		// its shared rules on the one store the server's flags name) gets
		// its ready server, built and vetted with the rest.
		if m.RLS != nil && len(m.StoreNames()) == 0 {
			main, err := emit.RenderMain(m, fmt.Sprintf("gentest/p%02d", i))
			must(t, err)
			must(t, os.MkdirAll(filepath.Join(dir, "cmd"), 0o755))
			must(t, os.WriteFile(filepath.Join(dir, "cmd", "main.go"), main, 0o644))
			mains++
		}
	}
	if mains < 3 {
		t.Fatalf("%d ready servers, want one for every policy with an rls: section (at least 3)", mains)
	}
	// One test binary runs every package's harness, a subtest each: linking a
	// test binary a package took most of this test's time.
	var all bytes.Buffer
	all.WriteString("package all_test\n\nimport (\n\t\"testing\"\n\n")
	for i := range policies {
		fmt.Fprintf(&all, "\tp%02d \"gentest/p%02d\"\n", i, i)
	}
	all.WriteString(")\n\nfunc TestGenerated(t *testing.T) {\n")
	for i := range policies {
		fmt.Fprintf(&all, "\tt.Run(\"p%02d\", p%02d.RulesMatchReference)\n", i, i)
		fmt.Fprintf(&all, "\tt.Run(\"p%02d\", p%02d.TiersMatchReference)\n", i, i)
		fmt.Fprintf(&all, "\tt.Run(\"p%02d\", p%02d.TierSlotsMatchReference)\n", i, i)
	}
	all.WriteString("}\n")
	must(t, os.MkdirAll(filepath.Join(mod, "all"), 0o755))
	must(t, os.WriteFile(filepath.Join(mod, "all", "all_test.go"), all.Bytes(), 0o644))
	// Every accepted policy's package must pass go vet (all analyzers), not only
	// build: the property the identifier checks in validate.go exist for.
	// The packages alone (dNN) are the same code as pNN's: vetted there.
	vetted := []string{"./all"}
	for i := range policies {
		vetted = append(vetted, fmt.Sprintf("./p%02d/...", i))
	}
	vet := exec.Command("go", append([]string{"vet"}, vetted...)...)
	vet.Dir = mod
	vet.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := vet.CombinedOutput(); err != nil {
		t.Fatalf("go vet in the generated module: %v\n%s", err, out)
	}
	// Generated code holds nothing unused: staticcheck's unused check
	// (U1000) over every package alone (a harness could use what its
	// package does not).
	var alones []string
	for i := range links {
		alones = append(alones, fmt.Sprintf("./d%02d", i))
	}
	sc := exec.Command("go", append([]string{"run", staticcheck, "-checks", "U1000"}, alones...)...)
	sc.Dir = mod
	sc.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	if out, err := sc.CombinedOutput(); err != nil {
		t.Fatalf("staticcheck -checks U1000 on the generated packages: %v\n%s", err, out)
	}
	// A package of local rules without a door links no store: not shared,
	// no store client, no crypto/sha256 (a door's net/http links it); a
	// package with a shared rule links shared (what makes this test able to
	// fail).
	// One go list for every package, not one a package.
	var dirs []string
	for i := range links {
		dirs = append(dirs, fmt.Sprintf("./d%02d", i))
	}
	list := exec.Command("go", append([]string{"list", "-f", "{{.ImportPath}} {{join .Deps \" \"}}"}, dirs...)...)
	list.Dir = mod
	list.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	listed, err := list.Output()
	if err != nil {
		t.Fatalf("go list -deps of the generated packages: %v", err)
	}
	depsOf := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(listed)), "\n") {
		f := strings.Fields(line)
		depsOf[strings.TrimPrefix(f[0], "gentest/")] = f[1:]
	}
	locals := 0
	for i, c := range links {
		deps, ok := depsOf[fmt.Sprintf("d%02d", i)]
		if !ok {
			t.Fatalf("go list said nothing of %s (d%02d)", c.path, i)
		}
		hasShared := slices.Contains(deps, "github.com/limitgen/limitgen/shared")
		switch {
		case c.shared && !hasShared:
			t.Errorf("%s has shared rules, and its package does not link shared", c.path)
		case !c.shared && c.noDoor:
			locals++
			for _, d := range deps {
				if d == "github.com/limitgen/limitgen/shared" || d == "crypto/sha256" || strings.Contains(d, "redis") || strings.Contains(d, "jackc/pgx") {
					t.Errorf("%s has local rules alone and no door, and its package links %s", c.path, d)
				}
			}
		}
	}
	t.Logf("%d packages of local rules without a door link no store", locals)
	if locals < 10 {
		t.Errorf("%d packages of local rules without a door checked for what they link, want at least 10", locals)
	}
	// -vet=off: go vet above ran every analyzer already (go test would run a
	// subset of them again, package by package).
	cmd := exec.Command("go", "test", "-count=1", "-vet=off", "-v", "./all")
	cmd.Dir = mod
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go test in the generated module: %v\n%s", err, out)
	}
	passed := 0
	for _, line := range strings.Split(string(out), "\n") {
		if strings.HasPrefix(line, "    --- PASS: TestGenerated/p") {
			passed++
		}
	}
	if passed != 3*len(policies) {
		t.Fatalf("%d of %d generated packages passed:\n%s", passed, len(policies), out)
	}
	t.Logf("%d generated packages built and matched the reference, in one test binary; %d ready servers built", len(policies), mains)
}

// acceptedFuzzInputs writes each FuzzPolicy corpus input the generator accepts
// (renamed to a package of its own) to a temporary policy file.
func acceptedFuzzInputs(t *testing.T) []string {
	files, _ := filepath.Glob("testdata/fuzz/FuzzPolicy/*")
	dir := t.TempDir()
	var out []string
	for i, f := range files {
		raw, err := os.ReadFile(f)
		must(t, err)
		src, ok := corpusBytes(raw)
		if !ok {
			continue
		}
		m, err := compile("fuzz.yaml", src)
		if err != nil {
			continue
		}
		m.Pkg = fmt.Sprintf("fuzzed%d", i)
		path := filepath.Join(dir, fmt.Sprintf("fuzzed%d.yaml", i))
		// Re-serialise only the package line: the rest of the input stays as found.
		must(t, os.WriteFile(path, renamePackage(src, m.Pkg), 0o644))
		if _, err := compile("fuzz.yaml", renamePackage(src, m.Pkg)); err != nil {
			continue // the rename changed its meaning (a package line inside a flow mapping, say)
		}
		out = append(out, path)
	}
	return out
}

// hostileNames are rule and tier names that collide with what the generated
// package declares, or with each other's derived names (the hostile trial's
// list): the generator must refuse them or emit code that vets.
var hostileNames = []string{"TierDecision", "ErrUnknownPlan", "Plan", "plan_free", "Global", "GlobalLimiter",
	"Request", "RequestAt", "New", "newGlobalLimiter", "globalUnitsPerNs", "Free", "numPlans", "R0Limiter"}

// randomPolicies writes n seeded random policies that the generator accepts,
// mixing every feature: key types, rate spellings, refill modes, initial tokens,
// costs, key caps, plans and tiers, and now and then names from hostileNames.
func randomPolicies(t *testing.T, n int) []string {
	rng := rand.New(rand.NewPCG(11, 13))
	pick := func(s ...string) string { return s[rng.IntN(len(s))] }
	dir := t.TempDir()
	var out []string
	refused, httpSections, windows, sharedWindows, mixedTiers, inFlight := 0, 0, 0, 0, 0, 0
	for tries := 0; len(out) < n && tries < 50*n; tries++ {
		var b strings.Builder
		fmt.Fprintf(&b, "package: rnd%d\n", len(out))
		plans := rng.IntN(2) == 0
		if plans {
			b.WriteString(pick("plans: [free, pro]\n", "plans: [free, pro]\n", "plans: [free, Free]\n"))
		}
		// Rules all shared, some shared (a tier over them mixes local and
		// shared rules; windows stay local then), or all local.
		mode := rng.IntN(6)
		allShared, mixed := mode < 2, mode == 2
		if allShared || mixed {
			b.WriteString("namespace: random\n")
		}
		nShared, nLocal := 0, 0
		b.WriteString("rules:\n")
		nrules := 1 + rng.IntN(4)
		var names, keyTypes, tierRules []string
		for i := range nrules {
			name := fmt.Sprintf("R%d", i)
			if rng.IntN(5) == 0 {
				name = pick(hostileNames...)
			}
			names = append(names, name)
			burst := 1 + rng.IntN(20)
			fmt.Fprintf(&b, "  - name: %s\n", name)
			k := pick("", "string", "int64", "uint32", "int", "composite")
			keyTypes = append(keyTypes, k)
			if k == "composite" {
				b.WriteString("    key: {tenant: string, n: int64}\n")
			} else if k != "" {
				fmt.Fprintf(&b, "    key: %s\n", k)
			}
			if k != "" {
				if rng.IntN(3) == 0 {
					fmt.Fprintf(&b, "    max_keys: %d\n    at_cap: %s\n", 1+rng.IntN(3), pick("deny", "allow"))
				}
			}
			if rng.IntN(4) == 0 { // a window rule: exact (≤ 64) or counted; shared in a policy of shared rules
				tierRules = append(tierRules, name)
				limit := 1 + rng.IntN(80)
				fmt.Fprintf(&b, "    limit: %d\n    window: %s\n", limit, pick("1s", "10s", "500ms", "1h", "day", "90s"))
				if rng.IntN(4) == 0 {
					fmt.Fprintf(&b, "    cost: %d\n", 1+rng.IntN(limit))
				}
				if allShared {
					fmt.Fprintf(&b, "    shared: true\n    on_failure: %s\n", pick("deny", "allow", "local\n    local_share: 0.5"))
					nShared++
					if rng.IntN(3) == 0 {
						fmt.Fprintf(&b, "    lease: %d\n", 1+rng.IntN(limit))
					}
				} else {
					nLocal++
					if plans && rng.IntN(2) == 0 {
						fmt.Fprintf(&b, "    plans:\n      pro: {limit: %d, window: %s}\n", 1+rng.IntN(80), pick("2s", "1h", "40ms"))
					}
				}
				continue
			}
			tierRules = append(tierRules, name)
			interval := rng.IntN(3) == 0
			switch rng.IntN(3) {
			case 0:
				fmt.Fprintf(&b, "    rate: %d/%s\n", 1+rng.IntN(50), pick("s", "min", "h", "100ms"))
			case 1:
				fmt.Fprintf(&b, "    rate: %d per %s\n", 1+rng.IntN(50), pick("10s", "1m30s", "second", "250ms"))
			default:
				fmt.Fprintf(&b, "    rps: %d\n", 1+rng.IntN(1000))
			}
			if interval {
				b.WriteString("    refill: interval\n")
				if rng.IntN(2) == 0 {
					b.WriteString("    aligned: true\n")
				}
			}
			fmt.Fprintf(&b, "    burst: %d\n", burst)
			if rng.IntN(3) == 0 {
				fmt.Fprintf(&b, "    initial: %d\n", rng.IntN(burst+1))
			}
			if rng.IntN(4) == 0 {
				fmt.Fprintf(&b, "    cost: %d\n", 1+rng.IntN(burst))
			}
			if allShared || mixed && rng.IntN(2) == 0 {
				fmt.Fprintf(&b, "    shared: true\n    on_failure: %s\n", pick("deny", "allow", "local\n    local_share: 0.5"))
				nShared++
			} else {
				nLocal++
			}
			if plans && rng.IntN(2) == 0 {
				fmt.Fprintf(&b, "    plans:\n      pro: {rate: %d/s, burst: %d}\n", 1+rng.IntN(100), burst+rng.IntN(10))
			}
		}
		// An in-flight rule now and then, drawn from its own generator so the
		// other draws stay as they were; no route or tier names it (both
		// refuse one).
		frng := rand.New(rand.NewPCG(17, uint64(tries)))
		if frng.IntN(3) == 0 {
			fmt.Fprintf(&b, "  - name: Slots\n    in_flight: %d\n    max_hold: %s\n", 1+frng.IntN(8), []string{"1s", "30s", "250ms", "10 min", "1500us"}[frng.IntN(5)])
			switch k := []string{"", "string", "uint32", "composite"}[frng.IntN(4)]; k {
			case "composite":
				b.WriteString("    key: {tenant: string, n: int64}\n")
			case "":
			default:
				fmt.Fprintf(&b, "    key: %s\n", k)
				if frng.IntN(2) == 0 {
					fmt.Fprintf(&b, "    max_keys: %d\n    at_cap: %s\n", 1+frng.IntN(3), []string{"deny", "allow"}[frng.IntN(2)])
				}
			}
		}
		tier := ""
		if rng.IntN(2) == 0 && len(tierRules) > 0 {
			tier = pick("T", "T", "Request", "Global")
			fmt.Fprintf(&b, "tiers:\n  - {name: %s, rules: [%s]}\n", tier, strings.Join(tierRules, ", "))
		}
		withHTTP := rng.IntN(2) == 0
		if withHTTP {
			randomHTTP(&b, rng, pick, plans, names, keyTypes, tier)
		}
		src := []byte(b.String())
		if _, err := compile("random.yaml", src); err != nil {
			refused++
			continue // a draw the generator refuses (a cost above a plan's burst, a name clash)
		}
		if withHTTP {
			httpSections++
		}
		if tier != "" && nShared > 0 && nLocal > 0 {
			mixedTiers++
		}
		if strings.Contains(string(src), "in_flight:") {
			inFlight++
		}
		if strings.Contains(string(src), "window:") {
			windows++
			if allShared {
				sharedWindows++
			}
		}
		path := filepath.Join(dir, fmt.Sprintf("random%d.yaml", len(out)))
		must(t, os.WriteFile(path, src, 0o644))
		out = append(out, path)
	}
	if len(out) < n {
		t.Fatalf("only %d of %d random policies were valid", len(out), n)
	}
	if windows < n/5 || sharedWindows < n/20 || mixedTiers < n/20 || inFlight < n/5 {
		t.Fatalf("only %d of %d random policies have a window rule (%d shared), %d a tier of local and shared rules, %d an in-flight rule", windows, len(out), sharedWindows, mixedTiers, inFlight)
	}
	t.Logf("random policies: %d accepted (%d with an http: section, %d with a window rule, %d of them shared, %d with a mixed tier, %d with an in-flight rule), %d refused", len(out), httpSections, windows, sharedWindows, mixedTiers, inFlight, refused)
	return out
}

// randomHTTP writes an http: section routing every rule (and the tier) with
// key, cost and plan sources drawn from all kinds that fit.
func randomHTTP(b *strings.Builder, rng *rand.Rand, pick func(...string) string, plans bool, names, keyTypes []string, tier string) {
	b.WriteString("http:\n")
	fmt.Fprintf(b, "  headers: %s\n  jitter: %s\n  log_denials: %d\n", pick("ietf", "legacy", "none"), pick("0", "0.25", "1"), rng.IntN(3))
	if rng.IntN(2) == 0 {
		fmt.Fprintf(b, "  client_ip: {trusted_proxies: [10.0.0.0/8, \"fd00::/8\"], header: %s, ipv6_prefix: %d}\n", pick("x-forwarded-for", "forwarded"), 48+rng.IntN(81))
	}
	if plans {
		if rng.IntN(2) == 0 {
			b.WriteString("  plan: {from: \"func:PlanOf\", default: pro}\n")
		} else {
			b.WriteString("  plan: {from: \"header:X-Plan\", trusted: true, default: free}\n")
		}
		b.WriteString(pick("", "  missing_key: 401\n", "  missing_key: 403\n"))
	}
	b.WriteString("  keys:\n")
	for i, k := range keyTypes {
		if k == "" {
			continue
		}
		if k == "composite" {
			fmt.Fprintf(b, "    %s: {tenant: [%s], n: [%s]}\n", names[i], pick("ip", "header:X-Key", "pattern"), pick("header:X-Num", "query:n", "route"))
			continue
		}
		var srcs []string
		for range 1 + rng.IntN(3) {
			if k == "string" {
				srcs = append(srcs, pick("ip", "header:X-Key", "query:key", "pattern", "func:UserKey"))
			} else {
				srcs = append(srcs, pick("header:X-Num", "query:n", "route", "func:Key"+strings.ToUpper(k[:1])+k[1:]))
			}
		}
		fmt.Fprintf(b, "    %s: [%s]\n", names[i], "\""+strings.Join(srcs, "\", \"")+"\"")
	}
	b.WriteString("  routes:\n")
	literals := map[string]bool{}
	for i, n := range names {
		fmt.Fprintf(b, "    - {pattern: \"%s /r%d/{id}\", rule: %s, mode: %s", pick("GET", "POST", "PUT"), i, n, pick("enforce", "enforce", "shadow", "off"))
		switch rng.IntN(3) {
		case 1:
			fmt.Fprintf(b, ", cost: %d", 1+rng.IntN(3))
		case 2:
			fmt.Fprintf(b, ", cost: {from: \"%s\", default: 1, max: %d}", pick("header:X-Cost", "query:cost"), 1+rng.IntN(100))
		}
		switch {
		case keyTypes[i] == "composite" && rng.IntN(3) == 0:
			fmt.Fprintf(b, ", keys: {%s: {tenant: \"path:id\", n: [\"query:n\", \"header:X-Num\"]}}", n)
		case keyTypes[i] != "" && rng.IntN(3) == 0:
			fmt.Fprintf(b, ", keys: {%s: [\"path:id\"]}", n)
		}
		b.WriteString("}\n")
		// A literal path, shared by some rules with other methods (or
		// none): the generated switch over literal paths and methods
		// (httpRoute) is checked against the router when the package loads.
		if lit := fmt.Sprintf("%s/l%d", pick("", "GET ", "HEAD ", "POST ", "DELETE "), rng.IntN(2)); rng.IntN(2) == 0 && !literals[lit] {
			literals[lit] = true
			fmt.Fprintf(b, "    - {pattern: \"%s\", rule: %s}\n", lit, n)
		}
	}
	if tier != "" {
		fmt.Fprintf(b, "    - {pattern: /t/, tier: %s}\n", tier)
	}
}

// corpusBytes decodes a Go fuzz corpus file holding one []byte value.
func corpusBytes(raw []byte) ([]byte, bool) {
	lines := strings.SplitN(string(raw), "\n", 3)
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "go test fuzz v1") {
		return nil, false
	}
	lit, ok := strings.CutPrefix(strings.TrimSpace(lines[1]), "[]byte(")
	if !ok {
		return nil, false
	}
	s, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
	if err != nil {
		return nil, false
	}
	return []byte(s), true
}

// renamePackage replaces the value of a top-level "package:" line.
func renamePackage(src []byte, pkg string) []byte {
	lines := strings.Split(string(src), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "package:") {
			lines[i] = "package: " + pkg
		}
	}
	return []byte(strings.Join(lines, "\n"))
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The harness's view of the model.
type hRule struct {
	Name            string // as written in the policy
	GoName, KeyType string
	Keyed, Planned  bool
	Shared          bool    // its process-local limiter is new…LocalLimiter
	Plans           []hPlan // one entry ("", no plan) for rules without plans
	MaxKeys         int64
	AllowCap        bool
	Fields          []model.KeyField // a composite key's
	Window          bool             // a window rule: at most a plan's Burst in any of its WindowNs
	InFlight        bool             // an in-flight rule: at most Burst slots held, each for at most WindowNs
}

type hPlan struct {
	Const    string // PlanPro, or "" for a rule without plans
	WindowNs int64  // a window rule's window on the plan
	Burst    int64
	Emit     int64 // ns per token, at least 1
	Cost     int64 // default cost
}

type hTier struct {
	GoName  string
	Planned bool
	Shared  bool // its process-local forms are Local…
	Rules   []hRule
	Slots   []hRule // its in-flight rules: its forms acquire
	Store   bool    // a rule of it is shared: with slots, its forms decide on the store only
}

type hModel struct {
	Pkg    string
	Global bool // a rule without a key: the package has WithStart
	Plans  []string
	Rules  []hRule
	Tiers  []hTier
}

func harnessData(m *model.Model) hModel {
	h := hModel{Pkg: m.Pkg}
	for _, p := range m.Plans {
		h.Plans = append(h.Plans, p.GoName)
	}
	conv := func(r model.Rule) hRule {
		hr := hRule{Name: r.Name, GoName: r.GoName, KeyType: r.KeyType, Keyed: r.KeyType != "", Planned: r.Planned, Shared: r.Shared, MaxKeys: r.MaxKeys, AllowCap: r.AllowCap, Fields: r.Fields,
			Window: r.IsWindow(), InFlight: r.IsInFlight()}
		for i, l := range r.Limits {
			p := hPlan{Burst: l.Burst, Emit: max(l.PeriodNs/l.Tokens, 1), Cost: l.Cost, WindowNs: l.PeriodNs}
			if r.Planned {
				p.Const = m.Plans[i].GoName
			}
			hr.Plans = append(hr.Plans, p)
		}
		return hr
	}
	for _, r := range m.Rules {
		h.Rules = append(h.Rules, conv(r))
		h.Global = h.Global || r.KeyType == "" && !r.IsWindow() && !r.IsInFlight()
	}
	for _, t := range m.Tiers {
		ht := hTier{GoName: t.GoName, Shared: t.Shared, Store: t.Shared}
		for _, ri := range t.Rules {
			hr := conv(m.Rules[ri])
			ht.Planned = ht.Planned || hr.Planned
			ht.Rules = append(ht.Rules, hr)
		}
		for _, ri := range t.Slots {
			hr := conv(m.Rules[ri])
			ht.Planned = ht.Planned || hr.Planned
			ht.Slots = append(ht.Slots, hr)
			ht.Store = ht.Store || m.Rules[ri].Shared
		}
		h.Tiers = append(h.Tiers, ht)
	}
	return h
}

var harnessTmpl = template.Must(template.New("harness").Funcs(template.FuncMap{
	"key": func(r hRule) string { // the generated method's key argument, from k
		switch {
		case !r.Keyed:
			return ""
		case r.KeyType == "string":
			return `"k"+strconv.Itoa(k), `
		case len(r.Fields) > 0: // every field from k: one struct a k
			var fs []string
			for _, f := range r.Fields {
				v := f.Type + "(k)"
				if f.Type == "string" {
					v = `"k"+strconv.Itoa(k)`
				}
				fs = append(fs, f.GoName+": "+v)
			}
			return r.KeyType + "{" + strings.Join(fs, ", ") + "}, "
		default:
			return r.KeyType + "(k), "
		}
	},
	"refKey": func(r hRule) string { // the reference's key for the same k
		switch {
		case !r.Keyed:
			return `""`
		case r.KeyType == "string":
			return `"k"+strconv.Itoa(k)`
		case len(r.Fields) > 0: // its text form: an interval rule's grid is placed by its hash
			var fs []string
			for _, f := range r.Fields {
				if f.Type == "string" {
					fs = append(fs, `"k"+strconv.Itoa(k)`)
				} else {
					fs = append(fs, "strconv.Itoa(k)")
				}
			}
			return strings.Join(fs, `+","+`)
		default:
			return "strconv.Itoa(k)"
		}
	},
	"plan": func(p hPlan) string {
		if p.Const == "" {
			return ""
		}
		return p.Const + ", "
	},
	"make": func(r hRule) string { // the rule's limiter in this process (a shared rule's Local)
		ctor := "new" + r.GoName + "Limiter"
		if r.Shared {
			ctor = "new" + r.GoName + "LocalLimiter"
		}
		if r.Keyed || r.Window || r.InFlight {
			return ctor + "()"
		}
		return ctor + "(at(t0))"
	},
	"planList": func(plans []string) []string { // a policy without plans: its tiers run once
		if len(plans) == 0 {
			return []string{""}
		}
		return plans
	},
	"windowRef": func(r hRule, rule string) string { // the reference of a window rule whose runtime rule is rule
		return fmt.Sprintf("reference.NewWindow(reference.WindowParams{Limit: %[1]s.Limit(), Window: int64(%[1]s.Window()), MaxKeys: %[2]d, AllowCap: %[3]v, "+
			"Grain: int64(%[1]s.Grain()), Grace: int64(atomicbucket.SweepGrace), CapSpacing: %[2]d * %[4]d})", rule, r.MaxKeys, r.AllowCap, int64(keycap.CapSweepSpacing))
	},
	"params": func(r hRule) string { // the reference's parameters for the rule's buckets
		if r.Keyed {
			return "reference.ParamsOf"
		}
		return "reference.SingleParamsOf"
	},
	"keys": func(r hRule) int64 { // how many keys a test draws: never more than the cap
		if r.MaxKeys > 0 {
			return min(r.MaxKeys, 4)
		}
		return 4
	},
	"atCap": func(r hRule) string {
		return strconv.FormatBool(r.AllowCap)
	},
}).Parse(`package {{.Pkg}}

import (
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/tier"
	"gentest/reference"
)

var (
	_ = strconv.Itoa
	_ = tier.At
	_ atomicslot.Set
)

const t0 = int64(time.Hour)

// at is the generated package's time for the reference's t.
func at(t int64) atomicbucket.Time { return atomicbucket.Time(t) }

// costs draws a cost: mostly small, sometimes the burst, 0, or out of range.
func costs(rng *rand.Rand, burst int64) int64 {
	return []int64{0, 1, 1, 1, 2, 3, burst, burst + 1, -1}[rng.IntN(9)]
}

// RulesMatchReference holds every rule of the package to the reference (the
// generated module's one test binary runs it, a subtest a package).
func RulesMatchReference(t *testing.T) {
{{- range $r := .Rules}}{{range $p := .Plans}}
	{{- if $r.InFlight}}
	t.Run("{{$r.GoName}}{{$p.Const}}", func(t *testing.T) {
		l := {{make $r}}
		ref := reference.NewInFlight(l.Rule({{$p.Const}}).Limit(), l.Rule({{$p.Const}}).Hold())
		type held struct {
			key string
			id  uint64
			s   interface{ ReleaseAt(atomicbucket.Time) bool }
		}
		var slots []held
		rng := rand.New(rand.NewPCG(1, 2))
		now := t0
		for i := range 400 {
			now += rng.Int64N({{$p.WindowNs}}/{{$p.Burst}} + 1)
			k := rng.IntN({{keys $r}})
			_ = k
			switch op := rng.IntN(5); {
			case op < 2:
				s, got := l.AcquireAt({{if $r.Planned}}{{$p.Const}}, {{end}}{{key $r}}at(now))
				id, want := ref.Acquire({{refKey $r}}, now)
				if got != want {
					t.Fatalf("step %d: AcquireAt = %+v, reference %+v", i, got, want)
				}
				if got.Allowed {
					slots = append(slots, held{ {{- refKey $r}}, id, s})
				}
			case op < 4 && len(slots) > 0:
				h := slots[rng.IntN(len(slots))]
				if got, want := h.s.ReleaseAt(at(now)), ref.Release(h.key, h.id, now); got != want {
					t.Fatalf("step %d: ReleaseAt of slot %d = %v, reference %v", i, h.id, got, want)
				}
			default:
				if got, want := l.PeekAt({{if $r.Planned}}{{$p.Const}}, {{end}}{{key $r}}at(now)), ref.Peek({{refKey $r}}, now); got != want {
					t.Fatalf("step %d: PeekAt = %+v, reference %+v", i, got, want)
				}
			}
		}
	})
	{{- else if $r.Window}}
	t.Run("{{$r.GoName}}{{$p.Const}}", func(t *testing.T) {
		l := {{make $r}}
		ref := {{windowRef $r (printf "l.Rule(%s)" $p.Const)}}
		var admitted []reference.Admission
		settled := false
		rng := rand.New(rand.NewPCG(1, 2))
		now := t0
		for i := range 400 {
			now += rng.Int64N({{$p.WindowNs}}/{{$p.Burst}} + 1)
			k := rng.IntN(4)
			_ = k
			if i%5 == 4 { // the default cost, through Allow
				got, want := l.AllowAt({{plan $p}}{{key $r}}at(now)), ref.AllowN({{refKey $r}}, now, {{$p.Cost}})
				if got != want.Allowed {
					t.Fatalf("step %d: Allow = %v, reference %+v", i, got, want)
				}
				if got && ref.Holds({{refKey $r}}) {
					admitted = append(admitted, reference.Admission{Key: {{refKey $r}}, At: now, Cost: {{$p.Cost}}})
				}
				continue
			}
			cost := costs(rng, {{$p.Burst}})
			if got, want := l.PeekAt({{plan $p}}{{key $r}}at(now), cost), ref.Peek({{refKey $r}}, now, cost); got != want {
				t.Fatalf("step %d: PeekAt(cost %d) = %+v, reference %+v", i, cost, got, want)
			}
			got, want := l.AllowNAt({{plan $p}}{{key $r}}at(now), cost), ref.AllowN({{refKey $r}}, now, cost)
			if got != want {
				t.Fatalf("step %d: AllowNAt(cost %d) = %+v, reference %+v", i, cost, got, want)
			}
			if got.Allowed && cost > 0 && ref.Holds({{refKey $r}}) {
				admitted = append(admitted, reference.Admission{Key: {{refKey $r}}, At: now, Cost: cost})
			}
			if got.Allowed && i%7 == 3 { // settled: a lower actual given back from what was counted now, a higher one's excess counted now
				settled = true
				actual := rng.Int64N(3*cost + 2)
				if got, want := l.SettleAt({{plan $p}}{{key $r}}at(now), at(now), cost, actual), ref.Settle({{refKey $r}}, now, now, cost, actual); got != want {
					t.Fatalf("step %d: SettleAt(estimate %d, actual %d) forgave %d, reference %d", i, cost, actual, got, want)
				}
			}
		}
		if settled {
			return // a settlement counts beyond the limit: no envelope
		}
		if err := reference.CheckWindow({{$p.Burst}}, {{$p.WindowNs}}, admitted); err != nil {
			t.Fatal(err)
		}
	})
	{{- else}}
	t.Run("{{$r.GoName}}{{$p.Const}}", func(t *testing.T) {
		l := {{make $r}}
		rule := l.Rule({{if $p.Const}}{{$p.Const}}{{end}})
		{{- if $r.Keyed}}
		ref := reference.NewReference(reference.ParamsOf(rule, {{$r.MaxKeys}}, {{atCap $r}}))
		{{- else}}
		ref := reference.NewReference(reference.SingleParamsOf(rule))
		ref.Create("", t0) // the global bucket exists from t0, as the limiter's does
		{{- end}}
		exact := rule.Exact()
		var admitted []reference.Admission // for rules held only approximately: the envelope
		rng := rand.New(rand.NewPCG(1, 2))
		now := t0
		for i := range 400 {
			now += rng.Int64N(min(2*{{$p.Emit}}+1, int64(atomicbucket.MaxUptime)/1000)) // stay inside MaxUptime, where time stops
			k := rng.IntN(4)
			_ = k
			if !exact { // the contract is the envelope: record what is admitted
				cost := costs(rng, {{$p.Burst}})
				if l.AllowNAt({{plan $p}}{{key $r}}at(now), cost).Allowed && cost > 0 {
					admitted = append(admitted, reference.Admission{Key: {{refKey $r}}, At: now, Cost: cost})
				}
				continue
			}
			if i%5 == 4 { // the default cost, through Allow
				got, want := l.AllowAt({{plan $p}}{{key $r}}at(now)), ref.AllowN({{refKey $r}}, now, {{$p.Cost}}).Allowed
				if got != want {
					t.Fatalf("step %d: Allow = %v, reference %v", i, got, want)
				}
				continue
			}
			cost := costs(rng, {{$p.Burst}})
			if got, want := l.PeekAt({{plan $p}}{{key $r}}at(now), cost), ref.Peek({{refKey $r}}, now, cost); got != want {
				t.Fatalf("step %d: PeekAt(cost %d) = %+v, reference %+v", i, cost, got, want)
			}
			got, want := l.AllowNAt({{plan $p}}{{key $r}}at(now), cost), ref.AllowN({{refKey $r}}, now, cost)
			if got != want {
				t.Fatalf("step %d: AllowNAt(cost %d) = %+v, reference %+v", i, cost, got, want)
			}
			if got.Allowed && i%3 == 0 { // settled: an actual from nothing to three times the estimate, or far beyond any debt bound
				actual := rng.Int64N(3*cost + 2)
				if i%27 == 0 {
					actual = 3*{{$p.Burst}} + 7
				}
				if got, want := l.SettleAt({{plan $p}}{{key $r}}at(now), cost, actual), ref.Settle({{refKey $r}}, now, cost, actual); got != want {
					t.Fatalf("step %d: SettleAt(estimate %d, actual %d) forgave %d, reference %d", i, cost, actual, got, want)
				}
			}
		}
		if !exact {
			if e := rule.RelativeError(); e <= 0 || e > atomicbucket.MaxRelativeError {
				t.Fatalf("an inexact rule reports relative error %g", e)
			}
			{{- if not $r.AllowCap}}
			if err := reference.CheckEnvelope(rule.Limit(), admitted); err != nil {
				t.Fatal(err)
			}
			{{- else}}
			_ = admitted // keys beyond the cap are admitted untracked, by the rule's choice: no envelope
			{{- end}}
		}
	})
	{{- end}}
{{- end}}{{end}}
}

// TiersMatchReference holds every tier of the package to the references of
// its rules, composed by tier.At.
func TiersMatchReference(t *testing.T) {
{{- range $t := .Tiers}}{{if not $t.Slots}}{{range $pi, $pc := planList $.Plans}}{{if or $t.Planned (eq $pi 0)}}
	t.Run("{{$t.GoName}}{{if $t.Planned}}{{$pc}}{{end}}", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		lims := New({{if $.Global}}WithStart(at(t0)){{end}})
		refs := []interface {
			Step(key string, cost int64) tier.Step
		}{
			{{- range $i, $r := $t.Rules}}
			{{- if $r.Window}}
			{{windowRef $r (printf "lims.%s.Rule(%s)" $r.GoName (or (and $r.Planned $pc) ""))}},
			{{- else}}
			reference.NewReference({{params $r}}(lims.{{$r.GoName}}.Rule({{if $r.Planned}}{{$pc}}{{end}}){{if $r.Keyed}}, {{$r.MaxKeys}}, {{atCap $r}}{{end}})),
			{{- end}}
			{{- end}}
		}
		{{- range $i, $r := $t.Rules}}{{if and (not $r.Keyed) (not $r.Window)}}
		refs[{{$i}}].(*reference.Reference).Create("", t0) // the global bucket exists from t0
		{{- end}}{{end}}
		names := []string{ {{- range $t.Rules}}"{{.Name}}", {{end -}} }
		rules := []*atomicbucket.Rule{ {{- range $t.Rules}}{{if .Window}}nil{{else}}lims.{{.GoName}}.Rule({{if .Planned}}{{$pc}}{{end}}){{end}}, {{end -}} }
		exact := true
		for _, r := range rules {
			exact = exact && (r == nil || r.Exact())
		}
		admitted := make([][]reference.Admission, len(rules)) // for tiers with a rule held only approximately
		now := t0
		for i := range 300 {
			now += rng.Int64N(int64(20 * time.Millisecond))
			k := rng.IntN(3)
			_ = k
			got := lims.{{if $t.Shared}}Local{{end}}{{$t.GoName}}At({{if $t.Planned}}{{$pc}}, {{end}}{{range $t.Rules}}{{key .}}{{end}}at(now))
			keys := []string{ {{- range $t.Rules}}{{refKey .}}, {{end -}} }
			costs := []int64{ {{- range $t.Rules}}{{with index .Plans 0}}{{.Cost}}{{end}}, {{end -}} }
			{{- range $i, $r := $t.Rules}}{{if $r.Planned}}
			costs[{{$i}}] = []int64{ {{- range $r.Plans}}{{.Cost}}, {{end -}} }[{{$pi}}]
			{{- end}}{{end}}
			steps := make([]tier.Step, len(refs))
			for j, ref := range refs {
				steps[j] = ref.Step(keys[j], costs[j])
			}
			want, idx, denied := tier.At(at(now), steps...) // the references, composed by the runtime's tier logic
			deniedBy, wantRule := "", names[idx]
			if denied {
				deniedBy = names[idx]
			}
			if !exact { // the contract is the envelope of every rule
				if got.Allowed {
					for j := range rules {
						if costs[j] > 0 {
							admitted[j] = append(admitted[j], reference.Admission{Key: keys[j], At: now, Cost: costs[j]})
						}
					}
				}
				continue
			}
			if got.Decision != want || got.DeniedBy.String() != deniedBy || got.Rule.String() != wantRule {
				t.Fatalf("step %d: %+v by %q denied by %q, reference %+v by %q denied by %q", i, got.Decision, got.Rule, got.DeniedBy, want, wantRule, deniedBy)
			}
		}
		allowCap := []bool{ {{- range $t.Rules}}{{.AllowCap}}, {{end -}} }
		for j, r := range rules {
			if allowCap[j] || r == nil {
				continue // keys beyond the cap are admitted untracked, by the rule's choice: no envelope; a window is exact
			}
			if err := reference.CheckEnvelope(r.Limit(), admitted[j]); err != nil {
				t.Fatalf("rule %s: %v", names[j], err)
			}
		}
	})
{{- end}}{{end}}{{end}}{{end}}
}

// TierSlotsMatchReference holds every tier with in-flight rules, decided in
// this process, to the references of its rules: each slot taken in order
// (reference.InFlight), then the rate rules composed by tier.At, all or
// nothing; held sets are released at random steps.
func TierSlotsMatchReference(t *testing.T) {
{{- range $t := .Tiers}}{{if and $t.Slots (not $t.Store)}}{{range $pi, $pc := planList $.Plans}}{{if or $t.Planned (eq $pi 0)}}
	t.Run("{{$t.GoName}}{{if $t.Planned}}{{$pc}}{{end}}", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(5, 6))
		lims := New({{if $.Global}}WithStart(at(t0)){{end}})
		slotRefs := []*reference.InFlight{ {{- range $t.Slots}}reference.NewInFlight(lims.{{.GoName}}.Rule({{if .Planned}}{{$pc}}{{end}}).Limit(), lims.{{.GoName}}.Rule({{if .Planned}}{{$pc}}{{end}}).Hold()), {{end -}} }
		slotNames := []string{ {{- range $t.Slots}}"{{.Name}}", {{end -}} }
		refs := []interface {
			Step(key string, cost int64) tier.Step
		}{
			{{- range $i, $r := $t.Rules}}
			{{- if $r.Window}}
			{{windowRef $r (printf "lims.%s.Rule(%s)" $r.GoName (or (and $r.Planned $pc) ""))}},
			{{- else}}
			reference.NewReference({{params $r}}(lims.{{$r.GoName}}.Rule({{if $r.Planned}}{{$pc}}{{end}}){{if $r.Keyed}}, {{$r.MaxKeys}}, {{atCap $r}}{{end}})),
			{{- end}}
			{{- end}}
		}
		{{- range $i, $r := $t.Rules}}{{if and (not $r.Keyed) (not $r.Window)}}
		refs[{{$i}}].(*reference.Reference).Create("", t0) // the global bucket exists from t0
		{{- end}}{{end}}
		names := []string{ {{- range $t.Rules}}"{{.Name}}", {{end -}} }
		_, _ = refs, names
		{{- range $t.Rules}}{{if not .Window}}
		if !lims.{{.GoName}}.Rule({{if .Planned}}{{$pc}}{{end}}).Exact() {
			t.Fatal("rule {{.Name}} is not exact: this harness holds tiers with in-flight rules of exact rate rules only")
		}
		{{- end}}{{end}}
		type held struct {
			set  atomicslot.Set
			keys []string
			ids  []uint64
		}
		var open []held
		allowed, denied := 0, 0
		now := t0
		for i := range 400 {
			now += rng.Int64N(int64(20 * time.Millisecond))
			if len(open) > 0 && rng.IntN(3) == 0 {
				j := rng.IntN(len(open))
				h := open[j]
				open = append(open[:j], open[j+1:]...)
				h.set.ReleaseAt(at(now))
				for m := range h.ids {
					slotRefs[m].Release(h.keys[m], h.ids[m], now)
				}
				continue
			}
			k := rng.IntN(3)
			_ = k
			set, got := lims.{{$t.GoName}}At({{if $t.Planned}}{{$pc}}, {{end}}{{range $t.Rules}}{{key .}}{{end}}{{range $t.Slots}}{{key .}}{{end}}at(now))
			slotKeys := []string{ {{- range $t.Slots}}{{refKey .}}, {{end -}} }
			var ids []uint64
			var want, most atomicbucket.Decision
			wantRule, deniedBy, mostRule := "", "", ""
			for j, ref := range slotRefs {
				id, d := ref.Acquire(slotKeys[j], now)
				if !d.Allowed {
					for m := range ids {
						slotRefs[m].Release(slotKeys[m], ids[m], now)
					}
					ids, want, wantRule, deniedBy = nil, d, slotNames[j], slotNames[j]
					break
				}
				ids = append(ids, id)
				if j == 0 || d.Remaining < most.Remaining {
					most, mostRule = d, slotNames[j]
				}
			}
			if deniedBy == "" {
				want, wantRule = most, mostRule
				{{- if $t.Rules}}
				keys := []string{ {{- range $t.Rules}}{{refKey .}}, {{end -}} }
				costs := []int64{ {{- range $t.Rules}}{{with index .Plans 0}}{{.Cost}}{{end}}, {{end -}} }
				{{- range $i, $r := $t.Rules}}{{if $r.Planned}}
				costs[{{$i}}] = []int64{ {{- range $r.Plans}}{{.Cost}}, {{end -}} }[{{$pi}}]
				{{- end}}{{end}}
				steps := make([]tier.Step, len(refs))
				for j, ref := range refs {
					steps[j] = ref.Step(keys[j], costs[j])
				}
				d, idx, rateDenied := tier.At(at(now), steps...)
				want, wantRule = d, names[idx]
				if rateDenied {
					deniedBy = names[idx]
					for m := range ids {
						slotRefs[m].Release(slotKeys[m], ids[m], now)
					}
					ids = nil
				}
				{{- end}}
			}
			if got.Decision != want || got.DeniedBy.String() != deniedBy || got.Rule.String() != wantRule {
				t.Fatalf("step %d: %+v by %q denied by %q, reference %+v by %q denied by %q", i, got.Decision, got.Rule, got.DeniedBy, want, wantRule, deniedBy)
			}
			if got.Allowed != (set.Len() == len(slotRefs)) || !got.Allowed && set.Len() != 0 {
				t.Fatalf("step %d: allowed %v with %d of %d slots", i, got.Allowed, set.Len(), len(slotRefs))
			}
			if got.Allowed {
				allowed++
				open = append(open, held{set, slotKeys, ids})
			} else {
				denied++
			}
		}
		if allowed == 0 || denied == 0 {
			t.Fatalf("%d allowed and %d denied: the steps never reached both sides", allowed, denied)
		}
	})
{{- end}}{{end}}{{end}}{{end}}
}
`))
