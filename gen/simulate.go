package main

import (
	"bufio"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
)

// simulate replays a request log through one rule or tier of a policy and
// prints what the policy would have decided. It drives the same runtime calls
// generated limiters make (AllowNAt, RefundAt), with each request's own time.
//
// Input, one request a line, CSV or JSON lines (blank lines and lines starting
// with # are skipped):
//
//	time,key,cost
//	{"time": "2026-11-21T10:00:00.5Z", "key": "alice", "cost": 2}
//
// time is Unix nanoseconds or RFC 3339; key may be empty for a global rule, and
// for a tier holds one key per keyed rule, separated by |; cost defaults to the
// rule's. Output: one CSV line a request (time, key, cost, allowed, remaining,
// retry_after_ns, and denied_by for tiers), then a summary per rule and per key.
func simulate(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen simulate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	policy := fs.String("policy", "policy.yaml", "the policy file")
	name := fs.String("rule", "", "the rule or tier to replay the log through")
	planName := fs.String("plan", "", "the plan, for rules that differ by plan")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	raw, err := os.ReadFile(*policy)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	m, err := compile(*policy, raw)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sim, err := newSimulation(m, *name, *planName)
	if err != nil {
		fmt.Fprintln(stderr, "simulate:", err)
		return 2
	}
	reqs, err := readLog(stdin)
	if err != nil {
		fmt.Fprintln(stderr, "simulate:", err)
		return 1
	}
	if err := sim.run(reqs, stdout); err != nil {
		fmt.Fprintln(stderr, "simulate:", err)
		return 1
	}
	return 0
}

// request is one line of the log.
type request struct {
	line    int
	wall    int64 // Unix ns
	key     string
	cost    int64
	hasCost bool
}

func readLog(r io.Reader) ([]request, error) {
	var out []request
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		var timeField, key, costField string
		if strings.HasPrefix(line, "{") {
			var j struct {
				Time json.RawMessage `json:"time"`
				Key  string          `json:"key"`
				Cost *int64          `json:"cost"`
			}
			if err := json.Unmarshal([]byte(line), &j); err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			timeField, key = strings.Trim(string(j.Time), `"`), j.Key
			if j.Cost != nil {
				costField = strconv.FormatInt(*j.Cost, 10)
			}
		} else {
			rec, err := csv.NewReader(strings.NewReader(line)).Read()
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", n, err)
			}
			if len(rec) < 1 || len(rec) > 3 {
				return nil, fmt.Errorf("line %d: want time,key,cost; got %d fields", n, len(rec))
			}
			timeField = rec[0]
			if len(rec) > 1 {
				key = rec[1]
			}
			if len(rec) > 2 {
				costField = rec[2]
			}
		}
		req := request{line: n, key: key}
		if ns, err := strconv.ParseInt(timeField, 10, 64); err == nil {
			req.wall = ns
		} else if t, err := time.Parse(time.RFC3339Nano, timeField); err == nil {
			req.wall = t.UnixNano()
		} else {
			return nil, fmt.Errorf("line %d: time %q is neither nanoseconds nor RFC 3339", n, timeField)
		}
		if costField != "" {
			c, err := strconv.ParseInt(costField, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("line %d: cost %q is not a whole number", n, costField)
			}
			req.cost, req.hasCost = c, true
		}
		out = append(out, req)
	}
	return out, sc.Err()
}

// simRule is one rule's buckets in a simulation.
type simRule struct {
	rule            rule
	limit           limit
	table           *atomicbucket.Table[string]
	bucket          *atomicbucket.Bucket
	allowed, denied map[string]int
}

type simulation struct {
	name  string
	tier  bool
	rules []*simRule
}

func newSimulation(m *model, name, planName string) (*simulation, error) {
	plan := -1
	if planName != "" {
		for i, p := range m.plans {
			if p.name == planName {
				plan = i
			}
		}
		if plan < 0 {
			return nil, fmt.Errorf("no plan %q in the policy", planName)
		}
	}
	var picked []rule
	s := &simulation{name: name}
	for _, r := range m.rules {
		if r.name == name || r.goName == name {
			picked = []rule{r}
		}
	}
	for _, t := range m.tiers {
		if t.name == name || t.goName == name {
			s.tier = true
			for _, ri := range t.rules {
				picked = append(picked, m.rules[ri])
			}
		}
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("no rule or tier named %q", name)
	}
	for _, r := range picked {
		l := r.limits[0]
		if r.planned {
			if plan < 0 {
				return nil, fmt.Errorf("rule %s differs by plan: give -plan", r.goName)
			}
			l = r.limits[plan]
		}
		s.rules = append(s.rules, &simRule{rule: r, limit: l, allowed: map[string]int{}, denied: map[string]int{}})
	}
	return s, nil
}

// shift maps the log's wall-clock times into runtime time: FromWall, plus a
// multiple of every interval period (so grids stay on the log's wall clock) that
// puts the first request at least an hour after the epoch.
func (s *simulation) shift(first int64) (int64, error) {
	step := big.NewInt(1)
	for _, r := range s.rules {
		if r.limit.interval { // aligned grids, and keyed ones, are on the wall clock
			p := big.NewInt(r.limit.periodNs)
			g := new(big.Int).GCD(nil, nil, step, p)
			step.Mul(step, p).Quo(step, g)
		}
	}
	need := big.NewInt(int64(time.Hour) - int64(atomicbucket.FromWall(first)))
	k := new(big.Int).Add(need, new(big.Int).Sub(step, big.NewInt(1)))
	k.Div(k, step).Mul(k, step)
	if !k.IsInt64() {
		return 0, fmt.Errorf("the interval periods of %s have no common multiple that fits", s.name)
	}
	return k.Int64(), nil
}

