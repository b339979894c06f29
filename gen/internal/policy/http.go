package policy

import (
	"fmt"
	"go/token"
	"math/big"
	"net/http"
	"net/netip"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/limithttp"
	"github.com/limitgen/limitgen/verdict"
	"go.yaml.in/yaml/v3"
)

var (
	httpFields     = []string{"client_ip", "headers", "jitter", "log_denials", "missing_key", "plan", "keys", "routes"}
	clientIPFields = []string{"trusted_proxies", "header", "ipv6_prefix", "ipv4_prefix"}
	planSrcFields  = []string{"from", "trusted", "default"}
	routeFields    = []string{"pattern", "rule", "tier", "keys", "cost", "settle", "mode"}
	// httpMethods are the methods a route's pattern may name: RFC 9110's, PATCH
	// (RFC 5789), QUERY, and WebDAV's (RFC 4918, 3253, 5323). A pattern with
	// another, such as GETT, would never match the request it was meant for.
	httpMethods = []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE", "QUERY",
		"PROPFIND", "PROPPATCH", "MKCOL", "COPY", "MOVE", "LOCK", "UNLOCK", "REPORT", "SEARCH"}
	costFields = []string{"from", "default", "max"}
)

// maxRoutes bounds the routes of an http: section (a route's ordinal is the key
// of a route source, and the middleware switches over their patterns).
const maxRoutes = 256

// httpSection validates the http: section against the rules and tiers.
func (p *parser) httpSection(n *yaml.Node, m *model.Model) *model.HTTP {
	f, _ := p.mapping(n, httpFields, "the http section")
	h := &model.HTTP{Headers: "HeadersIETF", LogDenials: 10, Missing: http.StatusBadRequest}
	p.doorFields(f, "http", &h.ClientIP, &h.Jitter, &h.LogDenials)
	if v := f["headers"]; v != nil {
		styles := map[string]string{"ietf": "HeadersIETF", "legacy": "HeadersLegacy", "none": "HeadersNone"}
		if s, ok := styles[v.Value]; ok {
			h.Headers = s
		} else {
			p.errorf(v, "http: headers %q: use ietf (RateLimit-Policy and RateLimit), legacy (those and X-RateLimit-*) or none", v.Value)
		}
	}
	if v := f["missing_key"]; v != nil {
		p.missingKey(v, h)
	}
	var source keySourceFunc
	var defaults map[int][]model.KeySource
	h.Plan, source, defaults = p.doorKeys(f, m, "http", "Hooks", &h.Hooks)
	items, ok := p.doorItems(n, f["routes"], "http", "routes", "map ServeMux patterns to rules or tiers, such as routes: [{pattern: \"POST /v1/upload\", rule: Upload}]")
	if !ok {
		return h
	}
	mux, lines := http.NewServeMux(), map[string]int{}
	for i, item := range items {
		if r, ok := p.route(item, i+1, m, h, defaults, mux, lines, source); ok {
			h.Routes = append(h.Routes, r)
		}
	}
	p.needPlan(n, f, m, "http", "routes", h.Plan, h.Routes)
	return h
}

// doorFields validates the fields every door's section has: client_ip,
// jitter and log_denials.
func (p *parser) doorFields(f map[string]*yaml.Node, door string, ip *model.ClientIP, jitter *float64, logDenials *int64) {
	if c := f["client_ip"]; c != nil {
		*ip = p.clientIP(c, door)
	}
	if v := f["jitter"]; v != nil {
		j, err := strconv.ParseFloat(v.Value, 64)
		if err != nil || v.Kind != yaml.ScalarNode || !(j >= 0 && j <= 1) {
			p.errorf(v, "%s: jitter %q: a fraction of the wait from 0 to 1, such as 0.5", door, v.Value)
		} else {
			*jitter = j
		}
	}
	if v := f["log_denials"]; v != nil {
		if n, ok := p.int(v, door, "log_denials", 0); ok {
			*logDenials = n
		}
	}
}

