package simulate

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/big"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/adaptive"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/gen/internal/cli"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/gen/internal/numbers"
	"github.com/limitgen/limitgen/gen/internal/policy"
	"github.com/limitgen/limitgen/overlay"
)

// simulate replays a request log through one rule or tier of a policy and
// prints what the policy would have decided. It drives the same runtime calls
// generated limiters make (AllowNAt, RefundAt), with each request's own time,
// and its tables reclaim keys exactly as a service's do.
//
// Input, one request a line, streamed (it is never held whole): CSV, or JSON
// lines. Blank lines and lines starting with # are skipped.
//
//	time,key,cost                        (a header row is optional)
//	1795255200000000000,alice,2
//	time,PerUser,PerEndpoint,cost        (a tier: a key column per keyed rule)
//	2026-11-21T10:00:00.5Z,alice,7,
//	{"time": "2026-11-21T10:00:00.5Z", "key": "alice", "cost": 2}
//	{"time": 1795255200000000000, "keys": {"PerUser": "alice", "PerEndpoint": "7"}}
//
// time is Unix nanoseconds or RFC 3339; cost defaults to each rule's; an
// in-flight rule (or a tier with one) needs each request's duration, a
// duration column or JSON field (ns, 1.5s or 20min): its slot is held that
// long. An actual column or JSON field is the request's actual cost: an
// admitted request is settled at it when it ends (its time plus its
// duration, or at once), against the cost it was admitted at (given back,
// or owed as debt; a window gives back from what it counted at the
// admission, or counts an excess). Without a
// header, a tier's keys are one column split at |, or a single key for every
// keyed rule. Columns a header names that simulate does not know (allowed,
// remaining, …) are ignored, so its output can be fed back in.
//
// Output: CSV with a header, one line a request: the input's time, key
// columns and cost, then allowed, remaining, retry_after_ns and, for tiers,
// denied_by; then a summary per rule and key as # comment lines (allowed,
// denied, and for a tier refunded: passed, then given back when a later rule
// denied the request).
//
// Numbers can change as they would in the service (numbers.go): -numbers
// puts an overlay file's numbers in force from the start; set, clear and
// reset events among the log's lines (JSON) change them at their time; and
// with -adapt RULE, health rows drive an adaptive controller (the flags are
// adaptive.Config's) whose factor scales that rule, shown in a factor
// column. Each event is echoed as a # line where it happened.
func Main(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("gen simulate", stderr,
		"usage: gen simulate -policy policy.yaml -rule RULE|TIER [-plan PLAN] [-numbers numbers.yaml] [-adapt RULE -latency D|-errors R ...] [-html report.html] < requests",
		"Replays a request log (CSV or JSON lines) through a rule or tier and prints each decision.",
	)
	policyFile := fs.String("policy", "policy.yaml", "the policy file")
	name := fs.String("rule", "", "the rule or tier to replay the log through (required)")
	planName := fs.String("plan", "", "the plan, for rules that differ by plan")
	numbersFile := fs.String("numbers", "", "an overlay file of numbers in force from the start (as gen numbers checks it)")
	adapt := fs.String("adapt", "", "a rule an adaptive controller scales from the log's health rows")
	htmlFile := fs.String("html", "", "also write a picture of the run to this file: one self-contained HTML page, per rule the cost admitted and denied over time, the number changes, the keys that hit the limit")
	var cfg adaptive.Config
	fs.DurationVar(&cfg.Latency, "latency", 0, "-adapt: the latency target (unhealthy above it)")
	fs.Float64Var(&cfg.Errors, "errors", 0, "-adapt: the error ratio target (unhealthy above it)")
	fs.Float64Var(&cfg.Min, "min", 0.1, "-adapt: the least factor")
	fs.Float64Var(&cfg.Max, "max", 1, "-adapt: the greatest factor")
	fs.Float64Var(&cfg.Increase, "increase", 0.05, "-adapt: added to the factor after a healthy row")
	fs.Float64Var(&cfg.Decrease, "decrease", 0.5, "-adapt: multiplies the factor after an unhealthy row")
	fs.Int64Var(&cfg.MinSamples, "min-samples", 20, "-adapt: a health row with fewer samples holds the factor")
	fs.BoolVar(&cfg.Burst, "scale-burst", false, "-adapt: scale the burst too")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	m, err := policy.Load(*policyFile, *policyFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	sim, err := newSimulation(m, *name, *planName)
	if err != nil {
		fmt.Fprintln(stderr, "simulate:", err)
		return 2
	}
	if *numbersFile != "" {
		if err := sim.loadOverlay(*numbersFile); err != nil {
			fmt.Fprintln(stderr, "simulate:", err)
			return 1
		}
	}
	if *adapt != "" {
		cfg.Start = min(max(1, cfg.Min), cfg.Max) // the policy's numbers, when the bounds allow them
		if err := sim.newController(*adapt, cfg); err != nil {
			fmt.Fprintln(stderr, "simulate:", err)
			return 2
		}
	}
	if *htmlFile != "" {
		sim.pic = newPicture(len(sim.rules))
		if *numbersFile != "" {
			sim.pic.notes = append(sim.pic.notes, "Numbers from "+*numbersFile+" in force from the start.")
		}
	}
	if err := sim.run(stdin, stdout); err != nil {
		fmt.Fprintln(stderr, "simulate:", err)
		return 1
	}
	if sim.pic != nil {
		f, err := os.Create(*htmlFile)
		if err == nil {
			err = sim.writeHTML(f, sim.pic)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, "simulate:", err)
			return 1
		}
	}
	return 0
}