func (s *simulation) run(reqs []request, w io.Writer) error {
	if len(reqs) == 0 {
		return fmt.Errorf("no requests on standard input")
	}
	shift, err := s.shift(reqs[0].wall)
	if err != nil {
		return err
	}
	start := atomicbucket.FromWall(reqs[0].wall).Add(time.Duration(shift))
	for _, r := range s.rules {
		rule, err := atomicbucket.NewRule(r.limit.atomic())
		if err != nil {
			return err
		}
		if r.rule.keyType == "" {
			r.bucket = atomicbucket.NewBucketAt(rule, start)
		} else {
			opts := atomicbucket.TableOptions{MaxKeys: r.rule.maxKeys}
			if r.rule.allowCap {
				opts.AtCap = atomicbucket.AllowAtCap
			}
			r.table = atomicbucket.NewTable[string](rule, opts)
		}
	}
	out := csv.NewWriter(w)
	head := []string{"time", "key", "cost", "allowed", "remaining", "retry_after_ns"}
	if s.tier {
		head = append(head, "denied_by")
	}
	out.Write(head)
	for _, req := range reqs {
		now := atomicbucket.FromWall(req.wall).Add(time.Duration(shift))
		keys, err := s.keysOf(req)
		if err != nil {
			return err
		}
		d, deniedBy := s.decide(keys, now, req)
		rec := []string{strconv.FormatInt(req.wall, 10), req.key, strconv.FormatInt(s.costOf(s.rules[0], req), 10),
			strconv.FormatBool(d.Allowed), strconv.FormatInt(d.Remaining, 10), strconv.FormatInt(int64(d.RetryAfter), 10)}
		if s.tier {
			rec = append(rec, deniedBy)
		}
		out.Write(rec)
	}
	out.Flush()
	fmt.Fprintln(w)
	fmt.Fprintln(w, "# summary: rule,key,allowed,denied")
	for _, r := range s.rules {
		keys := map[string]bool{}
		for k := range r.allowed {
			keys[k] = true
		}
		for k := range r.denied {
			keys[k] = true
		}
		sorted := make([]string, 0, len(keys))
		for k := range keys {
			sorted = append(sorted, k)
		}
		slices.Sort(sorted)
		ta, td := 0, 0
		for _, k := range sorted {
			fmt.Fprintf(w, "%s,%s,%d,%d\n", r.rule.goName, k, r.allowed[k], r.denied[k])
			ta += r.allowed[k]
			td += r.denied[k]
		}
		fmt.Fprintf(w, "%s,(all keys),%d,%d\n", r.rule.goName, ta, td)
	}
	return out.Error()
}

// keysOf splits a request's key among the keyed rules: one key for all of
// them, or one per keyed rule separated by |.
func (s *simulation) keysOf(req request) ([]string, error) {
	keyed := 0
	for _, r := range s.rules {
		if r.rule.keyType != "" {
			keyed++
		}
	}
	parts := strings.Split(req.key, "|")
	keys := make([]string, len(s.rules))
	i := 0
	for j, r := range s.rules {
		if r.rule.keyType == "" {
			continue
		}
		switch {
		case len(parts) == 1:
			keys[j] = parts[0]
		case len(parts) == keyed:
			keys[j] = parts[i]
		default:
			return nil, fmt.Errorf("line %d: %d keys for %d keyed rules", req.line, len(parts), keyed)
		}
		if r.rule.keyType != "string" {
			if _, err := strconv.ParseInt(keys[j], 10, 64); err != nil {
				if _, err := strconv.ParseUint(keys[j], 10, 64); err != nil {
					return nil, fmt.Errorf("line %d: key %q is not an integer, as rule %s's keys are", req.line, keys[j], r.rule.goName)
				}
			}
		}
		i++
	}
	return keys, nil
}

func (s *simulation) costOf(r *simRule, req request) int64 {
	if req.hasCost {
		return req.cost
	}
	return r.limit.cost
}

// decide runs one request: through the single rule, or through a tier's rules
// all-or-nothing (giving back what earlier rules took when one denies, and
// reporting the most constraining rule when all allow), as generated tiers do.
func (s *simulation) decide(keys []string, now atomicbucket.Time, req request) (atomicbucket.Decision, string) {
	var most atomicbucket.Decision
	for i, r := range s.rules {
		cost := s.costOf(r, req)
		var d atomicbucket.Decision
		if r.table != nil {
			d = r.table.AllowNAt(keys[i], now, cost)
		} else {
			d = r.bucket.AllowNAt(now, cost)
		}
		if d.Allowed {
			r.allowed[keys[i]]++
		} else {
			r.denied[keys[i]]++
		}
		if !d.Allowed {
			for j := i - 1; j >= 0; j-- {
				prev := s.rules[j]
				if prev.table != nil {
					prev.table.RefundAt(keys[j], now, s.costOf(prev, req))
				} else {
					prev.bucket.RefundAt(now, s.costOf(prev, req))
				}
			}
			return d, r.rule.goName
		}
		if i == 0 || d.Remaining < most.Remaining {
			most = d
		}
	}
	return most, ""
}
