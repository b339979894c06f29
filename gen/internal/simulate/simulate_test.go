package simulate

import (
	"bytes"
	"encoding/csv"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/gen/internal/numbers"
)

func runSimulate(t *testing.T, args []string, log string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(args, strings.NewReader(log), &stdout, &stderr)
	return stdout.String(), stderr.String(), code
}

// TestSimulateRule replays a log through Login (5 per 10s at each boundary of
// the key's grid, burst 5, new keys start with 3): hand-computed decisions.
// alice's grid: FNV-1a("alice") = 5803779529149266183, which is 9149266183 mod
// 10^10, so her boundaries are at Unix times 9.149266183s + k·10s; at 0.2s the
// next is 8.949266183s away.
func TestSimulateRule(t *testing.T) {
	log := "# time,key,cost\n0,alice\n100000000,alice\n200000000,alice,3\n" +
		`{"time": 300000000, "key": "bob"}` + "\n10000000000,alice,3\n"
	out, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "Login"}, log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `time,key,cost,allowed,remaining,retry_after_ns
0,alice,,true,2,0
100000000,alice,,true,1,0
200000000,alice,3,false,1,8949266183
300000000,bob,,true,2,0
10000000000,alice,3,true,2,0
# summary: rule,key,allowed,denied
# Login,alice,3,1
# Login,bob,1,0
# Login,(all keys),4,1
`
	if out != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
}

// TestSimulateTier replays through the API tier on the free plan: PerUser (10/s,
// burst 50) is the most constraining, and its denial gives back what nothing
// took (it is first). Keys: user|endpoint; times in RFC 3339.
func TestSimulateTier(t *testing.T) {
	var log strings.Builder
	for range 51 {
		log.WriteString(`{"time": "2026-11-21T10:00:00Z", "key": "alice|7"}` + "\n")
	}
	log.WriteString("2026-11-21T10:00:00.1Z,alice|7\n")
	out, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}, log.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	for i, want := range map[int]string{
		0:  "time,PerUser,PerEndpoint,cost,allowed,remaining,retry_after_ns,denied_by",
		1:  "1795255200000000000,alice,7,,true,49,0,",
		50: "1795255200000000000,alice,7,,true,0,0,",
		51: "1795255200000000000,alice,7,,false,0,100000000,PerUser",
		52: "1795255200100000000,alice,7,,true,0,0,",
	} {
		if lines[i] != want {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
	// A key column a keyed rule, whatever the log's form: keys with a | in
	// them replay as they were (joined as alice|7 they would not).
	again, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}, out)
	if code != 0 || again != out {
		t.Errorf("fed back in: exit %d, %s\n%s", code, errOut, again)
	}
	one, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "PerUser", "-plan", "free"}, "0,a|b\n")
	if code != 0 || !strings.Contains(one, "\n0,a|b,,true,") {
		t.Errorf("a key with a | on one rule: exit %d, %s\n%s", code, errOut, one)
	}
	for _, want := range []string{"# PerUser,alice,51,1", "# PerEndpoint,7,51,0", "# Global,,51,0"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

// TestSimulateTierRefunds: four users take PerEndpoint 7's burst of 200 (50
// each, PerUser's burst on the free plan); a fifth user's request passes
// PerUser and is denied by PerEndpoint, so PerUser's take is given back: the
// summary counts it as refunded, not allowed.
func TestSimulateTierRefunds(t *testing.T) {
	var log strings.Builder
	for _, user := range []string{"u0", "u1", "u2", "u3"} {
		for range 50 {
			log.WriteString("0," + user + "|7\n")
		}
	}
	log.WriteString("0,u4|7\n")
	out, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}, log.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "\n0,u4,7,,false,0,60000000,PerEndpoint\n") {
		t.Errorf("u4's request is not denied by PerEndpoint (1000 a minute: one token in 60 ms):\n%s", out)
	}
	for _, want := range []string{
		"# summary: rule,key,allowed,denied,refunded\n",
		"# PerUser,u0,50,0,0\n",
		"# PerUser,u4,0,0,1\n",
		"# PerUser,(all keys),200,0,1\n",
		"# PerEndpoint,7,200,1,0\n",
		"# Global,,200,0,0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out[strings.Index(out, "# summary"):])
		}
	}
}

func TestSimulateRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		log  string
		want string
	}{
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Nope"}, "0,a\n", `no rule or tier named "Nope"; the rules are PerUser, PerEndpoint, Login, DailyExport, Upload, TenantUser, ExportSlots, ReportSlots, ChatTokens, DailyTokens, Global; the tiers are API, Exports, Reports, Chat`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "ExportSlots"}, "0,a\n", `line 1: ExportSlots holds slots for a request's duration: give each request one`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "ExportSlots"}, "time,key,duration\n0,a,soon\n", `line 2: duration "soon": want nanoseconds or a duration`},
		{[]string{"-policy", "../../../policy.yaml"}, "0,a\n", "-rule is required: the rules are PerUser,"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "PerEndpoint"}, "0,99999999999999999999\n", `line 1: rule PerEndpoint: key "99999999999999999999" is not an int64`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "DailyExport"}, "# a comment\n0,-1\n", `line 2: rule DailyExport: key "-1" is not a uint64 (0 to 18446744073709551615)`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "0,a\n1,\"b\n", "simulate: line 2: extraneous or missing \" in quoted-field\n"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}, "time,PerUser,cost\n0,a,1\n", "line 1: the header has no key column for rule PerEndpoint"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "PerUser"}, "0,a\n", "differs by plan: give -plan"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "PerUser", "-plan", "gold"}, "0,a\n", `no plan "gold"`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "PerEndpoint"}, "0,seven\n", `line 1: rule PerEndpoint: key "seven" is not an int64`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "yesterday,a\n", "neither nanoseconds nor RFC 3339"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "0,a,lots\n", `cost "lots" is not a whole number`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "", "no requests"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}, "0,a|b|c|d\n", "4 keys for 2 keyed rules"},
		// An empty key was decided as a client of its own; every door refuses it.
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "0,a\n1,\n", "line 2: rule Login: the key is empty"},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}, "time,PerUser,PerEndpoint\n0,,7\n", "line 2: rule PerUser: the key is empty"},
		// One time form a log: before, a 1 after RFC 3339 times was read as 1970
		// and judged against the bucket's later state (a retry of 3,598 s).
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "2026-11-21T10:00:00Z,a\n1,a\n", `line 2: time "1" is Unix nanoseconds, but line 1's was RFC 3339`},
		{[]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, "time,key\n5,a\n2026-11-21T10:00:00Z,a\n", `line 3: time "2026-11-21T10:00:00Z" is RFC 3339, but line 2's was Unix nanoseconds`},
	} {
		_, errOut, code := runSimulate(t, c.args, c.log)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("simulate %v with %q: exit %d, %q; want an error saying %q", c.args, c.log, code, errOut, c.want)
		}
	}
}