// simRule is one rule's buckets in a simulation.
type simRule struct {
	rule   model.Rule
	limit  model.Limit
	nums   *simNumbers
	table  *atomicbucket.Table[string]
	bucket *atomicbucket.Bucket
	// A window rule's (nums is nil: its numbers change for the whole rule
	// only, by set and clear events), and the -numbers file's numbers for it
	// (nil: the policy's).
	wtable      *atomicwindow.Table[string]
	window      *atomicwindow.Window
	windowStart *atomicbucket.Numbers
	// An in-flight rule's slots (nums is nil: no run-time numbers).
	slots *atomicslot.Table[string]
	gate  *atomicslot.Gate
	// By key: requests the rule admitted, denied, and (in a tier) passed
	// but were then denied by a later rule, so that its take was refunded.
	allowed, denied, refunded map[string]int
	// settled counts the admitted requests settled at their actual cost,
	// and forgiven the tokens of excess beyond the debt bound.
	settled, forgiven int64
}

type simulation struct {
	name  string
	tier  bool
	rules []*simRule
	keyed []int // indices into rules of the keyed rules, in order
	// timeForm is how the log writes its times (the first line's form), and
	// timeLine that line.
	timeForm string
	timeLine int
	// Numbers that change: the policy's rules as overlays are checked, the
	// plan replayed, the -adapt controller (nil without), the time of the
	// line being replayed (for the controller's changes), and how many
	// events were for rules or plans outside the simulation.
	checkers overlay.Policy[overlay.Checker]
	planName string
	ctl      *adaptive.Controller
	now      atomicbucket.Time
	skipped  int
	pic      *picture // what -html draws; nil without
	// held are the slots of admitted requests not yet ended, by their end
	// (time + duration), for a simulation of in-flight rules.
	held  byEnd[heldSlot]
	slots bool // the simulation has in-flight rules: requests carry durations
	// pending are the settlements of admitted requests with an actual cost,
	// by when they end; settles says the output has an actual column.
	pending byEnd[settlement]
	settles bool
}

