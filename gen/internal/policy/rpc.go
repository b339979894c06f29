package policy

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/gen/internal/model"
	"go.yaml.in/yaml/v3"
)

var (
	grpcFields      = []string{"client_ip", "metadata", "jitter", "log_denials", "missing_key", "plan", "keys", "methods"}
	grpcEntryFields = []string{"method", "service", "rule", "tier", "keys", "cost", "settle", "mode", "messages"}
	messagesFields  = []string{"cost", "count", "on_limit"}
	// grpcMissing are the status codes a call without a key may end with, by
	// the name the policy gives them, and their codes constants.
	grpcMissing = map[string]string{
		"invalid_argument":    "InvalidArgument",
		"unauthenticated":     "Unauthenticated",
		"permission_denied":   "PermissionDenied",
		"failed_precondition": "FailedPrecondition",
	}
)

// grpcSection validates the grpc: section against the rules and tiers: the
// methods and services the generated interceptors check, and where their
// keys, cost and plan come from.
func (p *parser) grpcSection(n *yaml.Node, m *model.Model) *model.GRPC {
	f, _ := p.mapping(n, grpcFields, "the grpc section")
	g := &model.GRPC{Metadata: "MetadataDenials", LogDenials: 10, Missing: "InvalidArgument"}
	p.doorFields(f, "grpc", &g.ClientIP, &g.Jitter, &g.LogDenials)
	if v := f["metadata"]; v != nil {
		switch v.Value {
		case "denials":
		case "all", "ietf":
			g.Metadata = "MetadataAll"
		case "none":
			g.Metadata = "MetadataNone"
		case "lean":
			g.Metadata = "MetadataLean"
		default:
			p.errorf(v, "grpc: metadata %q: use denials (the RateLimit fields in a denial's trailers: the default), all (also in every allowed call's header metadata), none (no fields; a denial keeps RetryInfo and the pushback) or lean (a denial's status and pushback alone)", v.Value)
		}
	}
	if v := f["missing_key"]; v != nil {
		if c, ok := grpcMissing[v.Value]; ok && v.Kind == yaml.ScalarNode {
			g.Missing = c
		} else {
			names := slices.Sorted(func(yield func(string) bool) {
				for k := range grpcMissing {
					if !yield(k) {
						return
					}
				}
			})
			p.errorf(v, "grpc: missing_key %q: the status of a call without a key: one of %s", v.Value, strings.Join(names, ", "))
		}
	}
	var source keySourceFunc
	var defaults map[int][]model.KeySource
	g.Plan, source, defaults = p.doorKeys(f, m, "grpc", "GRPCHooks", &g.Hooks)
	items, ok := p.doorItems(n, f["methods"], "grpc", "methods", "map full method names or services to rules or tiers, such as methods: [{method: /shop.v1.Cart/Checkout, rule: PerUser}, {service: shop.v1.Catalog, tier: API}]")
	if !ok {
		return g
	}
	lines := map[string]int{}
	for i, item := range items {
		if r, ok := p.grpcEntry(item, i+1, m, g, defaults, lines, source); ok {
			g.Routes = append(g.Routes, r)
		}
	}
	p.needPlan(n, f, m, "grpc", "methods", g.Plan, g.Routes)
	return g
}

// grpcName reports why s is not a gRPC name (a package-qualified service,
// or a method): "" when it is one. Each dot-separated part is an identifier,
// as protobuf's are.
func grpcName(s string) string {
	if s == "" {
		return "empty"
	}
	for _, part := range strings.Split(s, ".") {
		if !protoIdent(part) {
			return fmt.Sprintf("%q is not a protobuf identifier", part)
		}
	}
	return ""
}

