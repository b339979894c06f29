// Package model is what the generator's steps hand each other: plain structs
// whose fields are final values (numbers computed exactly, names decided,
// doc prose written). Package policy builds a Model from a policy file and
// checks it; package emit prints it and decides nothing. The naming methods
// below are the one place each generated identifier's name is chosen, so that
// policy can refuse collisions before emit prints them.
package model

import (
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/shared"
)

type Model struct {
	Source    string // the policy file's name, as given
	Pkg       string
	Namespace string // the namespace: field: part of every store key of the shared rules
	Plans     []Plan
	Rules     []Rule
	Tiers     []Tier
	HTTP      *HTTP // the http: section; nil when there is none
	GRPC      *GRPC // the grpc: section; nil when there is none
	RLS       *RLS  // the rls: section (Envoy's rate-limit service); nil when there is none
	// Fields and Costs are, with a front door (HTTP or GRPC), every rule's
	// RateLimit description and default cost, one per Limit (per plan when
	// planned).
	Fields [][]Policy
	Costs  [][]int64
	Shared int // the number of shared limits (a shared bucket rule's, one per plan when planned)
	// SharedWindows is the number of shared window rules (each one's
	// WindowAt indexes them).
	SharedWindows int
	// SharedSlots is the number of shared in-flight rules (each one's
	// SlotsAt indexes them).
	SharedSlots int
	Doc         string // the package's doc comment
	LimitsDoc   string // the Limits type's doc comment
}

// Stores reports whether the package has shared rules of any kind: it then
// takes a store (WithStore) and says how it fares (SharedErr).
func (m *Model) Stores() bool { return m.Shared > 0 || m.SharedWindows > 0 || m.SharedSlots > 0 }

// StoreNames are the stores the policy's rules name (store:), sorted.
func (m *Model) StoreNames() []string {
	var names []string
	for _, r := range m.Rules {
		if r.Store != "" && !slices.Contains(names, r.Store) {
			names = append(names, r.Store)
		}
	}
	slices.Sort(names)
	return names
}

