package simulate

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/adaptive"
	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/gen/internal/numbers"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/overlay/yamlfile"
)

// Numbers in a simulation: an overlay file (-numbers) gives the numbers at
// the start, events in the log change them at their time, as a service's
// ApplyNumbers, SetKeyNumbers, ClearKeyNumbers and Reset would, and a
// health series drives an adaptive controller (-adapt) that scales one
// rule's numbers, as adaptive.Controller does through ScaleNumbers.
//
// Events are JSON lines among the requests (a CSV log may hold them too):
//
//	{"time": T, "set": {"rule": "PerUser", "plan": "pro", "key": "acme", "rate": "100/s", "burst": 100}}
//	{"time": T, "clear": {"rule": "PerUser", "key": "acme"}}   (no key: the plan's numbers go back to the policy's)
//	{"time": T, "reset": {"rule": "PerUser", "key": "alice"}}  (forget the bucket: "unblock this user")
//	{"time": T, "health": {"samples": 120, "latency": "300ms", "errors": 0.01}}
//
// rule may be left out when the simulation is of one rule; plan and key as
// the rule needs them. An event for a rule or plan the simulation does not
// replay changes nothing (the summary counts it).

// simNumbers is one simulated rule's numbers: what the policy, the overlay
// and events give (before scaling), the factor, and what is in force.
type simNumbers struct {
	policy, base atomicbucket.Numbers
	keys         map[string]atomicbucket.Numbers
	rate, burst  overlay.Factor
	// in force, scaled: what the runtime has been given
	plan    atomicbucket.Numbers
	keysNow map[string]atomicbucket.Numbers
}

func newSimNumbers(l atomicbucket.Numbers) *simNumbers {
	return &simNumbers{policy: l, base: l, plan: l, rate: overlay.One, burst: overlay.One,
		keys: map[string]atomicbucket.Numbers{}, keysNow: map[string]atomicbucket.Numbers{}}
}

// simEvent is one event of the log.
type simEvent struct {
	line   int
	wall   int64
	replay string // the event's line with its time in nanoseconds, as the output echoes it
	kind   string // set, clear, reset, health
	rule   string
	plan   string
	key    *string
	n      atomicbucket.Numbers
	health adaptive.Health
}

// replayLine is an event's JSON line with its time written in nanoseconds,
// as simulate writes every request's: the output echoes it so that, fed back
// in, it replays to the same decisions (a log has one form of time). Its
// fields are written in sorted order, numbers as the line wrote them.
func replayLine(text string, wall int64) (string, error) {
	d := json.NewDecoder(strings.NewReader(text))
	d.UseNumber()
	var m map[string]any
	if err := d.Decode(&m); err != nil {
		return "", fmt.Errorf("not valid JSON: %v", err)
	}
	m["time"] = json.Number(strconv.FormatInt(wall, 10))
	out, err := json.Marshal(m)
	return string(out), err
}

// eventJSON is an event's fields as the log writes them.
type eventJSON struct {
	Rule  string  `json:"rule"`
	Plan  string  `json:"plan"`
	Key   *string `json:"key"`
	Rate  string  `json:"rate"`
	Burst *int64  `json:"burst"`
}

type healthJSON struct {
	Samples *int64   `json:"samples"`
	Latency string   `json:"latency"`
	Errors  *float64 `json:"errors"`
}

