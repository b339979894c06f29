package policy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/limitgen/limitgen/gen/internal/model"
	"go.yaml.in/yaml/v3"
)

var (
	grpcFields      = []string{"client_ip", "metadata", "jitter", "log_denials", "missing_key", "plan", "keys", "methods"}
	grpcEntryFields = []string{"method", "service", "rule", "tier", "keys", "cost", "mode", "messages"}
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
	if v := f["cost"]; v != nil {
		valid = p.routeCost(v, &r, m, what, grpcCost) && valid
		if r.CostKind == "metadata" {
			r.CostBody = fmt.Sprintf("the call's declared cost (metadata %s) is above the most a call may cost on %s: %d", r.CostName, what, r.CostMax)
		}
	}
	if v := f["messages"]; v != nil {
		valid = p.grpcMessages(v, &r, m, what) && valid
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
