package policy

import (
	"fmt"
	"go/token"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/shared"
	"go.yaml.in/yaml/v3"
)

var (
	identRe  = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*$`)
	pkgRe    = regexp.MustCompile(`^[a-z][a-z0-9]*$`)
	keyTypes = []string{"string", "int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "none"}
)

// Limits on what one policy may hold: beyond them the generated package would
// be too large to build or read (10,000 rules once made a 78 MB file the
// compiler could not build in five minutes). Each is far above what a service
// needs; the message says so.
const (
	maxNameLen   = 64   // bytes in a rule, tier, plan or package name
	maxRules     = 256  // rules in a policy
	maxTiers     = 256  // tiers in a policy
	maxTierRules = 32   // rules in one tier
	maxPlans     = 255  // plans: a Plan is a uint8 index, and numPlans must fit one
	maxPlanSets  = 2048 // bucket sets of planned rules (rules with plans: × plans)
	maxMaxKeys   = 1e9  // max_keys: about 100 GB of buckets
)

// names is every package-level identifier the generated package will declare,
// with what declares it, so that two things needing the same identifier are
// refused with a message instead of emitted as code that does not compile.
type names struct {
	p      *parser
	owners map[string]string
}

func newNames(p *parser) *names {
	n := &names{p: p, owners: map[string]string{}}
	for _, id := range model.ReservedIdents {
		n.owners[id] = "every generated package"
	}
	return n
}

// claim takes every identifier in ids for what (at node at), or none of them,
// reporting the first that is taken.
func (n *names) claim(what string, at *yaml.Node, ids [][2]string) bool {
	for _, id := range ids {
		if owner, taken := n.owners[id[0]]; taken {
			n.p.errorf(at, "%s would declare %s (%s), which %s declares; rename one", what, id[0], id[1], owner)
			return false
		}
	}
	for _, id := range ids {
		n.owners[id[0]] = fmt.Sprintf("%s at line %d (%s)", what, at.Line, id[1])
	}
	return true
}

// validate checks the parsed policy's meaning and builds the model. Every
// problem is collected in p.diags.
func (p *parser) validate(doc *policyDoc) *model.Model {
	m := &model.Model{Source: p.file}
	ids := newNames(p)
	if doc.pkg == nil {
		p.errorf(doc.node, "missing field package: the Go package name to generate, such as package: limits")
	} else if v := doc.pkg.Value; len(v) > maxNameLen {
		p.errorf(doc.pkg, "package name is %d bytes long; at most %d", len(v), maxNameLen)
	} else if v := doc.pkg.Value; !pkgRe.MatchString(v) || token.IsKeyword(v) {
		p.errorf(doc.pkg, "package %q is not a Go package name; use lower-case letters and digits, such as limits", v)
	} else if v == "main" {
		p.errorf(doc.pkg, "package main is a program, not a package a service can import; use a name of its own, such as limits")
	} else {
		m.Pkg = v
	}
	p.broken = map[string]bool{}
	m.Plans = p.plans(doc.plans, ids)
	switch {
	case len(doc.rules) == 0:
		p.errorf(doc.node, "no rules: a policy needs at least one rule under rules:")
	case len(doc.rules) > maxRules:
		p.errorf(doc.rules[maxRules].node, "%d rules; a policy may have at most %d (this is rule %d): split the policy into packages", len(doc.rules), maxRules, maxRules+1)
		return m
	}
	given := map[string]int{} // each rule's name, at its first line
	storesClaimed := map[string]bool{}
	for _, rd := range doc.rules {
		if n := rd.fields["name"]; n != nil && n.Kind == yaml.ScalarNode {
			if line, twice := given[n.Value]; twice {
				p.errorf(n, "rule %q given twice, first at line %d; each rule needs a name of its own", n.Value, line)
				continue
			}
			given[n.Value] = n.Line
		}
		r, ok := p.rule(rd, m.Plans)
		if !ok || !ids.claim(fmt.Sprintf("rule %q", r.Name), rd.fields["name"], r.Idents()) {
			if n := rd.fields["name"]; n != nil {
				p.broken[n.Value] = true
			}
			continue
		}
		if r.Store != "" && !storesClaimed[r.Store] {
			storesClaimed[r.Store] = true
			if !ids.claim(fmt.Sprintf("store %q", r.Store), rd.fields["store"], [][2]string{{model.StoreConst(r.Store), "its StoreName constant"}}) {
				continue
			}
		}
		m.Rules = append(m.Rules, r)
	}
	sets := 0
	for _, r := range m.Rules {
		if r.Planned {
			if sets += len(m.Plans); sets > maxPlanSets {
				p.errorf(doc.plans, "%d plans for each of the rules with a plans: section make more than %d bucket sets; use fewer plans, or give fewer rules plans of their own", len(m.Plans), maxPlanSets)
				return m
			}
		}
	}
	if len(doc.tiers) > maxTiers {
		p.errorf(doc.tiers[maxTiers].node, "%d tiers; a policy may have at most %d (this is tier %d)", len(doc.tiers), maxTiers, maxTiers+1)
		return m
	}
	givenTier := map[string]int{}
	for _, td := range doc.tiers {
		if n := td.fields["name"]; n != nil && n.Kind == yaml.ScalarNode {
			if line, twice := givenTier[n.Value]; twice {
				p.errorf(n, "tier %q given twice, first at line %d; each tier needs a name of its own", n.Value, line)
				continue
			}
			givenTier[n.Value] = n.Line
		}
		if t, ok := p.tier(td, m); ok && ids.claim(fmt.Sprintf("tier %q", t.Name), td.fields["name"], t.Idents()) {
			m.Tiers = append(m.Tiers, t)
		}
	}
	shared := 0
	for i := range m.Rules {
		switch r := &m.Rules[i]; {
		case r.Shared && r.IsWindow():
			r.WindowAt = m.SharedWindows
			m.SharedWindows += len(r.Limits)
		case r.Shared && r.IsInFlight():
			r.SlotsAt = m.SharedSlots
			m.SharedSlots += len(r.Limits)
		case r.Shared:
			r.SharedAt = shared
			shared += len(r.Limits)
		}
	}
	m.Shared = shared
	p.namespace(doc, m)
	if doc.http != nil && len(p.diags) == 0 {
		m.HTTP = p.httpSection(doc.http, m)
	}
	if doc.grpc != nil && len(p.diags) == 0 {
		m.GRPC = p.grpcSection(doc.grpc, m)
	}
	if doc.rls != nil && len(p.diags) == 0 {
		m.RLS = p.rlsSection(doc.rls, m)
	}
	routeCosts(m)
	modelDocs(m)
	return m
}

func (p *parser) plans(n *yaml.Node, ids *names) []model.Plan {
	if n == nil {
		return nil
	}
	items := p.sequence(n, "plans")
	if len(items) > maxPlans {
		p.errorf(items[maxPlans], "%d plans; a policy may have at most %d (this is plan %d)", len(items), maxPlans, maxPlans+1)
		return nil
	}
	var out []model.Plan
	for _, item := range items {
		name := item.Value
		switch {
		case item.Kind != yaml.ScalarNode || !identRe.MatchString(name):
			p.errorf(item, "plan %q is not a name; use letters, digits and underscores, starting with a letter", name)
			p.broken["plan "+name] = true
			continue
		case len(name) > maxNameLen:
			p.errorf(item, "plan name is %d bytes long; at most %d", len(name), maxNameLen)
			p.broken["plan "+name] = true
			continue
		case slices.ContainsFunc(out, func(q model.Plan) bool { return q.Name == name }):
			p.errorf(item, "plan %q listed twice", name)
			continue
		}
		pl := model.Plan{Name: name, GoName: "Plan" + camel(name)}
		if ids.claim(fmt.Sprintf("plan %q", name), item, [][2]string{{pl.GoName, "its constant"}}) {
			out = append(out, pl)
		} else {
			p.broken["plan "+name] = true
		}
	}
	return out
}

// camel turns per_user or perUser into PerUser.
func camel(s string) string {
	var b strings.Builder
	up := true
	for _, r := range s {
		if r == '_' {
			up = true
			continue
		}
		if up {
			r = unicode.ToUpper(r)
			up = false
		}
		b.WriteRune(r)
	}
	return b.String()
}

// goName checks a rule or tier name and returns its exported Go identifier.
func (p *parser) goName(n *yaml.Node, what string) (string, bool) {
	if n == nil {
		return "", false
	}
	name := n.Value
	switch {
	case n.Kind != yaml.ScalarNode:
		p.errorf(n, "%s name must be a plain name, not a %s", what, kindName(n.Kind))
	case len(name) > maxNameLen:
		p.errorf(n, "%s name is %d bytes long; at most %d", what, len(name), maxNameLen)
	case !identRe.MatchString(name):
		p.errorf(n, "%s name %q is not an identifier; use letters, digits and underscores, starting with a letter", what, name)
	case token.IsKeyword(name):
		p.errorf(n, "%s name %q is a Go keyword; choose another name", what, name)
	case camel(name) == "Plan":
		p.errorf(n, "%s name %q is reserved for the generated Plan type; choose another name", what, name)
	default:
		return camel(name), true
	}
	return "", false
}

// maxKeyFields is the most fields a composite key has.
const maxKeyFields = 8

// compositeKey reads a key of several fields (key: {tenant: string, user:
// uint64}): its struct's name (the rule's GoName and Key) and its fields.
func (p *parser) compositeKey(n *yaml.Node, r model.Rule, bad func(*yaml.Node, string, ...any)) (string, []model.KeyField) {
	var fields []model.KeyField
	goNames := map[string]string{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		switch {
		case !fieldRe.MatchString(k.Value) || token.IsKeyword(k.Value):
			bad(k, "key field %q: a field's name is lower case letters, digits and underscores, starting with a letter, such as tenant or user_id", k.Value)
			continue
		case camel(k.Value) == "String" || camel(k.Value) == "AppendText":
			bad(k, "key field %q would be the Go field %s, the name of its key's method; choose another name", k.Value, camel(k.Value))
			continue
		case goNames[camel(k.Value)] != "":
			bad(k, "key field %q is the same Go field as %q (%s)", k.Value, goNames[camel(k.Value)], camel(k.Value))
			continue
		case v.Kind != yaml.ScalarNode || v.Value == "none" || !slices.Contains(keyTypes, v.Value):
			bad(v, "key field %q: type %q; a field is string or an integer type such as uint64", k.Value, v.Value)
			continue
		}
		goNames[camel(k.Value)] = k.Value
		fields = append(fields, model.KeyField{Name: k.Value, GoName: camel(k.Value), Type: v.Value})
	}
	switch {
	case len(n.Content) < 4:
		bad(n, "a composite key has two fields or more, such as key: {tenant: string, user: uint64}; a key of one value is key: string")
	case len(n.Content)/2 > maxKeyFields:
		bad(n, "a composite key has at most %d fields, not %d", maxKeyFields, len(n.Content)/2)
	}
	return r.GoName + "Key", fields
}

// fieldRe is a composite key field's name.
var fieldRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

func (p *parser) rule(rd *ruleDoc, plans []model.Plan) (model.Rule, bool) {
	var r model.Rule
	nameNode := rd.fields["name"]
	if nameNode == nil {
		p.errorf(rd.node, "a rule needs a name, such as name: PerUser")
		return r, false
	}
	var ok bool
	if r.GoName, ok = p.goName(nameNode, "rule"); !ok {
		return r, false
	}
	r.Name = nameNode.Value
	what := fmt.Sprintf("rule %q", r.Name)
	valid := true
	bad := func(n *yaml.Node, format string, args ...any) {
		p.errorf(n, what+": "+format, args...)
		valid = false
	}

	r.KeyType = "none"
	if n := rd.fields["key"]; n != nil && n.Kind == yaml.MappingNode {
		r.KeyType, r.Fields = p.compositeKey(n, r, bad)
	} else if n != nil {
		if !slices.Contains(keyTypes, n.Value) {
			if s := didYouMean(n.Value, keyTypes); s != "" {
				bad(n, "key type %q is not supported; did you mean %q? (string, an integer type, or none)", n.Value, s)
			} else {
				bad(n, "key type %q is not supported; use string, an integer type such as int64, or none for a global limit", n.Value)
			}
		}
		r.KeyType = n.Value
	}
	if r.KeyType == "none" {
		r.KeyType = ""
	}

	base, baseOK := p.limit(rd.fields, rd.keys, rd.node, what, nil)
	valid = valid && baseOK
	r.Cost = base.Cost
	if !base.InFlight {
		if n := rd.keys["wait"]; n != nil && baseOK {
			bad(n, "wait applies to an in-flight rule (in_flight:, max_hold:): how long a request waits for a free slot; a rate rule's wait is the caller's (Wait, Reserve)")
		}
	}

	if n := rd.fields["max_keys"]; n != nil {
		v, ok := p.int(n, what, "max_keys", 1)
		switch {
		case !ok:
			valid = false
		case r.KeyType == "":
			bad(n, "max_keys needs keys: a rule without key: is one global bucket")
		case v > maxMaxKeys:
			bad(n, "max_keys %d is beyond what one process can hold (a key's bucket takes about 100 bytes: a billion keys, 100 GB); at most %d", v, int64(maxMaxKeys))
		default:
			r.MaxKeys = v
		}
	}
	if n := rd.fields["at_cap"]; n != nil {
		switch {
		case n.Value != "deny" && n.Value != "allow":
			bad(n, "at_cap %q: use deny (refuse new keys at the cap) or allow (admit them untracked)", n.Value)
		case rd.fields["max_keys"] == nil:
			bad(n, "at_cap applies only with max_keys")
		default:
			r.AllowCap = n.Value == "allow"
		}
	}

	if n := rd.fields["shared"]; n != nil {
		switch n.Value {
		case "true":
			r.Shared = true
		case "false":
		default:
			bad(n, "shared %q: true (enforced by the store given to New, across instances) or false", n.Value)
		}
	}
	r.Failure = "FailDeny"
	if n := rd.fields["on_failure"]; n != nil {
		modes := map[string]string{"deny": "FailDeny", "allow": "FailAllow", "local": "FailLocal"}
		switch m, ok := modes[n.Value]; {
		case !r.Shared:
			bad(n, "on_failure applies only to a shared rule (shared: true)")
		case !ok:
			bad(n, "on_failure %q: deny (refuse while the store cannot decide), allow, or local (a share of the limit in each instance)", n.Value)
		default:
			r.Failure = m
		}
	}
	shareOf := "the rate and burst"
	switch {
	case base.Window:
		shareOf = "the limit"
	case base.InFlight:
		shareOf = "the slots"
	}
	if n := rd.fields["local_share"]; n != nil {
		v, err := strconv.ParseFloat(n.Value, 64)
		switch {
		case r.Failure != "FailLocal":
			bad(n, "local_share applies only with on_failure: local")
		case err != nil || !(v > 0 && v <= 1):
			bad(n, "local_share %q: the share of %s each instance takes alone, in (0, 1], such as 0.25 for four instances", n.Value, shareOf)
		default:
			r.Share = v
		}
	} else if r.Failure == "FailLocal" {
		bad(rd.fields["on_failure"], "on_failure: local needs local_share: the share of %s each instance takes alone, such as 0.25 for four instances", shareOf)
	}

	if n := rd.fields["store"]; n != nil {
		switch {
		case !r.Shared:
			bad(n, "store applies only to a shared rule (shared: true): it names the store the rule is checked on")
		case !storeNameRe.MatchString(n.Value):
			bad(n, "store %q: a store's name is lower case letters, digits and _, starting with a letter, at most 32 (such as billing)", n.Value)
		default:
			r.Store = n.Value
		}
	}

	if n := rd.fields["lease"]; n != nil {
		v, ok := p.int(n, what, "lease", 1)
		switch {
		case !ok:
			valid = false
		case !r.Shared:
			bad(n, "lease applies only to a shared rule (shared: true): instances take batches of its tokens from the store")
		default:
			r.Lease = v
		}
	}

	switch {
	case len(rd.plans) > 0 && len(plans) == 0:
		bad(rd.fields["plans"], "plans given, but the policy declares none; list them at the top: plans: [free, pro]")
	case len(rd.plans) == 0:
		// No numbers of its own per plan: one bucket set shared by every plan (a
		// global limit stays global whatever the caller's plan).
		r.Limits = []model.Limit{base}
	default:
		r.Planned = true
		r.Limits = make([]model.Limit, len(plans))
		for i := range r.Limits {
			r.Limits[i] = base
		}
		names := make([]string, len(plans))
		for i, pl := range plans {
			names[i] = pl.Name
		}
		given := map[string]bool{}
		for _, pd := range rd.plans {
			i := slices.Index(names, pd.name.Value)
			if i < 0 && p.broken["plan "+pd.name.Value] {
				valid = false // the plan's own mistake is reported where it is declared
				continue
			}
			if i < 0 {
				msg := fmt.Sprintf("plan %q is not declared under plans: (%s)", pd.name.Value, strings.Join(names, ", "))
				if s := didYouMean(pd.name.Value, names); s != "" {
					msg += fmt.Sprintf("; did you mean %q?", s)
				}
				bad(pd.name, "%s", msg)
				continue
			}
			if given[pd.name.Value] {
				bad(pd.name, "plan %q given twice", pd.name.Value)
				continue
			}
			given[pd.name.Value] = true
			if _, burst := pd.fields["burst"]; !burst {
				for _, f := range []string{"rate", "tokens_per_second", "rps"} {
					if n := pd.fields[f]; n != nil {
						bad(pd.keys[f], "plan %q sets %s but not burst, so the rule's burst (%d) would stay while the rate changes; give the plan's burst too (burst: %d keeps it)",
							pd.name.Value, f, base.Burst, base.Burst)
						break
					}
				}
			}
			l, ok := p.limit(pd.fields, pd.keys, pd.name, what+" plan "+strconv.Quote(pd.name.Value), &base)
			valid = valid && ok
			r.Limits[i] = l
		}
	}
	if base.Window && baseOK && r.Shared {
		if wr := base.WindowRule(); !wr.Exact() && wr.Grain()%time.Microsecond != 0 {
			bad(rd.fields["window"], "a shared window over more than %d units is counted on the store in sixteenths of whole microseconds: give a window that is a multiple of 16µs, not %v",
				atomicwindow.RingMax, time.Duration(base.PeriodNs))
		}
	}
	if r.Share > 0 && baseOK {
		p.localShare(rd.fields["local_share"], r, bad)
	}
	if r.Lease > 0 {
		most := int64(0)
		for _, l := range r.Limits {
			most = max(most, l.Burst)
		}
		least := int64(math.MaxInt64)
		for _, l := range r.Limits {
			least = min(least, l.Tokens)
		}
		switch {
		case base.InFlight && r.Lease > least:
			bad(rd.fields["lease"], "lease %d is more than the slots (%d): an instance leases at most every slot of a key, on every plan; give lease: %d or less", r.Lease, least, least)
		case base.InFlight:
		case r.Lease > most && base.Window:
			bad(rd.fields["lease"], "lease %d is more than the limit (%d): a lease takes at most the limit, so it would never be what it says; give lease: %d or less", r.Lease, most, most)
		case r.Lease > most:
			bad(rd.fields["lease"], "lease %d is more than the burst (%d): a lease takes at most the burst, so it would never be what it says; give lease: %d or less", r.Lease, most, most)
		}
	}
	if !valid {
		return r, false
	}
	if r.Shared && !r.IsWindow() && !r.IsInFlight() {
		// A store on a microsecond clock must hold it in integers below 2^53
		// (the units stores compute with shared.MicroUnits); the generated
		// code carries the units, and stores check them at Bind.
		r.Units = make([]shared.Units, len(r.Limits))
		for i, l := range r.Limits {
			u, err := shared.MicroUnits(l.Atomic())
			if err != nil {
				on := ""
				if r.Planned {
					on = fmt.Sprintf(" (plan %q)", plans[i].Name)
				}
				bad(rd.fields["shared"], "shared: true%s: %v", on, err)
				return r, false
			}
			r.Units[i] = u
		}
	}
	r.Doc = ruleDoc_(r, plans)
	return r, true
}

func (p *parser) tier(td *tierDoc, m *model.Model) (model.Tier, bool) {
	var t model.Tier
	var ok bool
	if t.GoName, ok = p.goName(td.fields["name"], "tier"); !ok {
		if td.fields["name"] == nil {
			p.errorf(td.node, "a tier needs a name, such as name: API")
		}
		return t, false
	}
	t.Name = td.fields["name"].Value
	list := td.fields["rules"]
	if list == nil {
		p.errorf(td.node, "tier %q: no rules; list the rules a request must pass together, such as rules: [PerUser, Global]", t.Name)
		return t, false
	}
	names := make([]string, len(m.Rules))
	for i, r := range m.Rules {
		names[i] = r.Name
	}
	valid := true
	waits := "" // the tier's in-flight rule that waits for a slot
	items := p.sequence(list, "a tier's rules")
	if len(items) > maxTierRules {
		p.errorf(items[maxTierRules], "tier %q names %d rules; a tier may have at most %d", t.Name, len(items), maxTierRules)
		return t, false
	}
	for _, n := range items {
		i := slices.Index(names, n.Value)
		switch {
		case i < 0 && p.broken[n.Value]:
			valid = false // the rule's own mistake is reported where it is
		case i < 0:
			msg := fmt.Sprintf("tier %q: no rule named %q", t.Name, n.Value)
			if s := didYouMean(n.Value, names); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			p.errorf(n, "%s", msg)
			valid = false
		case slices.Contains(t.Rules, i) || slices.Contains(t.Slots, i):
			p.errorf(n, "tier %q names rule %q twice; a request passes each rule once", t.Name, n.Value)
			valid = false
		case m.Rules[i].IsInFlight() && len(t.Slots) == atomicslot.MaxSet:
			p.errorf(n, "tier %q names more than %d in-flight rules; a request holds at most %d slots of a tier", t.Name, atomicslot.MaxSet, atomicslot.MaxSet)
			valid = false
		case m.Rules[i].IsInFlight() && m.Rules[i].Waits() && waits != "":
			p.errorf(n, "tier %q: in-flight rules %q and %q both wait for a slot; a tier may have one rule that waits (its slot is taken first, so that nothing is held while it waits): drop one's wait", t.Name, waits, n.Value)
			valid = false
		case m.Rules[i].IsInFlight() && m.Rules[i].Waits(): // taken first: its wait holds nothing of the tier
			t.Slots, waits = append([]int{i}, t.Slots...), n.Value
		case m.Rules[i].IsInFlight(): // its slot is taken first, given back when a rate rule denies
			t.Slots = append(t.Slots, i)
		default:
			t.Rules = append(t.Rules, i)
		}
	}
	if !valid || len(t.Rules)+len(t.Slots) == 0 {
		if valid {
			p.errorf(list, "tier %q: no rules; list at least one", t.Name)
		}
		return t, false
	}
	for _, ri := range t.Rules {
		if m.Rules[ri].Shared {
			t.Shared = true
		} else {
			t.Local = true
		}
	}
	var firstShared *model.Rule
	for k, ri := range t.Rules {
		r := m.Rules[ri]
		if !r.Shared || r.IsWindow() { // a shared window is a call of its own
			continue
		}
		if firstShared == nil {
			firstShared = &m.Rules[ri]
			continue
		}
		if (r.Lease > 0) != (firstShared.Lease > 0) {
			leased, perRequest := firstShared.Name, r.Name
			if firstShared.Lease == 0 {
				leased, perRequest = perRequest, leased
			}
			p.errorf(items[k], "tier %q mixes leased and per-request rules (%q has a lease, %q not); a tier's shared rules are all leased or none",
				t.Name, leased, perRequest)
			return t, false
		}
	}
	t.Doc = tierDoc_(t, m)
	return t, true
}

// storeNameRe is a store's name (a rule's store:), which becomes part of a Go
// identifier (StoreBilling).
var storeNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,31}$`)