// needPlan reports a door whose entries check planned rules with no plan
// source to choose the plan by.
func (p *parser) needPlan(n *yaml.Node, f map[string]*yaml.Node, m *model.Model, door, entries string, plan model.PlanSource, routes []model.Route) {
	if plan.Kind != "" || f["plan"] != nil {
		return
	}
	for _, r := range routes {
		for _, ri := range r.Rules {
			if m.Rules[ri].Planned {
				p.errorf(n, "%s: %s check rules whose numbers differ by plan, but no plan source is given; add plan: {from: func:PlanOf, default: %s}", door, entries, m.Plans[0].Name)
				return
			}
		}
	}
}

type hookUse struct {
	typ  string
	line int
}

// hookSet returns the function that adds a func: source's hook to list, a
// field of the generated struct typ: each name has one type.
func (p *parser) hookSet(door, typ string, list *[]model.Hook) func(at *yaml.Node, name, typ string) bool {
	hooks := map[string]*hookUse{}
	return func(at *yaml.Node, name, t string) bool {
		if u, ok := hooks[name]; ok {
			if u.typ != t {
				p.errorf(at, "%s: func:%s returns %s here but %s at line %d; a hook has one type, use two names", door, name, goType(t), goType(u.typ), u.line)
				return false
			}
			return true
		}
		if !identRe.MatchString(name) || token.IsKeyword(name) || !token.IsExported(name) {
			p.errorf(at, "%s: func:%s: a hook's name is an exported Go identifier (a field of the generated %s), such as func:UserID", door, name, typ)
			return false
		}
		hooks[name] = &hookUse{typ: t, line: at.Line}
		*list = append(*list, model.Hook{Name: name, Type: t})
		return true
	}
}

// fieldPolicies computes, once for both front doors, every rule's
// RateLimit description and default cost per limit (m.Fields, m.Costs).
func (p *parser) fieldPolicies(m *model.Model) {
	if m.Fields != nil {
		return
	}
	m.Fields, m.Costs = make([][]model.Policy, len(m.Rules)), make([][]int64, len(m.Rules))
	for i, r := range m.Rules {
		if r.IsInFlight() {
			continue // no door checks one (target refuses it): no fields to describe
		}
		for _, l := range r.Limits {
			pol, err := verdict.NewPolicy(r.Name, l.FieldLimit())
			if err != nil {
				p.errorf(nil, "rule %q: %v", r.Name, err)
				continue
			}
			m.Fields[i] = append(m.Fields[i], model.Policy{Name: pol.Name, Quota: pol.Quota, Window: pol.Window,
				Item: pol.Item, Prefix: pol.Prefix})
			m.Costs[i] = append(m.Costs[i], l.Cost)
		}
	}
}

func goType(t string) string {
	if t == "Plan" {
		return "a Plan"
	}
	return "a " + t + " key"
}