func newSimulation(m *model.Model, name, planName string) (*simulation, error) {
	var ruleNames, tierNames []string
	for _, r := range m.Rules {
		ruleNames = append(ruleNames, r.Name)
	}
	for _, t := range m.Tiers {
		tierNames = append(tierNames, t.Name)
	}
	choices := "the rules are " + strings.Join(ruleNames, ", ")
	if len(tierNames) > 0 {
		choices += "; the tiers are " + strings.Join(tierNames, ", ")
	}
	if name == "" {
		return nil, fmt.Errorf("-rule is required: %s", choices)
	}
	plan := -1
	if planName != "" {
		var names []string
		for i, p := range m.Plans {
			names = append(names, p.Name)
			if p.Name == planName {
				plan = i
			}
		}
		if plan < 0 {
			return nil, fmt.Errorf("no plan %q in the policy; the plans are %s", planName, strings.Join(names, ", "))
		}
	}
	var picked []model.Rule
	s := &simulation{name: name, checkers: numbers.Checkers(m), planName: planName}
	for _, r := range m.Rules {
		if r.Name == name || r.GoName == name {
			picked = []model.Rule{r}
		}
	}
	for _, t := range m.Tiers {
		if t.Name == name || t.GoName == name {
			s.tier = true
			for _, ri := range append(slices.Clone(t.Slots), t.Rules...) { // the slots are taken first
				picked = append(picked, m.Rules[ri])
			}
		}
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("no rule or tier named %q; %s", name, choices)
	}
	for i, r := range picked {
		l := r.Limits[0]
		if r.IsInFlight() && r.Planned {
			if plan < 0 {
				return nil, fmt.Errorf("rule %s differs by plan: give -plan", r.GoName)
			}
			l = r.Limits[plan]
		}
		if r.IsInFlight() {
			s.slots = true
			sr := &simRule{rule: r, limit: l, allowed: map[string]int{}, denied: map[string]int{}, refunded: map[string]int{}}
			s.rules = append(s.rules, sr)
			if r.KeyType != "" {
				s.keyed = append(s.keyed, i)
			}
			continue
		}
		if r.Planned {
			if plan < 0 {
				return nil, fmt.Errorf("rule %s differs by plan: give -plan", r.GoName)
			}
			l = r.Limits[plan]
		}
		sr := &simRule{rule: r, limit: l, allowed: map[string]int{}, denied: map[string]int{}, refunded: map[string]int{}}
		if !l.Window {
			sr.nums = newSimNumbers(atomicbucket.NumbersOf(l.Atomic()))
		}
		s.rules = append(s.rules, sr)
		if r.KeyType != "" {
			s.keyed = append(s.keyed, i)
		}
	}
	return s, nil
}

// request is one line of the log.
type request struct {
	event   *simEvent // an event line: no request
	line    int
	wall    int64    // Unix ns
	keys    []string // one per rule of the simulation ("" for global rules)
	cost    int64
	hasCost bool
	dur     int64 // ns the request ran (in-flight rules hold its slots that long)
	hasDur  bool
	// actual is the request's actual cost, settled when it ends (time +
	// duration) against the cost it was admitted at.
	actual    int64
	hasActual bool
}

// request checks a request's fields: a time, keys each rule's generated API
// could receive (an integer in range of an integer key type, written in its
// canonical decimal form so that it places its grid as the generated code's
// integer key does), a whole cost.
func (s *simulation) request(line int, timeField string, keys []string, costField, durField, actualField string) (request, error) {
	req := request{line: line, keys: keys}
	var err error
	if req.wall, err = s.parseTime(line, timeField); err != nil {
		return req, err
	}
	for _, j := range s.keyed {
		r := s.rules[j].rule
		if keys[j] == "" {
			// Every door refuses a request without a key (missing_key), and
			// the generated API an empty key: never one bucket for them all.
			return req, fmt.Errorf("line %d: rule %s: the key is empty; a request without a key is refused by the doors (missing_key), never limited as a client of its own", line, r.Name)
		}
		k, err := numbers.CanonicalKey(r, keys[j])
		if err != nil {
			return req, fmt.Errorf("line %d: rule %s: %v", line, r.Name, err)
		}
		keys[j] = k
	}
	if costField != "" {
		c, err := strconv.ParseInt(costField, 10, 64)
		if err != nil {
			return req, fmt.Errorf("line %d: cost %q is not a whole number", line, costField)
		}
		req.cost, req.hasCost = c, true
	}
	if durField != "" {
		d, err := strconv.ParseInt(durField, 10, 64)
		if err != nil {
			var pd time.Duration
			if pd, err = time.ParseDuration(durField); err != nil {
				pd, err = overlay.ParseWindow(durField) // as the policy writes them: 20min
			}
			d = int64(pd)
		}
		if err != nil || d < 0 {
			return req, fmt.Errorf("line %d: duration %q: want nanoseconds or a duration (1.5s, 20min), not negative", line, durField)
		}
		req.dur, req.hasDur = d, true
	}
	if actualField != "" {
		a, err := strconv.ParseInt(actualField, 10, 64)
		if err != nil || a < 0 {
			return req, fmt.Errorf("line %d: actual %q: want the request's actual cost, a whole number not below 0", line, actualField)
		}
		req.actual, req.hasActual = a, true
	}
	if s.slots && !req.hasDur {
		return req, fmt.Errorf("line %d: %s holds slots for a request's duration: give each request one (a duration column, or \"duration\" in JSON; ns or 1.5s)", line, s.name)
	}
	return req, nil
}