func protoIdent(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == '_' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// metadataName reports why s is not a gRPC metadata key a policy may read:
// "" when it is one. Keys are lower case on the wire (they are compared as
// such: the policy's are lowered), of digits, letters, -, _ and .; the grpc-
// prefix is gRPC's own, and -bin keys carry bytes, not text.
func metadataName(s string) string {
	low := strings.ToLower(s)
	switch {
	case s == "" || len(s) > 128:
		return "a metadata key is 1 to 128 characters, such as x-tenant"
	case strings.HasPrefix(low, "grpc-"):
		return fmt.Sprintf("%q: keys starting grpc- are gRPC's own", s)
	case strings.HasSuffix(low, "-bin"):
		return fmt.Sprintf("%q: a -bin key holds bytes; read a text key", s)
	case strings.HasPrefix(s, ":"):
		return fmt.Sprintf("%q is a pseudo-header, not metadata", s)
	}
	for i := 0; i < len(low); i++ {
		c := low[i]
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return fmt.Sprintf("%q is not a metadata key (digits, letters, -, _ and . only)", s)
		}
	}
	return ""
}

// grpcEntry validates one entry of grpc: methods; lines holds the entries
// before it (full methods, and services as "pkg.Service/"), by line.
func (p *parser) grpcEntry(n *yaml.Node, ordinal int, m *model.Model, g *model.GRPC, defaults map[int][]model.KeySource,
	lines map[string]int, source func(*yaml.Node, model.Rule, string) (model.KeySource, bool)) (model.Route, bool) {
	f, _ := p.mapping(n, grpcEntryFields, "a grpc method")
	r := model.Route{Ordinal: ordinal, Rule: -1, Tier: -1, Mode: "Enforce"}
	method, service := f["method"], f["service"]
	var at *yaml.Node
	var seen string
	switch {
	case (method == nil) == (service == nil):
		p.errorf(n, "a grpc method entry needs method: (a full method name, such as /shop.v1.Cart/Checkout) or service: (all of a service's methods, such as shop.v1.Cart), one of them")
		return r, false
	case method != nil:
		at = method
		r.Pattern = method.Value
		svc, meth, ok := strings.Cut(strings.TrimPrefix(method.Value, "/"), "/")
		switch {
		case !ok || !strings.HasPrefix(method.Value, "/"):
			p.errorf(method, "grpc: method %q: a full method name is /package.Service/Method, as grpc.UnaryServerInfo.FullMethod writes it", method.Value)
			return r, false
		case grpcName(svc) != "":
			p.errorf(method, "grpc: method %q: service %s", method.Value, grpcName(svc))
			return r, false
		case !protoIdent(meth):
			p.errorf(method, "grpc: method %q: %q is not a method name (a protobuf identifier)", method.Value, meth)
			return r, false
		}
		seen = method.Value
	default:
		at = service
		r.Pattern = service.Value
		if strings.Contains(service.Value, "/") {
			p.errorf(service, "grpc: service %q: a service is package.Service, with no slash; a single method is method: /package.Service/Method", service.Value)
			return r, false
		}
		if msg := grpcName(service.Value); msg != "" {
			p.errorf(service, "grpc: service %q: %s", service.Value, msg)
			return r, false
		}
		seen = service.Value + "/"
	}
	if line, dup := lines[seen]; dup {
		p.errorf(at, "grpc: %q is given twice (first at line %d); one entry decides a call", r.Pattern, line)
		return r, false
	}
	lines[seen] = at.Line
	what := fmt.Sprintf("grpc %s %q", map[bool]string{true: "method", false: "service"}[method != nil], r.Pattern)
	valid, ok := p.target(n, f, m, what, "the calls check", &r)
	if !ok {
		return r, false
	}
	valid = p.routeKeys(at, f, m, &r, what, ordinal, defaults, source, routeKeysOf{
		door: "grpc", unit: "entry",
		missing: func(rule model.Rule, from string) string {
			return "the call has no key for rule " + rule.Name + ": " + what + " reads it from " + from
		},
	}) && valid
	splitSlots(m, &r, func(rule model.Rule) string {
		return fmt.Sprintf("rule %s lets at most %s%s run at once, and that many are running; RetryInfo says when the first of them reaches its longest hold (%s), if none ends sooner",
			rule.Name, count(rule.Limits[0].Tokens, "call"), slotsWhose(rule), time.Duration(rule.Limits[0].PeriodNs))
	})
	if len(r.Rules) == 0 {
		for _, k := range []string{"cost", "messages", "settle"} {
			if v := f[k]; v != nil {
				p.errorf(v, "%s: %s: a call holds one slot while it runs, so %s does not apply", what, slotsOnly(m, r), k)
				valid = false
			}
		}
		r.PolicyLists = policyLists(m, r.Rules)
		return r, valid
	}
	if v := f["cost"]; v != nil {
		valid = p.routeCost(v, &r, m, what, grpcCost) && valid
		if r.CostKind == "metadata" {
			r.CostBody = fmt.Sprintf("the call's declared cost (metadata %s) is above the most a call may cost on %s: %d", r.CostName, what, r.CostMax)
		}
	}
	if v := f["messages"]; v != nil {
		valid = p.grpcMessages(v, &r, m, what) && valid
	}
	if v := f["settle"]; v != nil {
		valid = p.routeSettle(v, f["cost"], &r, m, what, "grpc") && valid
	}
	r.PolicyLists = policyLists(m, r.Rules)
	return r, valid
}