func (p *parser) clientIP(n *yaml.Node, door string) model.ClientIP {
	f, _ := p.mapping(n, clientIPFields, door+": client_ip")
	var c model.ClientIP
	if v := f["trusted_proxies"]; v != nil {
		var nets []netip.Prefix
		defer func() {
			if fam := coversAll(nets); fam != "" {
				p.errorf(v, "%s: trusted_proxies trust every %s address: any client could then send X-Forwarded-For (or Forwarded) and pick its own ip key; list only your proxies' networks (a load balancer's subnet, such as 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16 or fc00::/7 for private ones)", door, fam)
			}
		}()
		for _, item := range p.sequence(v, "http: client_ip: trusted_proxies") {
			pfx, err := netip.ParsePrefix(item.Value)
			if err != nil {
				if a, aerr := netip.ParseAddr(item.Value); aerr == nil {
					pfx, err = a.Prefix(a.BitLen())
				}
			}
			switch {
			case err != nil:
				p.errorf(item, door+": trusted proxy %q is not a network or an address, such as 10.0.0.0/8 or 2001:db8::/32", item.Value)
			case pfx.Addr().Is4In6():
				p.errorf(item, door+": trusted proxy %q is an IPv4-mapped network; write it as IPv4 (requests are keyed by unmapped addresses)", item.Value)
			case tooWide(pfx):
				nets = append(nets, pfx.Masked()) // and, with others, perhaps every address (coversAll)
				p.errorf(item, door+": trusted proxy %q spans public addresses far beyond any proxy fleet: any client inside it could send X-Forwarded-For (or Forwarded) and pick its own ip key; list your proxies' networks (public ones at most a /%d of IPv4 or a /%d of IPv6; private ones such as 10.0.0.0/8 or fc00::/7 may be wider)", item.Value, widestPublic4, widestPublic6)
			default:
				c.TrustedProxies = append(c.TrustedProxies, pfx.Masked().String())
				nets = append(nets, pfx.Masked())
			}
		}
	}
	if v := f["header"]; v != nil {
		switch strings.ToLower(v.Value) {
		case "x-forwarded-for":
		case "forwarded":
			c.Forwarded = true
		default:
			p.errorf(v, door+": client_ip header %q: use x-forwarded-for or forwarded (RFC 7239)", v.Value)
		}
	}
	bits := func(field string, most int) int {
		v := f[field]
		if v == nil {
			return 0
		}
		b, err := strconv.Atoi(v.Value)
		if err != nil || b < 1 || b > most {
			p.errorf(v, door+": client_ip %s %q: a prefix length from 1 to %d", field, v.Value, most)
			return 0
		}
		return b
	}
	c.IPv6Prefix, c.IPv4Prefix = bits("ipv6_prefix", 128), bits("ipv4_prefix", 32)
	return c
}

// The widest trusted network of public addresses a policy may list: wider
// ones (0.0.0.0/1 … /7; 2000::/3, the whole of global unicast IPv6, … /31)
// hold clients, not a service's proxies. Every IPv4 prefix shorter than /8
// holds public addresses; an IPv6 one is checked against 2000::/3.
const (
	widestPublic4 = 8
	widestPublic6 = 32
)

// globalUnicast is IPv6's global unicast space (RFC 4291): its public
// addresses.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// tooWide reports whether pfx is a network of public addresses wider than a
// proxy fleet's (widestPublic4, widestPublic6).
func tooWide(pfx netip.Prefix) bool {
	if pfx.Addr().Is4() {
		return pfx.Bits() < widestPublic4
	}
	return pfx.Bits() < widestPublic6 && pfx.Overlaps(globalUnicast)
}

// coversAll is "IPv4" or "IPv6" when nets together hold every address of that
// family (0.0.0.0/0, or 0.0.0.0/1 with 128.0.0.0/1, ...), "" otherwise. Two
// prefixes are nested or disjoint, so the family is covered when the outermost
// ones add up to its whole space.
func coversAll(nets []netip.Prefix) string {
	for _, fam := range []struct {
		name string
		bits int
	}{{"IPv4", 32}, {"IPv6", 128}} {
		var outer []netip.Prefix
		for _, n := range nets {
			if n.Addr().BitLen() != fam.bits || slices.Contains(outer, n) {
				continue
			}
			inside := false
			for _, o := range nets {
				inside = inside || o.Bits() < n.Bits() && o.Contains(n.Addr())
			}
			if !inside {
				outer = append(outer, n)
			}
		}
		total, whole := new(big.Int), new(big.Int).Lsh(big.NewInt(1), uint(fam.bits))
		for _, n := range outer {
			total.Add(total, new(big.Int).Lsh(big.NewInt(1), uint(fam.bits-n.Bits())))
		}
		if total.Cmp(whole) >= 0 {
			return fam.name
		}
	}
	return ""
}