// event reads an event line's fields; ok is false for a request line.
func (lr *logReader) event(text string) (simEvent, bool, error) {
	var j struct {
		Time   json.RawMessage `json:"time"`
		Set    *eventJSON      `json:"set"`
		Clear  *eventJSON      `json:"clear"`
		Reset  *eventJSON      `json:"reset"`
		Health *healthJSON     `json:"health"`
	}
	if err := json.Unmarshal([]byte(text), &j); err != nil {
		return simEvent{}, false, fmt.Errorf("line %d: not valid JSON: %v", lr.line, err)
	}
	e := simEvent{line: lr.line}
	var f *eventJSON
	count := 0
	for kind, v := range map[string]*eventJSON{"set": j.Set, "clear": j.Clear, "reset": j.Reset} {
		if v != nil {
			e.kind, f = kind, v
			count++
		}
	}
	if j.Health != nil {
		e.kind = "health"
		count++
	}
	switch {
	case count == 0:
		return e, false, nil
	case count > 1:
		return e, true, fmt.Errorf("line %d: one event a line: set, clear, reset or health", lr.line)
	}
	wall, err := lr.sim.parseTime(lr.line, strings.Trim(string(j.Time), `"`))
	if err != nil {
		return e, true, err
	}
	e.wall = wall
	if e.replay, err = replayLine(text, wall); err != nil {
		return e, true, fmt.Errorf("line %d: %v", lr.line, err)
	}
	if e.kind == "health" {
		h := j.Health
		if h.Samples == nil || *h.Samples < 0 {
			return e, true, fmt.Errorf("line %d: health needs samples, a count (0 or more)", lr.line)
		}
		e.health.Samples = *h.Samples
		if h.Latency != "" {
			d, err := time.ParseDuration(h.Latency)
			if err != nil || d < 0 {
				return e, true, fmt.Errorf("line %d: health latency %q is not a duration such as 250ms", lr.line, h.Latency)
			}
			e.health.Latency = d
		}
		if h.Errors != nil {
			if *h.Errors < 0 || *h.Errors > 1 {
				return e, true, fmt.Errorf("line %d: health errors %v is not a ratio in [0, 1]", lr.line, *h.Errors)
			}
			e.health.Errors = *h.Errors
		}
		return e, true, nil
	}
	e.rule, e.plan, e.key = f.Rule, f.Plan, f.Key
	if e.kind == "set" {
		if f.Rate == "" || f.Burst == nil {
			return e, true, fmt.Errorf("line %d: set needs a rate and a burst", lr.line)
		}
		if e.n.Tokens, e.n.Period, err = overlay.ParseRate(f.Rate, false); err != nil {
			return e, true, fmt.Errorf("line %d: set: %v", lr.line, err)
		}
		e.n.Burst = *f.Burst
	}
	return e, true, nil
}

// target is the simulated rule an event changes: nil for a rule or plan
// outside the simulation (the event counted as skipped), or an error for an
// event the policy could not take.
func (s *simulation) target(e simEvent) (*simRule, error) {
	name := e.rule
	if name == "" {
		if len(s.rules) != 1 {
			return nil, fmt.Errorf("line %d: %s: name the rule (the tier %s has %d)", e.line, e.kind, s.name, len(s.rules))
		}
		name = s.rules[0].rule.Name
	}
	var r *simRule
	for _, sr := range s.rules {
		if sr.rule.Name == name || sr.rule.GoName == name {
			r = sr
		}
	}
	checker, known := s.checkers.Rules[name]
	if r != nil {
		checker, known = s.checkers.Rules[r.rule.Name]
	}
	if !known {
		return nil, fmt.Errorf("line %d: %s: no rule %q in the policy", e.line, e.kind, name)
	}
	if e.plan != "" && !slices.Contains(s.checkers.Plans, e.plan) {
		return nil, fmt.Errorf("line %d: %s: no plan %q in the policy", e.line, e.kind, e.plan)
	}
	if e.plan != "" && checker.Plans() == 0 {
		return nil, fmt.Errorf("line %d: %s: rule %s has the same numbers on every plan: give no plan", e.line, e.kind, name)
	}
	if e.key != nil {
		if !checker.Keyed() {
			return nil, fmt.Errorf("line %d: %s: rule %s has no keys", e.line, e.kind, name)
		}
		if e.plan != "" && e.kind != "reset" {
			return nil, fmt.Errorf("line %d: %s: a key's numbers are on every plan: give no plan", e.line, e.kind)
		}
		// A window's reset takes a key, which its numbers do not (the
		// event applies numbers.CanonicalKey's check instead).
		if err := checker.CheckKey(*e.key); err != nil && !(e.kind == "reset" && r != nil && r.nums == nil) {
			return nil, fmt.Errorf("line %d: %s: key %q: %v", e.line, e.kind, *e.key, err)
		}
	} else if e.kind == "reset" && checker.Keyed() {
		return nil, fmt.Errorf("line %d: reset: rule %s is keyed: give the key", e.line, name)
	}
	if e.kind == "set" {
		plans := []int{slices.Index(s.checkers.Plans, e.plan)}
		if checker.Plans() > 0 && e.plan == "" {
			plans = plans[:0]
			for i := range checker.Plans() {
				plans = append(plans, i)
			}
		}
		for _, pl := range plans {
			if err := checker.Check(pl, e.n); err != nil {
				return nil, fmt.Errorf("line %d: set: rule %s: %v", e.line, name, err)
			}
		}
	}
	if r == nil || (e.plan != "" && e.plan != s.planName) {
		return nil, nil
	}
	return r, nil
}

