package main

// The model: plain structs whose fields are the final values. Validation builds
// it; emission only prints it.

type model struct {
	source    string // the policy file's name, as given
	pkg       string
	plans     []plan
	rules     []rule
	tiers     []tier
	doc       string // the package's doc comment
	limitsDoc string // the Limits type's doc comment
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
	doc      string  // the package-level variable's doc comment: the rule in plain words
	typeDoc  string  // the limiter type's doc comment
	fieldDoc string  // the Limits field's line comment
	unitsDoc string  // the folded units' doc comment (folded rules only)
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
// folded units and per-plan costs (Cost).
func (r rule) unexported() string { return lowerFirst(r.goName) }

// The folded units' constants (see atomicbucket.Rule.Units): the units one
// nanosecond is worth (scale), the units one token is worth (GCRA's emission
// interval), and the units a bucket may run ahead of now (the burst's worth:
// GCRA's tolerance).
func (r rule) unitsPerNs() string    { return r.unexported() + "UnitsPerNs" }
func (r rule) unitsPerToken() string { return r.unexported() + "UnitsPerToken" }
func (r rule) burstUnits() string    { return r.unexported() + "BurstUnits" }

// idents are the package-level identifiers the rule declares, with what each
// is. Its variable's name is also a field of Limits.
func (r rule) idents() [][2]string {
	p := r.unexported()
	return [][2]string{
		{r.goName, "its limiter variable"}, {r.typeName(), "its limiter type"}, {r.ctorName(), "its constructor"},
		{r.ruleConst(), "its RuleName constant"},
		{r.unitsPerNs(), "a units constant"}, {r.unitsPerToken(), "a units constant"}, {r.burstUnits(), "a units constant"},
		{p + "Cost", "its per-plan costs"},
	}
}

// atName is the tier's function with an explicit time.
func (t tier) atName() string { return t.goName + "At" }

// idents are the package-level identifiers the tier declares; all but the core
// are also methods of Limits.
func (t tier) idents() [][2]string {
	return [][2]string{{t.goName, "its function"}, {t.atName(), "its function with a time"},
		{t.nName(), "its function with a cost"}, {t.nAtName(), "its function with a cost and a time"},
		{t.coreName(), "its implementation"}}
}

// reservedIdents are declared by every generated package (or will be, as the
// generated API grows), whatever the policy: no rule, tier or plan may take them.
var reservedIdents = []string{
	"Plan", "ParsePlan", "ErrUnknownPlan", "TierDecision", "New", "Option", "WithStart", "Limits", "Default",
	"RuleName", "Stats", "numPlans", "planNames", "ruleNames", "options",
}

// folded reports whether the rule's checks get its fixed-point units as
// constants (Bucket/Table.AllowGreedyAt): a greedy rule with one set of numbers.
func (r rule) folded() bool { return !r.planned && r.limits[0].greedy }

// costDiffers reports whether a planned rule's plans have different default
// costs (then the default cost is looked up per plan).
func (r rule) costDiffers() bool {
	for _, l := range r.limits {
		if l.cost != r.limits[0].cost {
			return true
		}
	}
	return false
}

// ruleConst is the rule's RuleName constant.
func (r rule) ruleConst() string { return "Rule" + r.goName }

// The tier's functions (package-level, and methods of Limits): with the rules'
// default costs, with one cost for every rule (N), and each with a time (At).
func (t tier) nName() string    { return t.goName + "N" }
func (t tier) nAtName() string  { return t.goName + "NAt" }
func (t tier) coreName() string { return "check" + t.goName }