func (p *parser) planSource(n *yaml.Node, m *model.Model, door string, addHook func(*yaml.Node, string, string) bool) model.PlanSource {
	var ps model.PlanSource
	hdr := "header" // where a trusted upstream can set it
	if door == "grpc" {
		hdr = "metadata"
	}
	if len(m.Plans) == 0 {
		p.errorf(n, "%s: plan given, but the policy declares no plans", door)
		return ps
	}
	f, _ := p.mapping(n, planSrcFields, door+": plan")
	names := make([]string, len(m.Plans))
	for i, pl := range m.Plans {
		names[i] = pl.Name
	}
	if d := f["default"]; d == nil {
		p.errorf(n, door+": plan needs a default (the plan of a request the source has none for), such as default: %s", names[0])
	} else if i := slices.Index(names, d.Value); i < 0 {
		p.errorf(d, door+": plan default %q is not one of the plans (%s)", d.Value, strings.Join(names, ", "))
	} else {
		ps.Default = i
	}
	from := f["from"]
	if from == nil {
		p.errorf(n, "%s: plan needs from: func:Name (your auth decides) or %s:Name with trusted: true", door, hdr)
		return ps
	}
	kind, name, _ := strings.Cut(from.Value, ":")
	switch kind {
	case "func":
		if addHook(from, name, "Plan") {
			ps.Kind, ps.Name = "func", name
		}
	case "header", "metadata":
		if kind != hdr {
			p.errorf(from, "%s: plan from %q: use func:Name or %s:Name", door, from.Value, hdr)
			return ps
		}
		t := f["trusted"]
		if t == nil || t.Value != "true" {
			p.errorf(from, "%s: plan from %s: a client can send any plan in %s; take it from func:Name, or add trusted: true if only a trusted upstream sets it", door, from.Value, map[string]string{"header": "a header", "metadata": "metadata"}[hdr])
			return ps
		}
		if kind == "metadata" {
			if msg := metadataName(name); msg != "" {
				p.errorf(from, "%s: plan from %s: %s", door, from.Value, msg)
				return ps
			}
			ps.Kind, ps.Name = kind, strings.ToLower(name)
			break
		}
		if !validHeaderName(name) {
			p.errorf(from, door+": plan from %s: %q is not a header name", from.Value, name)
			return ps
		}
		ps.Kind, ps.Name = "header", http.CanonicalHeaderKey(name)
	default:
		p.errorf(from, "%s: plan from %q: use func:Name or %s:Name", door, from.Value, hdr)
	}
	return ps
}

// keyMap reads a mapping from rule names to key-source lists.
func (p *parser) keyMap(n *yaml.Node, m *model.Model, what string, source func(*yaml.Node, model.Rule, string) (model.KeySource, bool)) map[int][]model.KeySource {
	out := map[int][]model.KeySource{}
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "%s must map rule names to key sources, such as PerUser: [func:UserID, ip]", what)
		return out
	}
	names := make([]string, len(m.Rules))
	for i, r := range m.Rules {
		names[i] = r.Name
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		ri := slices.Index(names, k.Value)
		if ri < 0 {
			msg := fmt.Sprintf("%s: no rule named %q", what, k.Value)
			if s := didYouMean(k.Value, names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			p.errorf(k, "%s", msg)
			continue
		}
		r := m.Rules[ri]
		if r.KeyType == "" {
			p.errorf(k, "%s: rule %q has no key (it is one global bucket); it needs no key source", what, r.Name)
			continue
		}
		if _, dup := out[ri]; dup {
			p.errorf(k, "%s: rule %q given twice", what, r.Name)
			continue
		}
		if r.Composite() {
			out[ri] = p.fieldSources(v, r, what, source)
			continue
		}
		list := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			list = v.Content
		}
		if len(list) == 0 {
			p.errorf(v, "%s: rule %q: no key sources", what, r.Name)
			continue
		}
		var srcs []model.KeySource
		for _, s := range list {
			if src, ok := source(s, r, what); ok {
				srcs = append(srcs, src)
			}
		}
		out[ri] = srcs
	}
	return out
}