// event applies e at now.
func (s *simulation) event(e simEvent, now atomicbucket.Time) (string, error) {
	if e.kind == "health" {
		if s.ctl == nil {
			return "", fmt.Errorf("line %d: a health row needs -adapt RULE: the rule a controller scales", e.line)
		}
		s.now = now
		st := s.ctl.Judge(time.Unix(0, e.wall), e.health)
		if st.Err != nil {
			return "", fmt.Errorf("line %d: the factor %v refused: %v", e.line, st.Factor, st.Err)
		}
		return fmt.Sprintf("health: %d samples, latency %v, errors %.4f: %s, factor %.3f", e.health.Samples, e.health.Latency, e.health.Errors, st.Verdict, st.Factor.Float()), nil
	}
	r, err := s.target(e)
	if err != nil || r == nil {
		if err == nil {
			s.skipped++
		}
		return "", err
	}
	what := e.kind + " " + r.rule.Name
	if e.key != nil {
		what += " key " + strconv.Quote(*e.key)
	}
	if r.nums == nil && e.kind == "reset" { // a window emptied, as Reset empties it
		if r.wtable != nil {
			k, err := numbers.CanonicalKey(r.rule, *e.key)
			if err != nil {
				return "", fmt.Errorf("line %d: %v", e.line, err)
			}
			r.wtable.ResetAt(k, now)
		} else {
			r.window.ResetAt(now)
		}
		return what, nil
	}
	if r.nums == nil { // a window: the whole rule's numbers (target refused a key)
		var err error
		switch {
		case e.kind == "set" && r.wtable != nil:
			err = r.wtable.SetNumbers(e.n, r.limit.Cost)
		case e.kind == "set":
			err = r.window.SetNumbers(e.n, r.limit.Cost)
		case r.wtable != nil:
			r.wtable.ClearNumbers()
		default:
			r.window.ClearNumbers()
		}
		if err != nil {
			return "", fmt.Errorf("line %d: %v", e.line, err)
		}
		if e.kind == "set" {
			what += ": " + e.n.String()
		}
		return what, nil
	}
	switch e.kind {
	case "reset":
		if r.table != nil {
			r.table.ResetAt(*e.key, now)
		} else {
			r.bucket.ResetAt(now)
		}
		return what, nil
	case "set":
		if e.key != nil {
			r.nums.keys[*e.key] = e.n
		} else {
			r.nums.base = e.n
		}
		what += ": " + e.n.String()
	case "clear":
		if e.key != nil {
			delete(r.nums.keys, *e.key)
		} else {
			r.nums.base = r.nums.policy
		}
	}
	if err := s.inForce(r, now); err != nil {
		return "", fmt.Errorf("line %d: %v", e.line, err)
	}
	return what, nil
}