// parseTime reads a line's time: Unix nanoseconds or RFC 3339, one form a log.
func (s *simulation) parseTime(line int, timeField string) (int64, error) {
	var wall int64
	form := ""
	if ns, err := strconv.ParseInt(timeField, 10, 64); err == nil {
		wall, form = ns, "Unix nanoseconds"
	} else if t, err := time.Parse(time.RFC3339Nano, timeField); err == nil {
		wall, form = t.UnixNano(), "RFC 3339"
	} else {
		return 0, fmt.Errorf("line %d: time %q is neither nanoseconds nor RFC 3339", line, timeField)
	}
	// One form a log: a number after RFC 3339 times is far more likely a
	// mistake (seconds, an offset) than a time in 1970.
	if s.timeForm == "" {
		s.timeForm, s.timeLine = form, line
	} else if form != s.timeForm {
		return 0, fmt.Errorf("line %d: time %q is %s, but line %d's was %s; write every time one way", line, timeField, form, s.timeLine, s.timeForm)
	}
	return wall, nil
}

// shift maps the log's wall-clock times into runtime time: FromWall, plus a
// multiple of every interval period (so grids stay on the log's wall clock) that
// puts the first request at least an hour after the epoch.
func (s *simulation) shift(first int64) (int64, error) {
	step := big.NewInt(1)
	for _, r := range s.rules {
		if r.limit.Interval { // aligned grids, and keyed ones, are on the wall clock
			p := big.NewInt(r.limit.PeriodNs)
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

// start builds the buckets at the first request's time.
func (s *simulation) start(start atomicbucket.Time) error {
	for _, r := range s.rules {
		if r.limit.InFlight {
			rule, err := atomicslot.NewRule(r.limit.Tokens, time.Duration(r.limit.PeriodNs))
			if err != nil {
				return err
			}
			if r.rule.KeyType == "" {
				r.gate = atomicslot.NewGate(rule)
				continue
			}
			r.slots = atomicslot.NewTable[string](rule, atomicbucket.TableOptions{MaxKeys: r.rule.MaxKeys, AllowAtCap: r.rule.AllowCap})
			continue
		}
		if r.limit.Window {
			wr := r.limit.WindowRule()
			if r.rule.KeyType == "" {
				r.window = atomicwindow.NewWindow(wr)
				if r.windowStart != nil {
					if err := r.window.SetNumbers(*r.windowStart, r.limit.Cost); err != nil {
						return err
					}
				}
				continue
			}
			opts := atomicbucket.TableOptions{MaxKeys: r.rule.MaxKeys}
			if r.rule.AllowCap {
				opts.AllowAtCap = true
			}
			r.wtable = atomicwindow.NewTable[string](wr, opts)
			if r.windowStart != nil {
				if err := r.wtable.SetNumbers(*r.windowStart, r.limit.Cost); err != nil {
					return err
				}
			}
			continue
		}
		rule, err := atomicbucket.NewRule(r.limit.Atomic())
		if err != nil {
			return err
		}
		if r.rule.KeyType == "" {
			r.bucket = atomicbucket.NewBucketAt(rule, start)
			continue
		}
		opts := atomicbucket.TableOptions{MaxKeys: r.rule.MaxKeys}
		if r.rule.AllowCap {
			opts.AllowAtCap = true
		}
		r.table = atomicbucket.NewTable[string](rule, opts)
	}
	return nil
}

func (s *simulation) run(in io.Reader, w io.Writer) error {
	lr := s.newLogReader(in)
	out := csv.NewWriter(w)
	var shift int64
	n := 0
	started := false
	for {
		req, err := lr.next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			out.Flush()
			return err
		}
		if !started {
			started = true
			if shift, err = s.shift(req.wall); err != nil {
				return err
			}
			at := atomicbucket.FromWall(req.wall).Add(time.Duration(shift))
			if err := s.start(at); err != nil {
				return err
			}
			for _, r := range s.rules { // the overlay's numbers and the controller's starting factor
				if r.nums == nil {
					continue // a window, or slots
				}
				if err := s.inForce(r, at); err != nil {
					return fmt.Errorf("line %d: %v", req.line, err)
				}
			}
		}
		now := atomicbucket.FromWall(req.wall).Add(time.Duration(shift))
		if req.event != nil {
			what, err := s.event(*req.event, now)
			if err != nil {
				out.Flush()
				return err
			}
			out.Flush()
			if what != "" {
				fmt.Fprintf(w, "# %d: %s\n", req.wall, what)
				if s.pic != nil {
					s.pic.change(req.wall, what)
				}
			}
			// The event itself, so that the output replays to the same
			// decisions (a skipped one too: the summary counts it).
			fmt.Fprintln(w, req.event.replay)
			continue
		}
		if n == 0 {
			head := append([]string{"time"}, lr.head...)
			head = append(head, "cost")
			s.settles = req.hasActual || lr.cols != nil && lr.cols.actual >= 0
			if s.slots || s.settles { // a settlement comes when the request ends
				head = append(head, "duration")
			}
			if s.settles {
				head = append(head, "actual")
			}
			head = append(head, "allowed", "remaining", "retry_after_ns")
			if s.tier {
				head = append(head, "denied_by")
			}
			if s.ctl != nil {
				head = append(head, "factor")
			}
			out.Write(head)
		}
		n++
		d, deniedBy := s.decide(req, now)
		if s.pic != nil {
			costs := make([]int64, len(s.rules))
			at := -1
			for i, r := range s.rules {
				costs[i] = s.costOf(r, req)
				if r.rule.Name == deniedBy {
					at = i
				}
			}
			if !d.Allowed && at < 0 {
				at = 0 // a lone rule's denial
			}
			s.pic.request(req.wall, costs, d.Allowed, at)
		}
		rec := []string{strconv.FormatInt(req.wall, 10)}
		rec = append(rec, s.keyColumns(req, lr)...)
		cost := ""
		if req.hasCost {
			cost = strconv.FormatInt(req.cost, 10)
		}
		rec = append(rec, cost)
		if s.slots || s.settles {
			rec = append(rec, strconv.FormatInt(req.dur, 10))
		}
		if s.settles {
			actual := ""
			if req.hasActual {
				actual = strconv.FormatInt(req.actual, 10)
			}
			rec = append(rec, actual)
		}
		rec = append(rec, strconv.FormatBool(d.Allowed), strconv.FormatInt(d.Remaining, 10), strconv.FormatInt(int64(d.RetryAfter), 10))
		if s.tier {
			rec = append(rec, deniedBy)
		}
		if s.ctl != nil {
			rec = append(rec, strconv.FormatFloat(s.ctl.Factor().Float(), 'f', 3, 64))
		}
		out.Write(rec)
	}
	out.Flush()
	if n == 0 {
		return fmt.Errorf("no requests on standard input")
	}
	s.release(atomicbucket.Time(atomicbucket.MaxUptime)) // the requests still running when the log ends end as logged
	s.summary(w)
	if s.skipped > 0 {
		fmt.Fprintf(w, "# events for rules or plans outside the simulation, skipped: %d\n", s.skipped)
	}
	return out.Error()
}

// keyColumns are the request's keys in the output's key columns: a key
// column holds the one key every keyed rule got, or each rule's, joined by |.
func (s *simulation) keyColumns(req request, lr *logReader) []string {
	var cols []string
	for _, name := range lr.head {
		if name != "key" {
			for _, j := range s.keyed {
				if s.rules[j].rule.Name == name {
					cols = append(cols, req.keys[j])
				}
			}
			continue
		}
		parts := make([]string, len(s.keyed))
		same := true
		for n, j := range s.keyed {
			parts[n] = req.keys[j]
			same = same && parts[n] == parts[0]
		}
		if same && len(parts) > 1 {
			parts = parts[:1]
		}
		cols = append(cols, strings.Join(parts, "|"))
	}
	return cols
}