// Load reads the policy file at path and compiles it (Compile), naming it
// name in its messages.
func Load(path, name string) (*model.Model, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Compile(name, raw)
}

// Compile parses and validates a policy (its file name, for messages, and its
// bytes) into the model emission prints. The error is a Diags listing every
// problem found, each at its position.
func Compile(name string, raw []byte) (*model.Model, error) {
	p := &parser{file: name}
	doc := p.parse(raw)
	if doc == nil {
		return nil, p.diags
	}
	m := p.validate(doc)
	if len(p.diags) > 0 {
		return nil, p.diags
	}
	return m, nil
}

// namespace checks the policy's namespace: required when a rule is shared,
// so that two services' rules of one name never meet in a store.
func (p *parser) namespace(doc *policyDoc, m *model.Model) {
	if n := doc.ns; n != nil {
		if err := shared.CheckNamespace(n.Value); err != nil {
			p.errorf(n, "%v, such as billing", err)
			return
		}
		m.Namespace = n.Value
		return
	}
	if m.Stores() {
		var names []string
		for _, r := range m.Rules {
			if r.Shared {
				names = append(names, r.Name)
			}
		}
		p.errorf(doc.node, "shared rules (%s) need a namespace: add namespace: with your service's name (such as namespace: billing), part of every store key, so that another service's rule of the same name never shares their buckets", strings.Join(names, ", "))
	}
}

