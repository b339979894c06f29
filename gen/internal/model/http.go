package model

// HTTP is the policy's http: section, validated: what the generated
// Middleware checks for each route, with every header string computed.
type HTTP struct {
	ClientIP   ClientIP
	Headers    string  // the limithttp HeaderStyle constant: HeadersIETF, HeadersLegacy, HeadersNone
	Jitter     float64 // Retry-After jitter, in [0, 1]
	LogDenials int64   // denials logged a second at most; 0: no log
	Missing    int     // the status of a request no key source has a key for
	Challenge  string  // the WWW-Authenticate value of a 401 for a missing key; empty: none
	Plan       PlanSource
	Hooks      []Hook  // the service's functions, in order of first use
	Routes     []Route // in policy order
}

// GRPC is the policy's grpc: section, validated: what the generated
// interceptors check for each method entry. Its Routes' Patterns are full
// method names ("/pkg.Service/Method") or services ("pkg.Service"); their
// key sources are ip, metadata (Name lower case), method, route and func;
// their cost kinds "", "fixed" and "metadata"; their MissingBodies and
// CostBody the status messages.
type GRPC struct {
	ClientIP   ClientIP
	Metadata   string // the limitgrpc MetadataStyle constant: MetadataDenials, MetadataAll or MetadataNone
	Jitter     float64
	LogDenials int64
	Missing    string // the codes constant of a call no key source has a key for
	Plan       PlanSource
	Hooks      []Hook
	Routes     []Route
}

// RLS is the rls: section: the domains and descriptors Envoy's rate-limit
// service answers. Each descriptor pattern is a Route (its Pattern is
// "domain: key, key=value, ..."), in policy order.
type RLS struct {
	Headers    bool // the IETF fields in response_headers_to_add
	LogDenials int64
	Plan       PlanSource // Kind "entry": the descriptor entry whose value names the plan
	Domains    []RLSDomain
	Routes     []Route
}

// RLSDomain is a domain and the descriptor patterns of it: Routes[First :
// First+Count], tried in the order Match lists them (indices into Routes):
// as envoyproxy/ratelimit matches, an entry with a fixed value before one
// with any value, from the first entry on; policy order otherwise.
type RLSDomain struct {
	Name         string
	First, Count int
	Match        []int
}

// Entry is one entry of an RLS descriptor pattern: its key, and the value
// it must have (Fixed), or any value (one a rule's key may be read from).
type Entry struct {
	Key, Value string
	Fixed      bool
}

// ClientIP is clientip.Config's configuration.
type ClientIP struct {
	TrustedProxies []string // canonical CIDR prefixes
	Forwarded      bool     // read Forwarded (RFC 7239), not X-Forwarded-For
	IPv6Prefix     int      // 0: the default
	IPv4Prefix     int      // 0: the default
}

// PlanSource is where a request's plan comes from.
type PlanSource struct {
	Kind    string // "func", "header", "metadata", or "" (every request has the Default plan)
	Name    string // the hook, the canonical header name, or the metadata key
	Default int    // the plan index when the source has none
}

// Hook is a function the service supplies, a field of the generated Hooks.
type Hook struct {
	Name string
	Type string // the key type it returns, or "Plan"
}

// KeySource is one place a rule's key is read from.
type KeySource struct {
	Kind string // ip, header, query, path, pattern, route, func
	Name string // the header (canonical), query parameter, path wildcard or hook
	// path: where the route's pattern holds the wildcard (limithttp.Pattern.Wildcard),
	// read from the path the middleware's router matched.
	Segment int
	Multi   bool
	// Field is the field of a composite key the source gives (0 for a key
	// of one value).
	Field int
}

// Route is one ServeMux pattern and what it checks.
type Route struct {
	Pattern string
	Mode    string        // the verdict Mode constant: Enforce, Shadow, Off
	Ordinal int           // 1-based position in the policy: the key of a route source
	Rule    int           // the rule checked, or −1
	Tier    int           // the tier checked, or −1
	Rules   []int         // the rules checked, in order (the rule, or the tier's)
	Keys    [][]KeySource // per entry of Rules: the sources tried in order (none for a global rule)

	CostKind  string // "", "fixed", "header", "query"
	CostName  string // the header (canonical) or query parameter
	CostFixed int64  // fixed: the cost; header/query: the default
	CostMax   int64  // header/query: the most a request may declare
	// SettleName, when not empty, is the response header (canonical) whose
	// value is the request's actual cost, read when the handler returns
	// (as a header or a trailer): the route's cost is then the estimate
	// its check takes, and the difference is settled (given back or owed).
	SettleName string
	// SettleContext: the actual cost is what the handler reports through
	// its request's context (verdict.ReportCost), instead of a header.
	SettleContext bool
	PolicyLists   []string // the RateLimit-Policy value, per plan (one when no rule checked differs by plan)

	MissingBodies []string // per entry of Rules: the problem body when no source has its key
	CostBody      string   // the problem body when the declared cost is above CostMax
	// Slots are the in-flight rules the route (or entry) acquires, in order
	// (its rule, or its tier's in-flight rules): Rules, Keys and
	// MissingBodies are then its rate rules' only.
	Slots []Slot

	// Entries, for an RLS descriptor pattern: the entries a descriptor must
	// have, in order (its key sources are kind "entry", Segment the index).
	Entries []Entry
	// Unlimited, for an RLS descriptor pattern: it matches and checks
	// nothing (envoyproxy/ratelimit's unlimited: true); Mode is Off.
	Unlimited bool
	// Report, for an RLS descriptor pattern: its descriptors report usage
	// after the response (its one bucket rule is charged hits_addend as
	// debt, atomicbucket.Table.SettleAt from an estimate of 0) and are
	// always answered OK.
	Report bool

	// Messages, for a gRPC entry whose streams' messages are counted: each
	// message's cost, which ones are counted, and whether a denied one waits
	// (pace) or ends the stream. Nil when only a stream's opening is checked.
	Messages *Messages
}

// Slot is an in-flight rule a route acquires: its keys' sources, the answer
// when it has none, and the answer when every slot is held.
type Slot struct {
	Rule    int
	Keys    []KeySource
	Missing string
	Body    string
}

// Messages is how a gRPC entry's streams count their messages.
type Messages struct {
	Cost       int64
	Recv, Send bool
	Pace       bool
}

// Policy is verdict.Policy's values for one rule on one plan.
type Policy struct {
	Name          string
	Quota, Window int64
	Item, Prefix  string
}