// fieldSources reads the key sources of a rule with a composite key: a
// source (or a list, the first that gives one) for each of its fields, such
// as {tenant: header:X-Tenant, user: func:UserID}. Each field must have
// one; nil when any is refused (each with its reason).
func (p *parser) fieldSources(v *yaml.Node, r model.Rule, what string, source func(*yaml.Node, model.Rule, string) (model.KeySource, bool)) []model.KeySource {
	if v.Kind != yaml.MappingNode {
		p.errorf(v, "%s: rule %q has a composite key: map each of its fields to its source, such as {%s: ...}", what, r.Name, r.Fields[0].Name)
		return nil
	}
	var srcs []model.KeySource
	given := map[string]bool{}
	valid := true
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, fv := v.Content[i], v.Content[i+1]
		fi := slices.IndexFunc(r.Fields, func(f model.KeyField) bool { return f.Name == k.Value })
		if fi < 0 || given[k.Value] {
			p.errorf(k, "%s: rule %q: %q is not a field of its key, or given twice (its fields: %s)", what, r.Name, k.Value, fieldNames(r))
			valid = false
			continue
		}
		given[k.Value] = true
		fr := r
		fr.KeyType, fr.Fields = r.Fields[fi].Type, nil // the field, as a key of one value
		list := []*yaml.Node{fv}
		if fv.Kind == yaml.SequenceNode {
			list = fv.Content
		}
		if len(list) == 0 {
			p.errorf(fv, "%s: rule %q: field %s: no key sources", what, r.Name, k.Value)
			valid = false
		}
		for _, s := range list {
			src, ok := source(s, fr, what)
			valid = valid && ok
			src.Field = fi
			srcs = append(srcs, src)
		}
	}
	for _, f := range r.Fields {
		if !given[f.Name] {
			p.errorf(v, "%s: rule %q: field %s of its key has no source", what, r.Name, f.Name)
			valid = false
		}
	}
	if !valid {
		return nil
	}
	return srcs
}

// fieldNames lists a composite key's fields, for errors.
func fieldNames(r model.Rule) string {
	var names []string
	for _, f := range r.Fields {
		names = append(names, f.Name)
	}
	return strings.Join(names, ", ")
}