// grpcMessages reads how an entry's streams count their messages:
// {cost: 1, count: received|sent|both, on_limit: end|pace}, each optional
// (cost 1, both, end).
func (p *parser) grpcMessages(n *yaml.Node, r *model.Route, m *model.Model, what string) bool {
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s: messages is a mapping, such as {cost: 1, count: received, on_limit: end}", what)
		return false
	}
	f, _ := p.mapping(n, messagesFields, what+": messages")
	ms := &model.Messages{Cost: 1, Recv: true, Send: true}
	valid := true
	if v := f["cost"]; v != nil {
		c, ok := p.int(v, what, "messages cost", 1)
		if ok && !p.costAdmitted(v, m, r, what, "messages cost", c) {
			ok = false
		}
		ms.Cost, valid = c, ok
	}
	if v := f["count"]; v != nil {
		switch v.Value {
		case "received":
			ms.Send = false
		case "sent":
			ms.Recv = false
		case "both":
		default:
			p.errorf(v, "%s: messages count %q: use received (the client's messages), sent (the server's) or both", what, v.Value)
			valid = false
		}
	}
	if v := f["on_limit"]; v != nil {
		switch v.Value {
		case "end":
		case "pace":
			ms.Pace = true
		default:
			p.errorf(v, "%s: messages on_limit %q: use end (a denied message ends the stream with RESOURCE_EXHAUSTED and RetryInfo) or pace (it waits until its tokens are there)", what, v.Value)
			valid = false
		}
	}
	r.Messages = ms
	return valid
}

// grpcCost reads an entry's declared cost from its call's metadata.
var grpcCost = costFrom{hint: "metadata:name", noun: "call", read: func(kind, name string) (string, string, string) {
	if kind != "metadata" {
		return "", "", "use metadata:name"
	}
	if msg := metadataName(name); msg != "" {
		return "", "", msg
	}
	return kind, strings.ToLower(name), ""
}}

var (
	rlsFields        = []string{"headers", "log_denials", "plan", "domains"}
	rlsDomainFields  = []string{"domain", "descriptors"}
	rlsPatternFields = []string{"entries", "rule", "tier", "keys", "mode", "unlimited", "report"}
)

// maxRLSEntries is the most entries a descriptor pattern may have: what
// limitrls reads of a descriptor by default (DefaultMaxEntries).
const maxRLSEntries = 16