// TestSimulateColumnsAndRoundTrip: a header row gives a tier a key column per
// keyed rule (the rules' key types differ: string and int64); JSON lines may
// name each rule's key; the output, fed back in, gives the same output; and an
// integer key is read in its canonical form (007 is 7, as the generated API's
// int64 would be).
func TestSimulateColumnsAndRoundTrip(t *testing.T) {
	log := "time,PerUser,PerEndpoint,cost\n" +
		"2026-11-21T10:00:00Z,alice,7,\n" +
		"2026-11-21T10:00:00Z,alice,007,49\n" +
		`{"time": "2026-11-21T10:00:00Z", "keys": {"PerUser": "alice", "PerEndpoint": 7}}` + "\n" +
		"2026-11-21T10:00:00.1Z,bob,8,2\n"
	args := []string{"-policy", "../../../policy.yaml", "-rule", "API", "-plan", "free"}
	out, errOut, code := runSimulate(t, args, log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `time,PerUser,PerEndpoint,cost,allowed,remaining,retry_after_ns,denied_by
1795255200000000000,alice,7,,true,49,0,
1795255200000000000,alice,7,49,true,0,0,
1795255200000000000,alice,7,,false,0,100000000,PerUser
1795255200100000000,bob,8,2,true,48,0,
`
	if got, _, _ := strings.Cut(out, "# summary"); got != want {
		t.Fatalf("got:\n%s\nwant:\n%s", got, want)
	}
	again, errOut, code := runSimulate(t, args, out)
	if code != 0 || again != out {
		t.Fatalf("fed back in: exit %d, %s\n%s\nwant the same output:\n%s", code, errOut, again, out)
	}
}

// TestSimulateNumbers: an overlay file in force from the start, and events
// in the log — a key's own numbers, a reset, a clear, an event for another
// plan — applied at their time, with the conversions a service's would make.
// PerUser on the free plan, from the overlay: 1/s, burst 2; acme 1/s, burst 5.
func TestSimulateNumbers(t *testing.T) {
	dir := t.TempDir()
	numbers := dir + "/numbers.yaml"
	if err := os.WriteFile(numbers, []byte("rules:\n  PerUser:\n    plans: {free: {rate: 1/s, burst: 2}}\n    keys: {acme: {rate: 1/s, burst: 5}}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := "0,alice\n0,alice\n0,alice\n0,acme\n" +
		`{"time": 0, "set": {"rule": "PerUser", "key": "alice", "rate": "1/s", "burst": 3}}` + "\n" +
		"0,alice\n" + // holds 0 of 3: denied
		`{"time": 0, "reset": {"key": "alice"}}` + "\n" +
		"0,alice\n" + // a new bucket: 3
		`{"time": 0, "clear": {"key": "alice"}}` + "\n" +
		"0,alice\n" + // 2 held, carried into a burst of 2: full stays full
		`{"time": 0, "set": {"plan": "pro", "rate": "1/s", "burst": 1}}` + "\n" + // another plan: skipped
		`{"time": 500000000, "set": {"rate": "10/s", "burst": 10}}` + "\n" +
		"500000000,alice\n" // 1 held at 0, + 0.5 s at 1/s = 1.5, into 10/s burst 10: 1.5 − 1
	out, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "PerUser", "-plan", "free", "-numbers", numbers}, log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `time,key,cost,allowed,remaining,retry_after_ns
0,alice,,true,1,0
0,alice,,true,0,0
0,alice,,false,0,1000000000
0,acme,,true,4,0
# 0: set PerUser key "alice": 1 per 1s, burst 3
{"set":{"burst":3,"key":"alice","rate":"1/s","rule":"PerUser"},"time":0}
0,alice,,false,0,1000000000
# 0: reset PerUser key "alice"
{"reset":{"key":"alice"},"time":0}
0,alice,,true,2,0
# 0: clear PerUser key "alice"
{"clear":{"key":"alice"},"time":0}
0,alice,,true,1,0
{"set":{"burst":1,"plan":"pro","rate":"1/s"},"time":0}
# 500000000: set PerUser: 10 per 1s, burst 10
{"set":{"burst":10,"rate":"10/s"},"time":500000000}
500000000,alice,,true,0,0
# summary: rule,key,allowed,denied
# PerUser,acme,1,0
# PerUser,alice,5,2
# PerUser,(all keys),6,2
# events for rules or plans outside the simulation, skipped: 1
`
	if out != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
	// The output replays to the same decisions: the events are in it.
	args := []string{"-policy", "../../../policy.yaml", "-rule", "PerUser", "-plan", "free", "-numbers", numbers}
	if again, errOut, code := runSimulate(t, args, out); code != 0 || again != out {
		t.Errorf("fed back in: exit %d, %s\n%s", code, errOut, again)
	}
}

// TestSimulateAdaptive: health rows drive a controller over Login (5 per 10s
// at each boundary of the key's grid, burst 5, new keys start with 3); the
// factor scales its tokens per period and its burst. alice's boundaries are
// at 9.149266183s + k·10s (TestSimulateRule).
func TestSimulateAdaptive(t *testing.T) {
	log := `{"time": 0, "health": {"samples": 10, "latency": "300ms"}}` + "\n" + // unhealthy: 0.5, 3 per 10s, burst 3
		"0,alice\n0,alice\n0,alice\n0,alice\n" +
		`{"time": 1000000000, "health": {"samples": 0}}` + "\n" + // too few: holds
		`{"time": 2000000000, "health": {"samples": 10, "latency": "20ms"}}` + "\n" + // healthy: 1, the policy's
		"9200000000,alice\n"
	args := []string{"-policy", "../../../policy.yaml", "-rule", "Login", "-adapt", "Login", "-latency", "100ms", "-min-samples", "1", "-increase", "0.5", "-scale-burst"}
	out, errOut, code := runSimulate(t, args, log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	want := `# 0: health: 10 samples, latency 300ms, errors 0.0000: unhealthy, factor 0.500
{"health":{"latency":"300ms","samples":10},"time":0}
time,key,cost,allowed,remaining,retry_after_ns,factor
0,alice,,true,2,0,0.500
0,alice,,true,1,0,0.500
0,alice,,true,0,0,0.500
0,alice,,false,0,9149266183,0.500
# 1000000000: health: 0 samples, latency 0s, errors 0.0000: too few samples, factor 0.500
{"health":{"samples":0},"time":1000000000}
# 2000000000: health: 10 samples, latency 20ms, errors 0.0000: healthy, factor 1.000
{"health":{"latency":"20ms","samples":10},"time":2000000000}
9200000000,alice,,true,4,0,1.000
# summary: rule,key,allowed,denied
# Login,alice,4,1
# Login,(all keys),4,1
`
	if out != want {
		t.Fatalf("got:\n%s\nwant:\n%s", out, want)
	}
	if again, errOut, code := runSimulate(t, args, out); code != 0 || again != out {
		t.Errorf("fed back in: exit %d, %s\n%s", code, errOut, again)
	}
}

// TestSimulateBadEvents: each bad event is refused with its line.
func TestSimulateBadEvents(t *testing.T) {
	for _, c := range []struct {
		args []string
		log  string
		msg  string
	}{
		{nil, `{"time": 0, "health": {"samples": 3}}`, "line 1: a health row needs -adapt RULE"},
		{nil, `{"time": 0, "set": {"rule": "Nope", "rate": "1/s", "burst": 1}}`, `line 1: set: no rule "Nope" in the policy`},
		{nil, `{"time": 0, "set": {"rate": "fast", "burst": 1}}`, "line 1: set: "},
		{nil, `{"time": 0, "set": {"rate": "1/s"}}`, "line 1: set needs a rate and a burst"},
		{nil, `{"time": 0, "set": {"rate": "1 per 10s", "burst": 0}}`, "line 1: set: rule Login: atomicbucket: invalid limit: burst 0 admits nothing"},
		{nil, `{"time": 0, "set": {"rate": "1/min", "burst": 5}}`, "interval rule's period 10s cannot change to 1m0s"},
		{nil, `{"time": 0, "set": {"rule": "Global", "key": "k", "rate": "1/s", "burst": 1}}`, "line 1: set: rule Global has no keys"},
		{nil, `{"time": 0, "set": {"plan": "gold", "rate": "1/s", "burst": 1}}`, `line 1: set: no plan "gold"`},
		{nil, `{"time": 0, "reset": {}}`, "line 1: reset: rule Login is keyed: give the key"},
		{nil, `{"time": 0, "set": {"rate": "1/s", "burst": 1}, "reset": {"key": "a"}}`, "line 1: one event a line"},
		{nil, `{"time": 0, "health": {"samples": 3, "errors": 2}}`, "line 1: health errors 2 is not a ratio"},
		{nil, "0,alice\n" + `{"time": "2026-11-21T10:00:00Z", "reset": {"key": "a"}}`, "line 2: time \"2026-11-21T10:00:00Z\" is RFC 3339, but line 1's was Unix nanoseconds"},
		{[]string{"-adapt", "Global", "-latency", "1s"}, "0,alice\n", "-adapt Global: not a rule of the simulation (Login)"},
		{[]string{"-adapt", "Login"}, "0,alice\n", "-adapt: adaptive: invalid config: no target"},
		{[]string{"-adapt", "Login", "-latency", "1s", "-decrease", "1.5"}, "0,alice\n", "Decrease 1.5 is not in (0, 1)"},
	} {
		args := append([]string{"-policy", "../../../policy.yaml", "-rule", "Login"}, c.args...)
		_, errOut, code := runSimulate(t, args, c.log+"\n")
		if code == 0 || !strings.Contains(errOut, c.msg) {
			t.Errorf("%v %q: exit %d, %q; want %q", c.args, c.log, code, errOut, c.msg)
		}
	}
}

// A composite key's text form, as simulate and the numbers checks read it:
// canonical (integers without leading zeros, escapes in upper case), and
// refused when it has not every field, or a field the rule's key cannot be.
func TestCanonicalCompositeKey(t *testing.T) {
	r := model.Rule{Name: "TenantUser", KeyType: "TenantUserKey", Fields: []model.KeyField{{Name: "tenant", GoName: "Tenant", Type: "string"}, {Name: "user", GoName: "User", Type: "uint16"}}}
	for in, want := range map[string]string{"acme,7": "acme,7", "acme,007": "acme,7", "a%2cb,7": "a%2Cb,7", "a%25,65535": "a%25,65535"} {
		if got, err := numbers.CanonicalKey(r, in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{"acme", "acme,7,8", ",7", "acme,-1", "acme,65536", "acme,x", "a#b,7", "a%zz,7"} {
		if got, err := numbers.CanonicalKey(r, in); err == nil {
			t.Errorf("%q: %q, want it refused", in, got)
		}
	}
}

// A composite key in a log: its text form, quoted as CSV quotes a comma;
// "acme,007" is acme's user 7 (one key, canonical in the output), a key's
// own numbers apply to it alone, and the summary quotes the key.
func TestSimulateCompositeKey(t *testing.T) {
	numbers := t.TempDir() + "/numbers.yaml"
	if err := os.WriteFile(numbers, []byte("rules:\n  TenantUser:\n    rate: 30/min\n    burst: 5\n    keys:\n      \"acme,8\": {rate: 1/min, burst: 1}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "TenantUser", "-numbers", numbers},
		"0,\"acme,7\"\n0,\"acme,007\"\n0,\"acme,8\"\n0,\"acme,8\"\n0,\"a%2Cb,7\"\n")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"0,\"acme,7\",,true,3,0\n", // the second request of acme's user 7
		"0,\"acme,8\",,false,0,",   // its own burst of 1
		"# TenantUser,\"acme,7\",2,0\n",
		"# TenantUser,\"acme,8\",1,1\n",
		"# TenantUser,\"a%2Cb,7\",1,0\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestSimulateHTML replays a long log (ten hours, so that the picture's
// series coarsen many times, with bursts that hit the limits and number
// changes in the middle) through a rule and through a tier with -html, and
// reads the page back as XML: every rule's bins must hold the cost the text
// report admitted and denied in them, every change of numbers the report
// echoes must be marked, and each rule's table of keys must be the summary's
// keys with denials. The page must need nothing outside itself.
func TestSimulateHTML(t *testing.T) {
	// The log: the keys a user and, for the tier, an endpoint (user|endpoint).
	makeLog := func(tier bool) string {
		rng := rand.New(rand.NewPCG(7, 30))
		var log strings.Builder
		key := func(user, endpoint int) string {
			if tier {
				return fmt.Sprintf("u%d|%d", user, endpoint)
			}
			return fmt.Sprintf("u%d", user)
		}
		at := int64(1795255200000000000)
		for i := range 3000 {
			switch {
			case i%500 == 499: // a burst: one user, one endpoint, many at once
				for range 80 {
					fmt.Fprintf(&log, "%d,%s,%d\n", at, key(i%3, i%2), 1+rng.IntN(3))
				}
			case i%1000 == 250: // many users on one endpoint: the tier's PerEndpoint denies
				for u := range 300 {
					fmt.Fprintf(&log, "%d,%s,1\n", at, key(10+u, 7))
				}
			case i == 1500:
				fmt.Fprintf(&log, `{"time": %d, "set": {"rule": "PerUser", "plan": "free", "rate": "1/s", "burst": 2}}`+"\n", at)
			case i == 2200:
				fmt.Fprintf(&log, `{"time": %d, "clear": {"rule": "PerUser", "plan": "free"}}`+"\n", at)
			}
			fmt.Fprintf(&log, "%d,%s,%d\n", at, key(rng.IntN(9), rng.IntN(4)), 1+rng.IntN(3))
			at += rng.Int64N(int64(24 * time.Second))
		}
		return log.String()
	}
	for _, c := range []struct{ rule, plan string }{{"PerUser", "free"}, {"API", "free"}} {
		t.Run(c.rule, func(t *testing.T) {
			page := filepath.Join(t.TempDir(), "report.html")
			args := []string{"-policy", "../../../policy.yaml", "-rule", c.rule, "-plan", c.plan, "-html", page}
			out, errOut, code := runSimulate(t, args, makeLog(c.rule == "API"))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errOut)
			}
			raw, err := os.ReadFile(page)
			if err != nil {
				t.Fatal(err)
			}
			for _, outside := range []string{"<script", "src=", "href=", "url(", "@import"} {
				if strings.Contains(string(raw), outside) {
					t.Errorf("the page holds %q: it must need nothing outside itself", outside)
				}
			}
			got := readPicture(t, raw)
			renderInBrowser(t, page, got, c.rule)
			want := reportSeries(t, out, got)
			if len(got.rules) != len(want.rules) || len(got.rules) == 0 {
				t.Fatalf("the page draws rules %v, the report has %v", got.order, want.order)
			}
			for name, g := range got.rules {
				w, ok := want.rules[name]
				if !ok {
					t.Fatalf("the page draws rule %s, which the report does not have", name)
				}
				if !slices.Equal(g.admitted, w.admitted) || !slices.Equal(g.denied, w.denied) {
					t.Errorf("%s: the page's bins\nadmitted %v\ndenied   %v\nthe report's\nadmitted %v\ndenied   %v", name, g.admitted, g.denied, w.admitted, w.denied)
				}
				if !maps.Equal(g.keys, w.keys) {
					t.Errorf("%s: the page's keys that hit the limit %v, the report's %v", name, g.keys, w.keys)
				}
				if !slices.Equal(g.changes, want.changes) {
					t.Errorf("%s: the page marks changes at %v, the report echoes %v", name, g.changes, want.changes)
				}
			}
			if len(want.changes) != 2 || len(got.table) != 2 {
				t.Errorf("changes: the report echoes %v, the page's table lists %v; want the set and the clear", want.changes, got.table)
			}
			denying := 0 // the rules that denied something
			for _, w := range want.rules {
				if slices.ContainsFunc(w.denied, func(d int64) bool { return d > 0 }) {
					denying++
				}
			}
			if denying == 0 || c.rule == "API" && denying < 2 {
				t.Errorf("%d rules denied requests: the log tests too little of the denials' series", denying)
			}
		})
	}
}

type pictureSeries struct {
	admitted, denied []int64
	keys             map[string]string // key → "allowed,denied"
	changes          []int64           // the marked lines' times
}

type readSeries struct {
	start, width int64
	bins         int
	order        []string
	rules        map[string]*pictureSeries
	changes      []int64
	table        []int64 // the changes table's times
}

// readPicture reads the series of a page simulate -html wrote, as XML.
func readPicture(t *testing.T, raw []byte) *readSeries {
	t.Helper()
	dec := xml.NewDecoder(bytes.NewReader(raw))
	attr := func(e xml.StartElement, name string) string {
		for _, a := range e.Attr {
			if a.Name.Local == name {
				return a.Value
			}
		}
		return ""
	}
	num := func(s string) int64 {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("the page holds %q where a number belongs", s)
		}
		return n
	}
	r := &readSeries{rules: map[string]*pictureSeries{}}
	var cur *pictureSeries
	var inKeys bool
	var row []string
	var text strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the page is not well-formed: %v", err)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			switch {
			case e.Name.Local == "section":
				cur = &pictureSeries{keys: map[string]string{}}
				name := attr(e, "data-rule")
				r.rules[name] = cur
				r.order = append(r.order, name)
			case e.Name.Local == "svg":
				r.start, r.width, r.bins = num(attr(e, "data-start")), num(attr(e, "data-width")), int(num(attr(e, "data-bins")))
			case e.Name.Local == "g" && attr(e, "class") == "bin":
				cur.admitted = append(cur.admitted, num(attr(e, "data-admitted")))
				cur.denied = append(cur.denied, num(attr(e, "data-denied")))
			case e.Name.Local == "line" && attr(e, "class") == "chg":
				cur.changes = append(cur.changes, num(attr(e, "data-time")))
			case e.Name.Local == "table":
				inKeys = attr(e, "class") == "keys"
			case e.Name.Local == "tr":
				row = row[:0]
				if d := attr(e, "data-time"); d != "" {
					r.table = append(r.table, num(d))
				}
			case e.Name.Local == "td":
				text.Reset()
			}
		case xml.CharData:
			text.Write(e)
		case xml.EndElement:
			switch e.Name.Local {
			case "td":
				row = append(row, text.String())
			case "tr":
				if inKeys && len(row) == 3 {
					key := row[0]
					if key == "(global)" {
						key = ""
					}
					cur.keys[key] = row[1] + "," + row[2]
				}
			case "table":
				inKeys = false
			}
		}
	}
	return r
}

// reportSeries bins the text report's decisions as the page says it binned
// them (its start and width), and reads its summary's keys with denials and
// its echoed changes.
func reportSeries(t *testing.T, out string, pic *readSeries) *readSeries {
	t.Helper()
	r := &readSeries{rules: map[string]*pictureSeries{}}
	if pic.width <= 0 || pic.bins <= 0 {
		t.Fatalf("the page's bins: width %d, %d of them", pic.width, pic.bins)
	}
	var head []string
	var names []string // the rules, from the summary
	type line struct {
		time, cost int64
		allowed    bool
		deniedBy   string
	}
	var lines []line
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "{") { // an event, echoed for replay; its # line marks it
			continue
		}
		if rest, ok := strings.CutPrefix(l, "# "); ok {
			if ts, _, ok := strings.Cut(rest, ": "); ok {
				if n, err := strconv.ParseInt(ts, 10, 64); err == nil {
					r.changes = append(r.changes, n)
				}
				continue
			}
			f := strings.Split(rest, ",")
			if len(f) < 4 || strings.HasPrefix(rest, "summary:") {
				continue
			}
			if !slices.Contains(names, f[0]) {
				names = append(names, f[0])
				r.rules[f[0]] = &pictureSeries{keys: map[string]string{}, admitted: make([]int64, pic.bins), denied: make([]int64, pic.bins)}
			}
			if f[1] != "(all keys)" && f[3] != "0" {
				r.rules[f[0]].keys[f[1]] = f[2] + "," + f[3]
			}
			continue
		}
		f := strings.Split(l, ",")
		if head == nil {
			head = f
			continue
		}
		col := func(name string) string { return f[slices.Index(head, name)] }
		tm, _ := strconv.ParseInt(col("time"), 10, 64)
		cost, err := strconv.ParseInt(col("cost"), 10, 64)
		if err != nil {
			t.Fatalf("report line %q: every line of the log has its cost", l)
		}
		ln := line{time: tm, cost: cost, allowed: col("allowed") == "true"}
		if slices.Contains(head, "denied_by") {
			ln.deniedBy = col("denied_by")
		}
		lines = append(lines, ln)
	}
	r.order = names
	if pic.start != lines[0].time {
		t.Errorf("the page starts at %d, the report's first request at %d", pic.start, lines[0].time)
	}
	for _, ln := range lines {
		b := (ln.time - pic.start) / pic.width
		if b < 0 || b >= int64(pic.bins) {
			t.Fatalf("the request at %d falls outside the page's %d bins of %d ns from %d", ln.time, pic.bins, pic.width, pic.start)
		}
		switch {
		case ln.allowed:
			for _, n := range names {
				r.rules[n].admitted[b] += ln.cost
			}
		case ln.deniedBy != "":
			r.rules[ln.deniedBy].denied[b] += ln.cost
		default:
			r.rules[names[0]].denied[b] += ln.cost
		}
	}
	for _, s := range r.rules {
		for _, c := range r.changes {
			if c >= pic.start && c <= pic.start+pic.width*int64(pic.bins) {
				s.changes = append(s.changes, c)
			}
		}
	}
	return r
}