// validHeaderName reports whether s is an HTTP field name (an RFC 9110 token).
func validHeaderName(s string) bool {
	if s == "" || len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// route validates one route; mux holds the routes before it, so that a
// pattern that does not parse or conflicts with an earlier one is refused
// with net/http's own reason.
func (p *parser) route(n *yaml.Node, ordinal int, m *model.Model, h *model.HTTP, defaults map[int][]model.KeySource,
	mux *http.ServeMux, lines map[string]int, source func(*yaml.Node, model.Rule, string) (model.KeySource, bool)) (model.Route, bool) {
	f, _ := p.mapping(n, routeFields, "a route")
	r := model.Route{Ordinal: ordinal, Rule: -1, Tier: -1, Mode: "Enforce"}
	pat := f["pattern"]
	if pat == nil {
		p.errorf(n, "a route needs a pattern, as http.ServeMux writes them, such as pattern: \"POST /v1/upload\"")
		return r, false
	}
	r.Pattern = pat.Value
	what := fmt.Sprintf("route %q", r.Pattern)
	if method, _, found := strings.Cut(strings.TrimLeft(r.Pattern, " \t"), " "); found && !strings.Contains(method, "/") && !slices.Contains(httpMethods, method) {
		msg := fmt.Sprintf("%s: %q is not an HTTP method, so the route would match no request", what, method)
		if s := didYouMean(strings.ToUpper(method), httpMethods); s != "" {
			msg += fmt.Sprintf("; did you mean %q? (methods are case-sensitive)", s)
		} else {
			msg += "; use GET, HEAD, POST, PUT, PATCH, DELETE, OPTIONS (or another method net/http knows), or no method for all of them"
		}
		p.errorf(pat, "%s", msg)
		return r, false
	}
	if msg := registerPattern(mux, r.Pattern, pat.Line, lines); msg != "" {
		p.errorf(pat, "%s: %s", what, msg)
		return r, false
	}
	valid, ok := p.target(n, f, m, what, httpChecks, &r)
	if !ok {
		return r, false
	}
	pp, _ := limithttp.ParsePattern(r.Pattern) // registerPattern reported it when it does not parse
	valid = p.routeKeys(pat, f, m, &r, what, ordinal, defaults, source, routeKeysOf{
		door: "http", unit: "route",
		check: func(rule model.Rule, s model.KeySource) bool {
			if i, _ := pp.Wildcard(s.Name); s.Kind == "path" && i < 0 {
				p.errorf(pat, "%s: rule %q reads path:%s, but the pattern has no wildcard {%s}", what, rule.Name, s.Name, s.Name)
				return false
			}
			return true
		},
		adapt: func(srcs []model.KeySource) []model.KeySource {
			srcs = slices.Clone(srcs) // the route's own: its path sources' segments are its pattern's
			for i, s := range srcs {
				if s.Kind == "path" {
					srcs[i].Segment, srcs[i].Multi = pp.Wildcard(s.Name)
				}
			}
			return srcs
		},
		missing: func(rule model.Rule, from string) string {
			return limithttp.ProblemBody("about:blank", http.StatusText(h.Missing), h.Missing,
				"The request has no key for rule "+rule.Name+": "+what+" reads it from "+from+".", "")
		},
	}) && valid
	splitSlots(m, &r, func(rule model.Rule) string {
		return limithttp.ProblemBody("about:blank", http.StatusText(http.StatusTooManyRequests), http.StatusTooManyRequests,
			fmt.Sprintf("Rule %s lets at most %s%s run at once, and that many are running; Retry-After is when the first of them reaches its longest hold (%s) if none ends sooner.",
				rule.Name, count(rule.Limits[0].Tokens, "request"), slotsWhose(rule), time.Duration(rule.Limits[0].PeriodNs)), "")
	})
	if v := f["cost"]; v != nil && len(r.Rules) == 0 {
		p.errorf(v, "%s: %s: a request holds one slot while it runs, so a route has no cost for it", what, slotsOnly(m, r))
		valid = false
	} else if v != nil {
		valid = p.routeCost(v, &r, m, what, httpCost) && valid
	}
	if v := f["settle"]; v != nil && len(r.Rules) == 0 {
		p.errorf(v, "%s: %s: a request holds one slot while it runs, so there is no cost to settle", what, slotsOnly(m, r))
		valid = false
	} else if v != nil {
		valid = p.routeSettle(v, f["cost"], &r, m, what, "http") && valid
	}
	r.PolicyLists = policyLists(m, r.Rules)
	if r.CostKind == "header" || r.CostKind == "query" {
		r.CostBody = limithttp.ProblemBody("about:blank", "Bad Request", http.StatusBadRequest,
			fmt.Sprintf("The request's declared cost (%s %s) is above the most a request may cost on %s: %d.", r.CostKind, r.CostName, what, r.CostMax), "")
	}
	return r, valid
}

// missingKey reads missing_key: the status of a request without a key (a
// 4xx), alone or as {status, challenge}: the WWW-Authenticate value a 401
// carries (RFC 9110 requires one), by default "Bearer".
func (p *parser) missingKey(v *yaml.Node, h *model.HTTP) {
	status, challenge := v, (*yaml.Node)(nil)
	if v.Kind == yaml.MappingNode {
		f, _ := p.mapping(v, []string{"status", "challenge"}, "missing_key")
		if status = f["status"]; status == nil {
			p.errorf(v, "http: missing_key needs status:, a 4xx such as 400 or 401")
			return
		}
		challenge = f["challenge"]
	}
	s, err := strconv.Atoi(status.Value)
	if err != nil || s < 400 || s > 499 || status.Kind != yaml.ScalarNode {
		p.errorf(status, "http: missing_key %q: the status of a request without a key must be a 4xx, such as 400 or 401", status.Value)
		return
	}
	h.Missing = s
	switch {
	case challenge == nil && s == http.StatusUnauthorized:
		h.Challenge = "Bearer"
	case challenge == nil:
	case s != http.StatusUnauthorized:
		p.errorf(challenge, "http: missing_key: a challenge (WWW-Authenticate) goes with status 401 only")
	case challenge.Kind != yaml.ScalarNode || !validChallenge(challenge.Value):
		p.errorf(challenge, "http: missing_key: challenge %q is not a WWW-Authenticate value: an auth scheme and its parameters in printable ASCII, such as 'Bearer realm=\"api\"'", challenge.Value)
	default:
		h.Challenge = challenge.Value
	}
}

// validChallenge reports whether v can be a WWW-Authenticate field value: a
// scheme (a token) first, then printable ASCII.
func validChallenge(v string) bool {
	if v == "" || len(v) > 256 {
		return false
	}
	scheme, _, _ := strings.Cut(v, " ")
	for _, c := range scheme {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("!#$%&'*+-.^_`|~", c)) {
			return false
		}
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// routeFits reports whether a route number fits an integer key type.
func routeFits(ordinal int, keyType string) bool {
	switch keyType {
	case "int8":
		return ordinal <= 127
	case "uint8":
		return ordinal <= 255
	}
	return true
}

// registerPattern registers pattern (from the policy's line) on mux and
// returns net/http's reason when it does not parse or conflicts with one
// registered before ("" when it is fine). ServeMux reports both by panicking;
// a conflict's message names the Go source lines that registered each pattern,
// which are replaced by the policy line of the route it conflicts with (lines
// maps the patterns registered so far to theirs).
func registerPattern(mux *http.ServeMux, pattern string, line int, lines map[string]int) (msg string) {
	defer func() {
		e := recover()
		if e == nil {
			lines[pattern] = line
			return
		}
		msg = strings.TrimPrefix(fmt.Sprint(e), "parsing \""+pattern+"\": ")
		msg = registeredAt.ReplaceAllString(msg, "")
		if m := conflictRe.FindStringSubmatch(msg); m != nil {
			msg = fmt.Sprintf("pattern %q conflicts with the route at line %d: %s", pattern, lines[m[1]], strings.TrimSpace(m[2]))
		}
		msg = strings.ReplaceAll(msg, "\n", ": ")
	}()
	mux.Handle(pattern, http.NotFoundHandler())
	return ""
}

var (
	registeredAt = regexp.MustCompile(` \(registered at [^)]*\)`)
	conflictRe   = regexp.MustCompile(`(?s)^pattern ".*?" conflicts with pattern "(.*?)":(.*)$`)
)

// target reads what an entry (a route, a gRPC method entry) checks: its
// rule: or tier: (checks says what, in the message when neither is given), into r's Rule or Tier and Rules, and its mode:. ok is
// false when the entry checks nothing it can name (reported); valid is false
// when another field of it was refused.
func (p *parser) target(n *yaml.Node, f map[string]*yaml.Node, m *model.Model, what, checks string, r *model.Route) (valid, ok bool) {
	switch rule, tier := f["rule"], f["tier"]; {
	case (rule == nil) == (tier == nil):
		p.errorf(n, "%s: give either rule: or tier: (what %s)", what, checks)
		return false, false
	case rule != nil:
		for i, x := range m.Rules {
			if x.Name == rule.Value {
				r.Rule, r.Rules = i, []int{i}
			}
		}
		if r.Rule < 0 {
			p.errorf(rule, "%s: no rule named %q", what, rule.Value)
			return false, false
		}
		if m.Rules[r.Rule].IsInFlight() && checks == rlsChecks {
			p.errorf(rule, "%s: rule %q is an in-flight rule: Envoy's rate-limit protocol has no call for a request's end, so a slot could never be released", what, rule.Value)
			return false, false
		}
	default:
		for i, x := range m.Tiers {
			if x.Name == tier.Value {
				r.Tier, r.Rules = i, append(slices.Clone(x.Rules), x.Slots...) // the slots split off with their keys (splitSlots)
			}
		}
		if r.Tier < 0 {
			p.errorf(tier, "%s: no tier named %q", what, tier.Value)
			return false, false
		}
		if t := m.Tiers[r.Tier]; len(t.Slots) > 0 && checks == rlsChecks {
			p.errorf(tier, "%s: tier %q has an in-flight rule (%s): Envoy's rate-limit protocol has no call for a request's end, so a slot could never be released", what, tier.Value, m.Rules[t.Slots[0]].Name)
			return false, false
		}
	}
	if v := f["mode"]; v != nil {
		modes := map[string]string{"enforce": "Enforce", "shadow": "Shadow", "off": "Off"}
		s, known := modes[v.Value]
		if !known {
			p.errorf(v, "%s: mode %q: use enforce, shadow (decide and report, never deny) or off", what, v.Value)
			return false, true
		}
		r.Mode = s
	}
	return true, true
}

// splitSlots moves the in-flight rules of r.Rules (its rule's, or its tier's)
// to r.Slots, each with its keys, its missing-key answer and body(rule), the
// answer when every slot is held: what is left are the rate rules.
func splitSlots(m *model.Model, r *model.Route, body func(model.Rule) string) {
	var rules []int
	var keys [][]model.KeySource
	var missing []string
	for j, ri := range r.Rules {
		var k []model.KeySource
		var miss string
		if j < len(r.Keys) {
			k = r.Keys[j]
		}
		if j < len(r.MissingBodies) {
			miss = r.MissingBodies[j]
		}
		if m.Rules[ri].IsInFlight() {
			r.Slots = append(r.Slots, model.Slot{Rule: ri, Keys: k, Missing: miss, Body: body(m.Rules[ri])})
			continue
		}
		rules, keys, missing = append(rules, ri), append(keys, k), append(missing, miss)
	}
	if len(r.Slots) > 0 {
		r.Rules, r.Keys, r.MissingBodies = rules, keys, missing
	}
}

// slotsWhose is how a slot's answer names whose requests it counts: " of a
// key", or nothing for a global rule.
func slotsWhose(rule model.Rule) string {
	if rule.KeyType == "" {
		return ""
	}
	return " of a key"
}

// slotsOnly names what a route of in-flight rules only checks, for its
// errors: the rule, or the tier.
func slotsOnly(m *model.Model, r model.Route) string {
	if r.Tier >= 0 {
		return fmt.Sprintf("tier %q has in-flight rules only", m.Tiers[r.Tier].Name)
	}
	return fmt.Sprintf("rule %q is an in-flight rule", m.Rules[r.Rule].Name)
}

// policyLists is the RateLimit-Policy value of an entry checking rules, per
// plan (one when none of them differs by plan).
func policyLists(m *model.Model, rules []int) []string {
	planned := false
	for _, ri := range rules {
		planned = planned || m.Rules[ri].Planned
	}
	lists := 1
	if planned {
		lists = len(m.Plans)
	}
	var out []string
	for pl := range lists {
		var items []string
		for _, ri := range rules {
			if pols := m.Fields[ri]; len(pols) > 0 {
				items = append(items, pols[min(pl, len(pols)-1)].Item)
			}
		}
		out = append(out, strings.Join(items, ", "))
	}
	return out
}