// rlsSection validates the rls: section: the domains Envoy's rate-limit
// service answers, and in each the descriptor patterns that select a rule or
// tier and the entries their keys are read from.
func (p *parser) rlsSection(n *yaml.Node, m *model.Model) *model.RLS {
	f, _ := p.mapping(n, rlsFields, "the rls section")
	p.fieldPolicies(m)
	s := &model.RLS{LogDenials: 10}
	if v := f["headers"]; v != nil {
		switch v.Value {
		case "ietf":
			s.Headers = true
		case "none":
		default:
			p.errorf(v, "rls: headers %q: use ietf (RateLimit-Policy, RateLimit and Retry-After in response_headers_to_add) or none", v.Value)
		}
	}
	if v := f["log_denials"]; v != nil {
		if n, ok := p.int(v, "rls", "log_denials", 0); ok {
			s.LogDenials = n
		}
	}
	if v := f["plan"]; v != nil {
		s.Plan = p.rlsPlan(v, m)
	}
	ds := f["domains"]
	if ds == nil {
		p.errorf(n, "the rls section needs domains: a list of {domain: name, descriptors: [...]}, one for each domain Envoy's rate limit filters name")
		return s
	}
	seen := map[string]int{}
	ordinal := 0
	for _, dn := range p.sequence(ds, "rls: domains") {
		df, _ := p.mapping(dn, rlsDomainFields, "an rls domain")
		name := df["domain"]
		if name == nil || name.Kind != yaml.ScalarNode || name.Value == "" || len(name.Value) > 256 {
			p.errorf(dn, "an rls domain needs domain: its name, as Envoy's rate limit filter sets it (1 to 256 bytes)")
			continue
		}
		if line, dup := seen[name.Value]; dup {
			p.errorf(name, "rls: domain %q is given twice (first at line %d)", name.Value, line)
			continue
		}
		seen[name.Value] = name.Line
		dom := model.RLSDomain{Name: name.Value, First: len(s.Routes)}
		patterns := map[string]int{}
		if df["descriptors"] == nil {
			p.errorf(dn, "rls: domain %q has no descriptors", name.Value)
			continue
		}
		for _, pn := range p.sequence(df["descriptors"], "rls: domain "+name.Value+": descriptors") {
			ordinal++
			r, ok := p.rlsPattern(pn, ordinal, name.Value, m, patterns, s.Plan.Kind != "")
			if ok {
				s.Routes = append(s.Routes, r)
			}
		}
		dom.Count = len(s.Routes) - dom.First
		for i := dom.First; i < dom.First+dom.Count; i++ {
			dom.Match = append(dom.Match, i)
		}
		slices.SortStableFunc(dom.Match, func(a, b int) int { return moreSpecific(s.Routes[a].Entries, s.Routes[b].Entries) })
		s.Domains = append(s.Domains, dom)
	}
	return s
}

// rlsPlan reads the rls section's plan source: {from: entry:KEY, default,
// trusted: true}. The descriptor's entry KEY, wherever it stands, names the
// plan; Envoy builds descriptors from what its route says, a client's header
// among them, so the policy must say that the proxy sets it (trusted).
func (p *parser) rlsPlan(n *yaml.Node, m *model.Model) model.PlanSource {
	var ps model.PlanSource
	if len(m.Plans) == 0 {
		p.errorf(n, "rls: plan given, but the policy declares no plans")
		return ps
	}
	f, _ := p.mapping(n, planSrcFields, "rls: plan")
	names := make([]string, len(m.Plans))
	for i, pl := range m.Plans {
		names[i] = pl.Name
	}
	if d := f["default"]; d == nil {
		p.errorf(n, "rls: plan needs a default (the plan of a descriptor without the entry), such as default: %s", names[0])
	} else if i := slices.Index(names, d.Value); i < 0 {
		p.errorf(d, "rls: plan default %q is not one of the plans (%s)", d.Value, strings.Join(names, ", "))
	} else {
		ps.Default = i
	}
	from := f["from"]
	kind, key := "", ""
	if from != nil {
		kind, key, _ = strings.Cut(from.Value, ":")
	}
	switch {
	case from == nil || kind != "entry" || key == "" || len(key) > 256:
		p.errorf(n, "rls: plan needs from: entry:KEY, the descriptor entry whose value names the plan")
	case f["trusted"] == nil || f["trusted"].Value != "true":
		p.errorf(from, "rls: plan from %s: Envoy may build that entry from a client's header; add trusted: true once the proxy sets it itself", from.Value)
	default:
		ps.Kind, ps.Name = "entry", key
	}
	return ps
}

// moreSpecific orders two patterns as envoyproxy/ratelimit prefers them
// for one descriptor: at the first entry where one fixes the value and the
// other does not, the one that fixes it first (−1), else neither (0).
func moreSpecific(a, b []model.Entry) int {
	for i := range min(len(a), len(b)) {
		switch {
		case a[i].Fixed && !b[i].Fixed:
			return -1
		case !a[i].Fixed && b[i].Fixed:
			return 1
		}
	}
	return 0
}