// routeCosts gives each rule the most one request of its HTTP routes and gRPC
// method entries may cost on each plan, as the policy admits it: a route's
// fixed cost, or its declared max (a gRPC entry's counted message cost
// too), at most the plan's burst (above which the door answers too costly
// anyway). Envoy's descriptors are left out: their hits_addend is the
// proxy's, with no max of the policy's.
func routeCosts(m *model.Model) {
	var routes []model.Route
	if m.HTTP != nil {
		routes = append(routes, m.HTTP.Routes...)
	}
	if m.GRPC != nil {
		routes = append(routes, m.GRPC.Routes...)
	}
	for _, rt := range routes {
		if rt.Mode == "Off" {
			continue
		}
		var c int64
		switch rt.CostKind {
		case "fixed":
			c = rt.CostFixed
		case "header", "query", "metadata":
			c = rt.CostMax
		}
		if rt.Messages != nil {
			c = max(c, rt.Messages.Cost)
		}
		for _, ri := range rt.Rules {
			r := &m.Rules[ri]
			for j, l := range r.Limits {
				v := min(c, l.Burst)
				if v <= max(l.Cost, 1) {
					continue
				}
				if r.RouteCost == nil {
					r.RouteCost, r.RouteCostOf = make([]int64, len(r.Limits)), make([]string, len(r.Limits))
				}
				if v > r.RouteCost[j] {
					r.RouteCost[j], r.RouteCostOf[j] = v, rt.Pattern
				}
			}
		}
	}
}