// StoreConst is the Go name of the constant naming store name: StoreBilling.
func StoreConst(name string) string {
	var b strings.Builder
	b.WriteString("Store")
	up := true
	for _, c := range name {
		switch {
		case c == '_':
			up = true
		case up:
			b.WriteString(strings.ToUpper(string(c)))
			up = false
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

type Plan struct {
	Name   string // as written
	GoName string // the constant: Plan + CamelCase(name)
}

type Rule struct {
	Name     string     // as written in the policy
	GoName   string     // exported Go identifier
	KeyType  string     // Go type of the key; "" for a global (single-bucket) rule; a composite key's struct (GoName+"Key")
	Fields   []KeyField // a composite key's fields, in order (two or more); nil for a key of one value
	Planned  bool       // the rule has its own numbers per plan, and a bucket set per plan
	Limits   []Limit    // one, or one per plan (in the order of model.plans) when planned
	Cost     int64      // default cost of Allow
	MaxKeys  int64      // 0: no cap
	AllowCap bool       // at the cap: allow untracked (else deny)
	Shared   bool       // enforced by the store given to New (package shared), across instances
	// InForce: a door reads the rule's numbers in force for its fields
	// (the emitted ruleInForce); set by emit before it renders.
	InForce  bool
	Store    string         // the name of the store a shared rule is on (store:); "" the default store
	Failure  string         // shared: the shared.FailureMode constant deciding when the store cannot
	Share    float64        // shared, FailLocal: the local share of the rate and burst
	Lease    int64          // shared: checked from leases of at most this many tokens a batch (0: a store call per check)
	Units    []shared.Units // shared: each limit's units on a store's µs clock (shared.MicroUnits; zero for interval refill)
	SharedAt int            // shared: the index of its first limit in the package's sharedRules
	WindowAt int            // a shared window: its index in the package's shared windows
	SlotsAt  int            // a shared in-flight rule: its index in the package's shared slots
	// RouteCost is, per entry of Limits, the most one request of the rule's
	// HTTP routes and gRPC method entries may cost on that plan as the
	// policy admits it (a route's fixed cost, or its declared max, at most
	// the plan's burst), and RouteCostOf the route that may; 0 and "" when
	// no route costs more than the rule's default. Numbers given at run
	// time with a smaller burst are refused, naming the route.
	RouteCost   []int64
	RouteCostOf []string
	Doc         string // the package-level variable's doc comment: the rule in plain words
	TypeDoc     string // the limiter type's doc comment
	LocalDoc    string // shared: the process-local limiter type's doc comment
	FieldDoc    string // the Limits field's line comment
	UnitsDoc    string // the folded units' doc comment (folded rules only)
}

// KeyField is one field of a composite key.
type KeyField struct {
	Name   string // as written (tenant)
	GoName string // the struct field (Tenant)
	Type   string // string or an integer type
}

// Composite reports whether the rule's key has several fields (a struct).
func (r Rule) Composite() bool { return len(r.Fields) > 0 }

// FieldType is the type of field i of the rule's key: the key's type for a
// key of one value.
func (r Rule) FieldType(i int) string {
	if r.Composite() {
		return r.Fields[i].Type
	}
	return r.KeyType
}

// Limit is one bucket's numbers: the rule's, or one per plan when the policy
// has plans (in the order of model.plans). A window rule's limit (Window)
// is at most Tokens cost units in any interval of PeriodNs, its Burst
// Tokens too (the most one request may cost), and has no units.
type Limit struct {
	Window bool
	// InFlight: an in-flight rule's limit, at most Tokens (and Burst)
	// slots of a key held at once, each for at most PeriodNs; it has no
	// units and no cost.
	InFlight   bool
	WaitNs     int64 // an in-flight rule's wait: for a free slot (0: none)
	Tokens     int64
	PeriodNs   int64
	Burst      int64
	Initial    int64
	InitialSet bool
	Interval   bool
	Aligned    bool
	Cost       int64 // the default cost under this limit

	// The fixed-point units NewRule computes for a greedy limit (see
	// atomicbucket.Rule.Units), emitted as constants; greedy is false for
	// interval limits, which have none.
	Scale, Emit, Tau int64
	Greedy           bool
}

type Tier struct {
	Name   string
	GoName string
	Rules  []int // indices into model.rules, in order: its rate rules (buckets, windows)
	// Slots are its in-flight rules, in order: a request takes each one's
	// slot before the rate rules are checked, and gives them back when one
	// cannot be had or a rate rule denies (all or nothing).
	Slots []int
	// Shared is set when a rule is shared: the tier's forms take a context
	// and call the store (one call for its shared rules), and the forms that
	// decide in this process only are named Local…. Local is set when a rule
	// is local; both: a mixed tier, whose local rules are decided around the
	// store call (emitSharedTier).
	Shared, Local bool
	Doc           string
}

// The identifiers a rule or tier adds to the generated package, decided here
// so that validation can refuse a policy whose names collide before emission
// prints them.

// TypeName is the rule's limiter type.
func (r Rule) TypeName() string { return r.GoName + "Limiter" }

// CtorName is the function that builds the rule's limiter.
func (r Rule) CtorName() string { return "new" + r.TypeName() }

// LocalTypeName is a shared rule's process-local limiter type (what its
// Local method returns: the rule's whole limit, decided in this process), and
// LocalCtorName the function that builds its buckets.
func (r Rule) LocalTypeName() string { return r.GoName + "LocalLimiter" }
func (r Rule) LocalCtorName() string { return "new" + r.LocalTypeName() }

// Unexported is the prefix of the rule's Unexported package-level names: its
// folded units and per-plan costs (Cost).
func (r Rule) Unexported() string { return LowerFirst(r.GoName) }

// The folded units' constants (see atomicbucket.Rule.Units): the units one
// nanosecond is worth (scale), the units one token is worth (GCRA's emission
// interval), and the units a bucket may run ahead of now (the burst's worth:
// GCRA's tolerance).
func (r Rule) UnitsPerNs() string    { return r.Unexported() + "UnitsPerNs" }
func (r Rule) UnitsPerToken() string { return r.Unexported() + "UnitsPerToken" }
func (r Rule) BurstUnits() string    { return r.Unexported() + "BurstUnits" }

// LimitVar is the variable that holds the rule's limit as the policy gives
// it (an array by plan for a planned rule): emitted once, read by its
// buckets, its RateLimit fields and its store.
func (r Rule) LimitVar() string { return r.Unexported() + "Limit" }

// Idents are the package-level identifiers the rule declares, with what each
// is. Its variable's name is also a field of Limits.
func (r Rule) Idents() [][2]string {
	p := r.Unexported()
	var key [][2]string
	if r.Composite() {
		key = [][2]string{{r.KeyType, "its key type"}, {"Parse" + r.KeyType, "its key's parser"}}
	}
	return append(key, [][2]string{
		{r.GoName, "its limiter variable"}, {r.TypeName(), "its limiter type"}, {r.CtorName(), "its constructor"},
		{r.LocalTypeName(), "its process-local limiter type"}, {r.LocalCtorName(), "its process-local constructor"},
		{r.RuleConst(), "its RuleName constant"},
		{r.UnitsPerNs(), "a units constant"}, {r.UnitsPerToken(), "a units constant"}, {r.BurstUnits(), "a units constant"},
		{p + "Cost", "its per-plan costs"}, {r.LimitVar(), "its limit"},
	}...)
}

// AtName is the tier's function with an explicit time.
func (t Tier) AtName() string { return t.GoName + "At" }

// Idents are the package-level identifiers the tier declares; all but the
// cores are also methods of Limits. A tier of shared rules declares its
// process-local forms (Local…, methods of Limits only) whatever the policy, so
// that a rule changing to shared never collides with a name.
func (t Tier) Idents() [][2]string {
	return [][2]string{{t.GoName, "its function"}, {t.AtName(), "its function with a time"},
		{t.NName(), "its function with a cost"}, {t.NAtName(), "its function with a cost and a time"},
		{t.CoreName(), "its implementation"}, {t.SharedCoreName(), "its store check's implementation"},
		{t.LocalName(), "its process-local form"}, {t.LocalNName(), "its process-local form with a cost"},
		{t.LocalAtName(), "its process-local form with a time"}, {t.LocalNAtName(), "its process-local form with a cost and a time"}}
}

// A tier of shared rules: GoName and NName take a context and go to the
// store (the At forms do not exist: the store's clock decides); the
// process-local forms are named Local… and the store call's implementation
// SharedCoreName.
func (t Tier) LocalName() string      { return "Local" + t.GoName }
func (t Tier) LocalNName() string     { return "Local" + t.NName() }
func (t Tier) LocalAtName() string    { return "Local" + t.AtName() }
func (t Tier) LocalNAtName() string   { return "Local" + t.NAtName() }
func (t Tier) SharedCoreName() string { return "checkShared" + t.GoName }

// ReservedIdents are declared by every generated package (or will be, as the
// generated API grows), whatever the policy: no rule, tier or plan may take them.
var ReservedIdents = []string{
	"Plan", "ParsePlan", "ErrUnknownPlan", "TierDecision", "New", "Option", "WithStart", "Limits", "Default",
	"RuleName", "Stats", "numPlans", "planNames", "ruleNames", "options", "numbers", "newNumbers", "Numbers",
	"Middleware", "NewMiddleware", "Hooks", "ServeMux", "NewServeMux", "httpPolicies", "httpCosts", "httpRoutes", "httpPatterns",
	"GRPC", "NewGRPC", "GRPCHooks", "grpcRoutes", "grpcSeries", "grpcMethod", "grpcService", "grpcEntries",
	"WithStore", "sharedRules", "sharedState", "newSharedState", "TierResult", "SharedErr", "StoreName", "WithStoreFor",
}

// Folded reports whether the rule's checks get its fixed-point units as
// constants (Bucket/Table.AllowGreedyAt): a greedy rule with one set of numbers.
func (r Rule) Folded() bool { return !r.Planned && r.Limits[0].Greedy }

// CostDiffers reports whether a planned rule's plans have different default
// costs (then the default cost is looked up per plan).
func (r Rule) CostDiffers() bool {
	for _, l := range r.Limits {
		if l.Cost != r.Limits[0].Cost {
			return true
		}
	}
	return false
}

// RuleConst is the rule's RuleName constant.
func (r Rule) RuleConst() string { return "Rule" + r.GoName }

// The tier's functions (package-level, and methods of Limits): with the rules'
// default costs, with one cost for every rule (N), and each with a time (At).
func (t Tier) NName() string    { return t.GoName + "N" }
func (t Tier) NAtName() string  { return t.GoName + "NAt" }
func (t Tier) CoreName() string { return "check" + t.GoName }

// WindowRule is a window limit as the runtime takes it.
func (l Limit) WindowRule() atomicwindow.Rule {
	if !l.Window {
		panic("model: WindowRule of a token bucket's limit")
	}
	return atomicwindow.MustRule(l.Tokens, time.Duration(l.PeriodNs))
}

// FieldLimit is the limit the RateLimit fields describe: a bucket's own, or
// for a window the interval bucket with its numbers (q is the limit, w the
// window; a wait it implies is never shorter than the window's).
func (l Limit) FieldLimit() atomicbucket.Limit {
	if l.Window {
		return atomicbucket.Limit{Tokens: l.Tokens, Period: time.Duration(l.PeriodNs), Burst: l.Tokens, Refill: atomicbucket.Interval}
	}
	return l.Atomic()
}

// IsWindow reports whether the rule is a window rule (at most N in any
// interval of W) rather than a token bucket.
func (r Rule) IsWindow() bool { return r.Limits[0].Window }

// Waits reports whether the rule is an in-flight rule that waits for a
// slot (on some plan).
func (r Rule) Waits() bool {
	for _, l := range r.Limits {
		if l.WaitNs > 0 {
			return true
		}
	}
	return false
}

// IsInFlight reports whether the rule is an in-flight rule (at most N of a
// key's requests at once).
func (r Rule) IsInFlight() bool { return r.Limits[0].InFlight }

// Atomic is the limit as the runtime takes it: a token bucket's (a window's
// or an in-flight rule's has none, and asking is a bug in the generator).
func (l Limit) Atomic() atomicbucket.Limit {
	if l.Window || l.InFlight {
		panic("model: Atomic of a window's or an in-flight rule's limit")
	}
	refill := atomicbucket.Greedy
	if l.Interval {
		refill = atomicbucket.Interval
	}
	return atomicbucket.Limit{Tokens: l.Tokens, Period: time.Duration(l.PeriodNs), Burst: l.Burst,
		Refill: refill, Aligned: l.Aligned, Initial: l.Initial, InitialSet: l.InitialSet}
}

// LowerFirst turns PerUser into perUser.
func LowerFirst(s string) string {
	r := []rune(s)
	r[0] = unicode.ToLower(r[0])
	return string(r)
}