// rlsPattern validates one descriptor pattern of a domain; patterns holds the
// domain's patterns before it, by line; planned says the section reads a
// plan (its rules may differ by plan).
// count is n of what, in words: "1 call", "4 calls".
func count(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(n, 10) + " " + what + "s"
}

// rlsChecks and httpChecks are what an rls descriptor's and an http route's
// rule or tier checks, in target's messages.
const (
	rlsChecks  = "the descriptors check"
	httpChecks = "the route checks"
)

func (p *parser) rlsPattern(n *yaml.Node, ordinal int, domain string, m *model.Model, patterns map[string]int, planned bool) (model.Route, bool) {
	f, _ := p.mapping(n, rlsPatternFields, "an rls descriptor")
	r := model.Route{Ordinal: ordinal, Rule: -1, Tier: -1, Mode: "Enforce", CostKind: "hits"}
	en := f["entries"]
	if en == nil || en.Kind != yaml.SequenceNode || len(en.Content) == 0 || len(en.Content) > maxRLSEntries {
		p.errorf(n, "an rls descriptor needs entries: the keys of a descriptor's entries in order, 1 to %d, each key (any value) or key=value (that value only), such as [remote_address] or [generic_key=api, user_id]", maxRLSEntries)
		return r, false
	}
	var spelled []string
	for _, e := range en.Content {
		k, v, fixed := strings.Cut(e.Value, "=")
		if e.Kind != yaml.ScalarNode || k == "" || len(k) > 256 || len(v) > 256 || fixed && v == "" {
			p.errorf(e, "rls: domain %q: entry %q: an entry is key or key=value, the key 1 to 256 bytes", domain, e.Value)
			return r, false
		}
		r.Entries = append(r.Entries, model.Entry{Key: k, Value: v, Fixed: fixed})
		spelled = append(spelled, e.Value)
	}
	r.Pattern = domain + ": " + strings.Join(spelled, ", ")
	what := fmt.Sprintf("rls descriptor %q", r.Pattern)
	if line, dup := patterns[strings.Join(spelled, "\x00")]; dup {
		p.errorf(en, "%s is given twice (first at line %d); one pattern decides a descriptor", what, line)
		return r, false
	}
	patterns[strings.Join(spelled, "\x00")] = en.Line
	if u := f["unlimited"]; u != nil {
		// envoyproxy/ratelimit's unlimited: matched (so no less specific
		// pattern decides it) and never limited.
		if u.Value != "true" {
			p.errorf(u, "%s: unlimited is true, or left out", what)
			return r, false
		}
		for _, k := range []string{"rule", "tier", "keys", "mode"} {
			if f[k] != nil {
				p.errorf(f[k], "%s: an unlimited descriptor checks nothing: drop %s", what, k)
				return r, false
			}
		}
		r.Mode, r.Unlimited, r.PolicyLists = "Off", true, []string{""}
		return r, true
	}
	valid, ok := p.target(n, f, m, what, rlsChecks, &r)
	if !ok {
		return r, false
	}
	if rep := f["report"]; rep != nil {
		// Usage reported after the response (Envoy's apply_on_stream_done,
		// hits_addend from the response): charged as debt, always OK.
		switch {
		case rep.Value != "true":
			p.errorf(rep, "%s: report is true, or left out", what)
			return r, false
		case r.Tier >= 0:
			p.errorf(rep, "%s: report: a descriptor reports usage to one rule; name the rule, not tier %q", what, m.Tiers[r.Tier].Name)
			return r, false
		}
		r.Report = true
	}
	keys := map[string]*yaml.Node{}
	if v := f["keys"]; v != nil {
		if v.Kind != yaml.MappingNode {
			p.errorf(v, "%s: keys is a mapping of rule to entry key, such as {PerUser: user_id}", what)
			return r, false
		}
		for i := 0; i+1 < len(v.Content); i += 2 {
			keys[v.Content[i].Value] = v.Content[i+1]
		}
	}
	for _, ri := range r.Rules {
		rule := m.Rules[ri]
		if rule.Planned && !planned {
			p.errorf(n, "%s: rule %q differs by plan, and the rls section reads no plan: add plan: {from: \"entry:plan\", default: ..., trusted: true} to the rls section, or give it rules whose numbers every plan shares", what, rule.Name)
			valid = false
		}
		if rule.KeyType == "" {
			r.Keys = append(r.Keys, nil)
			r.MissingBodies = append(r.MissingBodies, "")
			continue
		}
		if rule.Composite() {
			srcs, ok := p.rlsFieldSources(en, keys[rule.Name], rule, r.Entries, what)
			valid = valid && ok
			var names []string
			for _, s := range srcs {
				names = append(names, s.Name)
			}
			r.Keys = append(r.Keys, srcs)
			r.MissingBodies = append(r.MissingBodies, "the descriptor's entries "+strings.Join(names, ", ")+" hold no key for rule "+rule.Name)
			continue
		}
		idx := -1
		if kn := keys[rule.Name]; kn != nil {
			for i, e := range r.Entries {
				if e.Key == kn.Value && !e.Fixed {
					idx = i
				}
			}
			if idx < 0 {
				p.errorf(kn, "%s: rule %q's key from %q: no entry of that key without a fixed value", what, rule.Name, kn.Value)
				valid = false
				continue
			}
		} else {
			for i, e := range r.Entries {
				if !e.Fixed {
					idx = i // the last entry with any value
				}
			}
			if idx < 0 {
				p.errorf(en, "%s: rule %q is keyed (%s) but every entry has a fixed value; add one that is read, such as user_id", what, rule.Name, rule.KeyType)
				valid = false
				continue
			}
		}
		r.Keys = append(r.Keys, []model.KeySource{{Kind: "entry", Name: r.Entries[idx].Key, Segment: idx}})
		r.MissingBodies = append(r.MissingBodies, "the descriptor's entry "+r.Entries[idx].Key+" holds no key for rule "+rule.Name)
	}
	for name, kn := range keys {
		found := false
		for _, ri := range r.Rules {
			found = found || m.Rules[ri].Name == name
		}
		if !found {
			p.errorf(kn, "%s: keys names rule %q, which the descriptor does not check", what, name)
			valid = false
		}
	}
	r.PolicyLists = policyLists(m, r.Rules)
	return r, valid
}