// TestSimulateHTMLHostileKeys: keys a log may hold that would break the
// page (control characters XML forbids even escaped, invalid UTF-8, markup,
// a backslash) hit the limit, and the page stays well-formed and names each
// key unambiguously.
func TestSimulateHTMLHostileKeys(t *testing.T) {
	keys := map[string]string{ // as the log holds it → as the page shows it
		"a\x01b":       `a\x01b`,
		`a\x01b`:       `a\\x01b`,
		"<x&y>":        "<x&y>",
		"bad\xffutf8":  `bad\xffutf8`,
		"tab\there":    "tab\there",
		"\"quoted\"":   `"quoted"`,
		"nul\x00byte":  `nul\x00byte`,
		"end\uffffend": `end\uffffend`,
	}
	var log strings.Builder
	for key := range keys {
		for range 5 { // Login: a new key starts with 3; the 4th and 5th are denied
			w := csv.NewWriter(&log)
			w.Write([]string{"0", key})
			w.Flush()
		}
	}
	page := filepath.Join(t.TempDir(), "report.html")
	_, errOut, code := runSimulate(t, []string{"-policy", "../../../policy.yaml", "-rule", "Login", "-html", page}, log.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	raw, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	got := readPicture(t, raw).rules["Login"]
	if got == nil {
		t.Fatal("no Login section")
	}
	for key, shown := range keys {
		if got.keys[shown] != "3,2" {
			t.Errorf("key %q: the page's row for %q is %q, want 3 allowed, 2 denied (rows: %q)", key, shown, got.keys[shown], got.keys)
		}
	}
	if len(got.keys) != len(keys) {
		t.Errorf("%d key rows, want %d: %q", len(got.keys), len(keys), got.keys)
	}
}

// TestSimulateWindow replays a log through window rules of
// testdata/valid/25_windows.yaml: Burst (at most 5 in any 10 s per key,
// exact) alone, and the API tier, whose Site window (3 in any 500 ms,
// global) is looked at first: a request it denies takes nothing from
// PerUser or Daily. Hand-computed (times in whole milliseconds, where the
// microsecond grain does not show); a number change naming a window is
// refused.
func TestSimulateWindow(t *testing.T) {
	log := "time,key,cost\n" +
		"0,a,2\n1000000000,a,3\n2000000000,a,1\n3000000000,b,5\n" +
		"10000000000,a,1\n" + // 999 ns before the 2 at 0 leave
		"10001000000,a,2\n11001000000,a,3\n11002000000,a,1\n"
	out, errOut, code := runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "Burst"}, log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	// An admission counts as made at the last ns of its microsecond (the
	// replay's times fall on microseconds): the 2 at 0 leave at 10 s + 999 ns.
	want := `time,key,cost,allowed,remaining,retry_after_ns
0,a,2,true,3,0
1000000000,a,3,true,0,0
2000000000,a,1,false,0,8000000999
3000000000,b,5,true,0,0
10000000000,a,1,false,0,999
10001000000,a,2,true,0,0
11001000000,a,3,true,0,0
11002000000,a,1,false,0,8999000999
# summary: rule,key,allowed,denied
# Burst,a,4,3
# Burst,b,1,0
# Burst,(all keys),5,3
`
	if out != want {
		t.Fatalf("Burst: got:\n%s\nwant:\n%s", out, want)
	}
	// The tier: Daily (40 a day, cost 2), PerUser (10/s, burst 20), Site (3
	// in any 500 ms). Four requests in 30 ms: the fourth is denied by Site
	// (its first unit, held at 999 ns, leaves at 500 ms + 999 ns), which the
	// summary counts as passed by Daily and PerUser and then denied
	// (refunded: they took nothing).
	log = "time,key\n0,u\n10000000,u\n20000000,u\n30000000,u\n600000000,u\n"
	out, errOut, code = runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "API"}, log)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, line := range []string{
		"30000000,u,,false,0,470000999,Site",
		"600000000,u,,true,2,0,",
		"# Daily,u,4,0,1",
		"# PerUser,u,4,0,1",
		"# Site,,4,1,0",
	} {
		if !strings.Contains(out, line+"\n") {
			t.Errorf("tier: no line %q in:\n%s", line, out)
		}
	}
	// Numbers change: Burst becomes 2 in any 10 s at 0; the third request
	// in the window is denied until the first leaves (10 s + 999 ns).
	out, errOut, code = runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "Burst"},
		`{"time": 0, "set": {"rule": "Burst", "rate": "2/10s", "burst": 2}}`+"\n0,a\n1000000000,a\n2000000000,a\n")
	if code != 0 {
		t.Fatalf("a number change of a window: exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "# 0: set Burst: 2 per 10s, burst 2\n") || !strings.Contains(out, "2000000000,a,,false,0,8000000999\n") {
		t.Errorf("a number change of a window:\n%s", out)
	}
	// A -numbers file with an entry for a window rule (it panicked): the
	// rule's numbers from the start, 2 in any 10 s.
	numbers := t.TempDir() + "/numbers.yaml"
	if err := os.WriteFile(numbers, []byte("rules:\n  Burst:\n    rate: 2/10s\n    burst: 2\n  Site:\n    rate: 1/500ms\n    burst: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "Burst", "-numbers", numbers}, "0,a\n1000000000,a\n2000000000,a\n")
	if code != 0 || !strings.Contains(out, "1000000000,a,,true,0,0\n") || !strings.Contains(out, "2000000000,a,,false,0,8000000999\n") {
		t.Errorf("-numbers for a keyed window: exit %d, %s\n%s", code, errOut, out)
	}
	out, errOut, code = runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "Site", "-numbers", numbers}, "0,\n1000,\n")
	if code != 0 || !strings.Contains(out, "0,,,true,0,0\n") || !strings.Contains(out, "1000,,,false,") {
		t.Errorf("-numbers for a global window: exit %d, %s\n%s", code, errOut, out)
	}
	// A reset empties a key's window, as Reset does: 5 of 5, a reset, 5 more.
	out, errOut, code = runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "Burst"},
		"0,a,5\n1000,a,1\n"+`{"time": 2000, "reset": {"rule": "Burst", "key": "a"}}`+"\n3000,a,5\n4000,a,1\n")
	if code != 0 || !strings.Contains(out, "1000,a,1,false,") || !strings.Contains(out, "3000,a,5,true,0,0\n") || !strings.Contains(out, "4000,a,1,false,") {
		t.Errorf("a reset of a window: exit %d, %s\n%s", code, errOut, out)
	}
	for _, c := range []struct{ event, want string }{
		{`{"time": 0, "set": {"rule": "Burst", "key": "a", "rate": "2/10s", "burst": 2}}`, "for every key"},
		{`{"time": 0, "set": {"rule": "Burst", "rate": "2/10s", "burst": 3}}`, "limit as burst"},
	} {
		_, errOut, code = runSimulate(t, []string{"-policy", "../../testdata/valid/25_windows.yaml", "-rule", "Burst"}, c.event+"\n0,a\n")
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: exit %d, %q; want a refusal saying %q", c.event, code, errOut, c.want)
		}
	}
}

