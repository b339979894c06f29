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
0,alice,1,true,2,0
100000000,alice,1,true,1,0
200000000,alice,3,false,1,8949266183
300000000,bob,1,true,2,0
10000000000,alice,3,true,2,0

# summary: rule,key,allowed,denied
Login,alice,3,1
Login,bob,1,0
Login,(all keys),4,1
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
		1:  "1795255200000000000,alice|7,1,true,49,0,",
		50: "1795255200000000000,alice|7,1,true,0,0,",
		51: "1795255200000000000,alice|7,1,false,0,100000000,PerUser",
		52: "1795255200100000000,alice|7,1,true,0,0,",
	} {
		if lines[i] != want {
			t.Errorf("line %d = %q, want %q", i, lines[i], want)
		}
	}
	for _, want := range []string{"PerUser,alice,51,1", "PerEndpoint,7,51,0", "Global,,51,0"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
}

func TestSimulateRefusesBadInput(t *testing.T) {
	for _, c := range []struct {
		args []string
		log  string
		want string
	}{
		{[]string{"-policy", "../policy.yaml", "-rule", "Nope"}, "0,a\n", `no rule or tier named "Nope"`},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerUser"}, "0,a\n", "differs by plan: give -plan"},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerUser", "-plan", "gold"}, "0,a\n", `no plan "gold"`},
		{[]string{"-policy", "../policy.yaml", "-rule", "PerEndpoint"}, "0,seven\n", `key "seven" is not an integer`},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "yesterday,a\n", "neither nanoseconds nor RFC 3339"},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "0,a,lots\n", `cost "lots" is not a whole number`},
		{[]string{"-policy", "../policy.yaml", "-rule", "Login"}, "", "no requests"},
		{[]string{"-policy", "../policy.yaml", "-rule", "API", "-plan", "free"}, "0,a|b|c|d\n", "4 keys for 2 keyed rules"},
	} {
		_, errOut, code := runSimulate(t, c.args, c.log)
		if code == 0 || !strings.Contains(errOut, c.want) {
			t.Errorf("simulate %v with %q: exit %d, %q; want an error saying %q", c.args, c.log, code, errOut, c.want)
		}
	}
}
