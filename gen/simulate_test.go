package main

import (
	"bytes"
	"strings"
	"testing"
)

func runSimulate(t *testing.T, args []string, log string) (string, string, int) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := simulate(args, strings.NewReader(log), &stdout, &stderr)
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
	out, errOut, code := runSimulate(t, []string{"-policy", "../policy.yaml", "-rule", "Login"}, log)
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
	out, errOut, code := runSimulate(t, []string{"-policy", "../policy.yaml", "-rule", "API", "-plan", "free"}, log.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	lines := strings.Split(out, "\n")
	for i, want := range map[int]string{
		1:  "1795255200000000000,alice|7,,true,49,0,",
		50: "1795255200000000000,alice|7,,true,0,0,",
		51: "1795255200000000000,alice|7,,false,0,100000000,PerUser",
		52: "1795255200100000000,alice|7,,true,0,0,",
	} {
		if lines[i] != want {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
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
	out, errOut, code := runSimulate(t, []string{"-policy", "../policy.yaml", "-rule", "API", "-plan", "free"}, log.String())
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, "\n0,u4|7,,false,0,60000000,PerEndpoint\n") {
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
		{[]string{"-policy", "../policy.yaml", "-rule", "Nope"}, "0,a\n", `no rule or tier named "Nope"; the rules are PerUser, PerEndpoint, Login, DailyExport, Upload, Global; the tiers are API`},
		{[]string{"-policy", "../policy.yaml"}, "0,a\n", "-rule is required: the rules are PerUser,"},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerEndpoint"}, "0,99999999999999999999\n", `line 1: rule PerEndpoint: key "99999999999999999999" is not an int64`},
		{[]string{"-policy", "../policy.yaml", "-rule", "DailyExport"}, "# a comment\n0,-1\n", `line 2: rule DailyExport: key "-1" is not a uint64 (0 to 18446744073709551615)`},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "0,a\n1,\"b\n", "simulate: line 2: extraneous or missing \" in quoted-field\n"},
		{[]string{"-policy", "../policy.yaml", "-rule", "API", "-plan", "free"}, "time,PerUser,cost\n0,a,1\n", "line 1: the header has no key column for rule PerEndpoint"},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerUser"}, "0,a\n", "differs by plan: give -plan"},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerUser", "-plan", "gold"}, "0,a\n", `no plan "gold"`},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerEndpoint"}, "0,seven\n", `line 1: rule PerEndpoint: key "seven" is not an int64`},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "yesterday,a\n", "neither nanoseconds nor RFC 3339"},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "0,a,lots\n", `cost "lots" is not a whole number`},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "", "no requests"},
		{[]string{"-policy", "../policy.yaml", "-rule", "API", "-plan", "free"}, "0,a|b|c|d\n", "4 keys for 2 keyed rules"},
		// One time form a log: before, a 1 after RFC 3339 times was read as 1970
		// and judged against the bucket's later state (a retry of 3,598 s).
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "2026-11-21T10:00:00Z,a\n1,a\n", `line 2: time "1" is Unix nanoseconds, but line 1's was RFC 3339`},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "time,key\n5,a\n2026-11-21T10:00:00Z,a\n", `line 3: time "2026-11-21T10:00:00Z" is RFC 3339, but line 2's was Unix nanoseconds`},
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
	args := []string{"-policy", "../policy.yaml", "-rule", "API", "-plan", "free"}
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

// TestGenUsageListsSimulate: gen -h names the simulate subcommand.
func TestGenUsageListsSimulate(t *testing.T) {
	var out bytes.Buffer
	if code := run([]string{"-h"}, &out, &out); code != 2 || !strings.Contains(out.String(), "gen simulate -policy") {
		t.Fatalf("gen -h: exit %d, %q", code, out.String())
	}
}