// TestSimulateInFlight replays requests with durations through an in-flight
// rule (2 slots per key, max_hold 10s) alone and in a tier after a rate rule
// (1/h, burst 3), hand-computed: a request's slot is held from its time to
// its time plus its duration (released then, in order, before the next
// request's decision); the third at 2s finds both slots held until 5s and 6s
// (Retry-After: the first expiry, at 10s); in the tier, a full set of slots
// charges Rate nothing, and Rate's denials give the slot back (refunded). A
// request running 15s outlives max_hold: its slot came back by expiry,
// counted. The output replays to itself.
func TestSimulateInFlight(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("package: p\nrules:\n  - {name: Slots, key: string, in_flight: 2, max_hold: 10s}\n"+
		"  - {name: Rate, key: string, rate: 1/h, burst: 3}\ntiers:\n  - {name: Both, rules: [Rate, Slots]}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	log := "time,key,duration\n0,a,5s\n1000000000,a,5s\n2000000000,a,5s\n6000000000,a,1s\n" +
		`{"time": 8000000000, "key": "a", "duration": "1s"}` + "\n9000000000,a,15000000000\n"
	for _, c := range []struct{ rule, want string }{
		{"Slots", `time,key,cost,duration,allowed,remaining,retry_after_ns
0,a,,5000000000,true,1,0
1000000000,a,,5000000000,true,0,0
2000000000,a,,5000000000,false,0,8000000000
6000000000,a,,1000000000,true,1,0
8000000000,a,,1000000000,true,1,0
9000000000,a,,15000000000,true,1,0
# summary: rule,key,allowed,denied
# Slots,a,5,1
# Slots,(all keys),5,1
# Slots: slots held past max_hold (10s), back by expiry: 1
`},
		{"Both", `time,key,cost,duration,allowed,remaining,retry_after_ns,denied_by
0,a,,5000000000,true,2,0,
1000000000,a,,5000000000,true,1,0,
2000000000,a,,5000000000,false,0,8000000000,Slots
6000000000,a,,1000000000,true,0,0,
8000000000,a,,1000000000,false,0,3592000000000,Rate
9000000000,a,,15000000000,false,0,3591000000000,Rate
# summary: rule,key,allowed,denied,refunded
# Slots,a,3,1,2
# Slots,(all keys),3,1,2
# Slots: slots held past max_hold (10s), back by expiry: 0
# Rate,a,3,2,0
# Rate,(all keys),3,2,0
`},
	} {
		out, errOut, code := runSimulate(t, []string{"-policy", pol, "-rule", c.rule}, log)
		if code != 0 || out != c.want {
			t.Fatalf("%s: exit %d %s\ngot:\n%s\nwant:\n%s", c.rule, code, errOut, out, c.want)
		}
		again, _, _ := runSimulate(t, []string{"-policy", pol, "-rule", c.rule}, out)
		if again != out {
			t.Fatalf("%s: the output did not replay to itself:\n%s", c.rule, again)
		}
	}
}

// TestSimulateInFlightPlans: a rule with slots per plan replays on the plan
// given (Jobs: 1 at once on free, 4 on pro), and asks for one.
func TestSimulateInFlightPlans(t *testing.T) {
	log := "time,key,duration\n0,u,10s\n1,u,10s\n2,u,10s\n3,u,10s\n4,u,10s\n"
	for plan, want := range map[string]string{"free": "true,false,false,false,false", "pro": "true,true,true,true,false"} {
		out, errOut, code := runSimulate(t, []string{"-policy", "../../../gen/testdata/valid/32_in_flight_plans.yaml", "-rule", "Jobs", "-plan", plan}, log)
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", plan, code, errOut)
		}
		var got []string
		for _, line := range strings.Split(out, "\n")[1:6] {
			got = append(got, strings.Split(line, ",")[4])
		}
		if strings.Join(got, ",") != want {
			t.Errorf("plan %s: allowed %v, want %s\n%s", plan, got, want, out)
		}
	}
	if _, errOut, code := runSimulate(t, []string{"-policy", "../../../gen/testdata/valid/32_in_flight_plans.yaml", "-rule", "Jobs"}, log); code == 0 || !strings.Contains(errOut, "differs by plan: give -plan") {
		t.Errorf("without -plan: exit %d, %s", code, errOut)
	}
}

