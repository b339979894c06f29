package main

// The model: plain structs whose fields are the final values. Validation builds
// it; emission only prints it.

type model struct {
	source string // the policy file's name, as given
	pkg    string
	plans  []plan
	rules  []rule
	tiers  []tier
}

type plan struct {
	name   string // as written
	goName string // the constant: Plan + CamelCase(name)
}

type rule struct {
	name     string  // as written in the policy
	goName   string  // exported Go identifier
	keyType  string  // Go type of the key; "" for a global (single-bucket) rule
	planned  bool    // the rule has its own numbers per plan, and a bucket set per plan
	limits   []limit // one, or one per plan (in the order of model.plans) when planned
	cost     int64   // default cost of Allow
	maxKeys  int64   // 0: no cap
	allowCap bool    // at the cap: allow untracked (else deny)
	doc      string
}

// limit is one bucket's numbers: the rule's, or one per plan when the policy
// has plans (in the order of model.plans).
type limit struct {
	tokens     int64
	periodNs   int64
	burst      int64
	initial    int64
	initialSet bool
	interval   bool
	aligned    bool
	cost       int64 // the default cost under this limit

	// The fixed-point units NewRule computes for a greedy limit (see
	// atomicbucket.Rule.Units), emitted as constants; greedy is false for
	// interval limits, which have none.
	scale, emit, tau int64
	greedy           bool
}

type tier struct {
	name   string
	goName string
	rules  []int // indices into model.rules, in order
	doc    string
}

// The identifiers a rule or tier adds to the generated package, decided here
// so that validation can refuse a policy whose names collide before emission
// prints them.

// typeName is the rule's limiter type.
func (r rule) typeName() string { return r.goName + "Limiter" }

// ctorName is the function that builds the rule's buckets.
func (r rule) ctorName() string { return "new" + r.typeName() }

// unexported is the prefix of the rule's unexported package-level names: its
// folded units (Scale, Emit, Tau) and per-plan costs (Cost).
func (r rule) unexported() string { return lowerFirst(r.goName) }

// idents are the package-level identifiers the rule declares, with what each is.
func (r rule) idents() [][2]string {
	p := r.unexported()
	return [][2]string{
		{r.goName, "its limiter variable"}, {r.typeName(), "its limiter type"}, {r.ctorName(), "its constructor"},
		{p + "Scale", "a units constant"}, {p + "Emit", "a units constant"}, {p + "Tau", "a units constant"},
		{p + "Cost", "its per-plan costs"},
	}
}

// atName is the tier's function with an explicit time.
func (t tier) atName() string { return t.goName + "At" }

// idents are the package-level identifiers the tier declares.
func (t tier) idents() [][2]string {
	return [][2]string{{t.goName, "its function"}, {t.atName(), "its function with a time"}}
}

// reservedIdents are declared by every generated package (or will be, as the
// generated API grows), whatever the policy: no rule, tier or plan may take them.
var reservedIdents = []string{
	"Plan", "ParsePlan", "ErrUnknownPlan", "TierDecision", "New", "Option", "Limiters", "Default", "RuleName",
	"numPlans",
}