// rlsFieldSources are the entries a composite key's fields are read from:
// each field from the entry of its name, or the one kn (the descriptor's
// keys: for the rule, {field: entry key, ...}) names; that entry has no
// fixed value.
func (p *parser) rlsFieldSources(en, kn *yaml.Node, rule model.Rule, entries []model.Entry, what string) ([]model.KeySource, bool) {
	named := map[string]*yaml.Node{}
	if kn != nil {
		if kn.Kind != yaml.MappingNode {
			p.errorf(kn, "%s: rule %q has a composite key: map its fields to entry keys, such as {%s: %s_id}", what, rule.Name, rule.Fields[0].Name, rule.Fields[0].Name)
			return nil, false
		}
		for i := 0; i+1 < len(kn.Content); i += 2 {
			k := kn.Content[i]
			if !slices.ContainsFunc(rule.Fields, func(f model.KeyField) bool { return f.Name == k.Value }) {
				p.errorf(k, "%s: rule %q: %q is not a field of its key (its fields: %s)", what, rule.Name, k.Value, fieldNames(rule))
				return nil, false
			}
			named[k.Value] = kn.Content[i+1]
		}
	}
	var srcs []model.KeySource
	valid := true
	for fi, f := range rule.Fields {
		entry, at := f.Name, en
		if v := named[f.Name]; v != nil {
			entry, at = v.Value, v
		}
		idx := slices.IndexFunc(entries, func(e model.Entry) bool { return e.Key == entry && !e.Fixed })
		if idx < 0 {
			p.errorf(at, "%s: rule %q's key field %s is read from entry %q, and the descriptor has no such entry without a fixed value; name its entry with keys: {%s: {%s: ENTRY}}", what, rule.Name, f.Name, entry, rule.Name, f.Name)
			valid = false
			continue
		}
		srcs = append(srcs, model.KeySource{Kind: "entry", Name: entry, Segment: idx, Field: fi})
	}
	return srcs, valid
}