// TestSimulateSettled replays settled costs: a request's actual cost (an
// actual column or JSON field) is settled when it ends (its time plus its
// duration, or at once), against the cost it was admitted at: given back,
// or owed as debt the next requests wait for. A rule of 10 tokens a second,
// burst 10, and a window of 10 in any second, which counts an excess when
// the request ends, and gives back from what it counted at its admission.
func TestSimulateSettled(t *testing.T) {
	dir := t.TempDir()
	pol := filepath.Join(dir, "p.yaml")
	if err := os.WriteFile(pol, []byte("package: p\nrules:\n  - {name: T, key: string, rate: 10/s, burst: 10}\n"+
		"  - {name: W, key: string, limit: 10, window: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// a: 8 declared and 2 used gives 6 back at once (8 held); 8 declared
	// and 15 used owes 7 (−7 held), so a token waits 0.8s; at 1.3s, 6 are
	// back. b: 10 declared for 600ms and 0 used gives nothing back until
	// the request ends: at 550ms a request of 10 is refused, at 600ms
	// (after the 10 came back) admitted. c owes past the debt bound (10
	// below empty): 4 forgiven.
	log := "time,key,cost,duration,actual\n" +
		"0,a,8,,2\n" +
		"1,a,8,,15\n" +
		"2,a,1,,\n" +
		"1300000001,a,1,,\n" +
		"0,b,10,600ms,0\n" +
		`{"time": 500000000, "key": "b", "cost": 5}` + "\n" +
		"550000000,b,10,,\n" +
		"600000000,b,10,,\n" +
		"0,c,10,,24\n"
	want := `time,key,cost,duration,actual,allowed,remaining,retry_after_ns
0,a,8,0,2,true,2,0
1,a,8,0,15,true,0,0
2,a,1,0,,false,0,799999998
1300000001,a,1,0,,true,5,0
0,b,10,600000000,0,true,0,0
500000000,b,5,0,,true,0,0
550000000,b,10,0,,false,0,950000000
600000000,b,10,0,,true,0,0
0,c,10,0,24,true,0,0
# summary: rule,key,allowed,denied
# T,a,3,1
# T,b,3,1
# T,c,1,0
# T,(all keys),7,2
# T: settled at their actual cost: 4, tokens forgiven beyond the debt bound: 4
`
	out, errOut, code := runSimulate(t, []string{"-policy", pol, "-rule", "T"}, log)
	if code != 0 || out != want {
		t.Fatalf("exit %d %s\ngot:\n%s\nwant:\n%s", code, errOut, out, want)
	}
	// A window (10 in any second) counts the excess when the request ends:
	// 1 declared and 3 used leave 3 in the window, so 8 more are refused and
	// 7 admitted (times at the window's grain, the last ns of their µs).
	// Two seconds on, 5 declared for 300ms and 1 used give 4 back when the
	// request ends: 9 more are refused at 250ms, admitted at 300ms.
	out, errOut, code = runSimulate(t, []string{"-policy", pol, "-rule", "W"}, "time,key,cost,duration,actual\n0,a,1,,3\n1,a,8,,\n2,a,7,,\n3,a,1,,0\n"+
		"2000000000,a,5,300ms,1\n2250000000,a,9,,\n2300000000,a,9,,\n")
	wantW := `time,key,cost,duration,actual,allowed,remaining,retry_after_ns
0,a,1,0,3,true,9,0
1,a,8,0,,false,7,1000000998
2,a,7,0,,true,0,0
3,a,1,0,0,false,0,1000000996
2000000000,a,5,300000000,1,true,5,0
2250000000,a,9,0,,false,5,750000999
2300000000,a,9,0,,true,0,0
# summary: rule,key,allowed,denied
# W,a,4,3
# W,(all keys),4,3
# W: settled at their actual cost: 2, tokens forgiven beyond the debt bound: 0
`
	if code != 0 || out != wantW {
		t.Fatalf("a window: exit %d %s\ngot:\n%s\nwant:\n%s", code, errOut, out, wantW)
	}
	_, errOut, code = runSimulate(t, []string{"-policy", pol, "-rule", "T"}, "time,key,cost,actual\n0,a,1,-3\n")
	if code == 0 || !strings.Contains(errOut, `actual "-3"`) {
		t.Fatalf("a negative actual: exit %d, %s", code, errOut)
	}
}