// inForce gives r's runtime its numbers: the base and keys' own, scaled by
// its factor, changing only what differs.
func (s *simulation) inForce(r *simRule, now atomicbucket.Time) error {
	nb := r.nums
	b := overlay.Base{Numbers: nb.base, Cost: max(r.limit.Cost, 1), Interval: r.limit.Interval}
	plan, err := overlay.ScaleNumbers(b, nb.rate, nb.burst)
	if err != nil {
		return err
	}
	keys := map[string]atomicbucket.Numbers{}
	for k, n := range nb.keys {
		b.Numbers = n
		if keys[k], err = overlay.ScaleNumbers(b, nb.rate, nb.burst); err != nil {
			return err
		}
	}
	if plan != nb.plan {
		switch {
		case plan == nb.policy && r.table != nil:
			r.table.ClearNumbersAt(now, atomicbucket.CarryAsIs)
		case plan == nb.policy:
			r.bucket.ClearNumbersAt(now, atomicbucket.CarryAsIs)
		case r.table != nil:
			err = r.table.SetNumbersAt(now, plan, atomicbucket.CarryAsIs)
		default:
			err = r.bucket.SetNumbersAt(now, plan, atomicbucket.CarryAsIs)
		}
		if err != nil {
			return fmt.Errorf("rule %s: %v", r.rule.Name, err)
		}
		nb.plan = plan
	}
	for _, k := range slices.Sorted(maps.Keys(nb.keysNow)) {
		if _, ok := keys[k]; !ok {
			r.table.ClearKeyNumbersAt(now, k, atomicbucket.CarryAsIs)
		}
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		if old, ok := nb.keysNow[k]; !ok || old != keys[k] {
			if err := r.table.SetKeyNumbersAt(now, k, keys[k], atomicbucket.CarryAsIs); err != nil {
				return fmt.Errorf("rule %s, key %q: %v", r.rule.Name, k, err)
			}
		}
	}
	nb.keysNow = keys
	return nil
}

// loadOverlay reads the -numbers file: checked whole against the policy
// (as gen numbers and ApplyNumbers check it), then its numbers for the
// simulated rules and plan put in force at start.
func (s *simulation) loadOverlay(name string) error {
	src, err := os.ReadFile(name)
	if err != nil {
		return err
	}
	set, err := yamlfile.Parse(name, src)
	if err != nil {
		return err
	}
	if err := overlay.Check(s.checkers, set); err != nil {
		return err
	}
	for _, r := range s.rules {
		var plan, all *atomicbucket.Numbers
		for _, e := range set {
			if e.Rule != r.rule.Name {
				continue
			}
			n := e.Numbers
			switch {
			case e.HasKey && r.nums == nil: // overlay.Check refuses a window key's own numbers
				return fmt.Errorf("%s: rule %s is a window rule: its numbers are the whole rule's", e.Pos, r.rule.Name)
			case e.HasKey:
				k, err := numbers.CanonicalKey(r.rule, e.Key)
				if err != nil {
					return fmt.Errorf("%s: %v", e.Pos, err)
				}
				r.nums.keys[k] = n
			case e.Plan == "":
				all = &n
			case e.Plan == s.planName:
				plan = &n
			}
		}
		if plan == nil {
			plan = all
		}
		switch {
		case plan == nil:
		case r.nums != nil:
			r.nums.base = *plan
		default: // a window rule: the whole rule's numbers, put in force when its window is made
			if _, err := atomicwindow.RuleOf(*plan, r.limit.Cost); err != nil {
				return fmt.Errorf("%s: rule %s: %v", name, r.rule.Name, err)
			}
			r.windowStart = plan
		}
	}
	return nil
}

// newController is -adapt's controller over rule name's numbers.
func (s *simulation) newController(name string, cfg adaptive.Config) error {
	var r *simRule
	var names []string
	for _, sr := range s.rules {
		names = append(names, sr.rule.Name)
		if sr.rule.Name == name || sr.rule.GoName == name {
			r = sr
		}
	}
	if r == nil {
		return fmt.Errorf("-adapt %s: not a rule of the simulation (%s)", name, strings.Join(names, ", "))
	}
	if r.nums == nil {
		return fmt.Errorf("-adapt %s: a window rule: simulate replays the controller on token buckets only", name)
	}
	c, err := adaptive.New(cfg, func(rate, burst overlay.Factor) error {
		if s.now == 0 { // the starting factor: put in force with the rest at the first line
			r.nums.rate, r.nums.burst = rate, burst
			return nil
		}
		old, oldBurst := r.nums.rate, r.nums.burst
		r.nums.rate, r.nums.burst = rate, burst
		if err := s.inForce(r, s.now); err != nil {
			r.nums.rate, r.nums.burst = old, oldBurst
			return err
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("-adapt: %v", err)
	}
	s.ctl = c
	return nil
}
