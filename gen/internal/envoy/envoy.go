package envoy

// gen envoy: envoyproxy/ratelimit's configuration, translated into a policy.
//
// envoyproxy/ratelimit reads a file a domain: descriptors of a key and
// an optional value, nested, each leaf with a rate_limit of
// requests_per_unit a unit (a fixed window), or unlimited. A descriptor
// without a value limits each value apart; with one, that value only. It
// keeps every count in Redis, so that all its instances share each limit.
//
// The translation makes a rule for each limited leaf: a window rule of
// requests_per_unit in any interval of a unit, sliding (it never admits
// more in a unit than the fixed window admits in one window, and never the
// double a fixed window admits across its edge), shared through the store
// the service is given (namespace from the domain) and denying while that
// store cannot decide, so that Envoy's failure_mode_deny decides as it does
// for envoyproxy/ratelimit; -local keeps the rules in each process. Each is
// keyed by the entries without a value (several: a composite key, a field
// each, at most 8), and an rls: pattern of the leaf's path checks it; an
// unlimited leaf is a pattern that matches and limits nothing. What a policy
// cannot say is refused with its line: replaces, wildcard values, a
// descriptor given twice.

import (
	"fmt"
	"go/token"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"

	"github.com/limitgen/limitgen/gen/internal/cli"
	"github.com/limitgen/limitgen/gen/internal/policy"
	"go.yaml.in/yaml/v3"
)

// envoyUnits are envoyproxy/ratelimit's units as the policy's periods: its
// weeks, months and years are 7, 30 and 365 days.
var envoyUnits = map[string]string{
	"second": "1s", "minute": "1m", "hour": "1h", "day": "24h",
	"week": "168h", "month": "720h", "year": "8760h",
}

// envoyRule is one translated leaf: its rule and its pattern.
type envoyRule struct {
	name    string   // the rule's name; "" for an unlimited leaf
	keyFrom []string // the entry keys the rule's key is read from: none, one, or a composite key's fields
	limit   int64    // requests_per_unit; 0 for an unlimited leaf
	window  string   // the unit, as a policy period
	entries []string
	shadow  bool
	line    int
	notes   []string
}

// envoyDomain is one file's domain and its leaves.
type envoyDomain struct {
	name  string
	file  string
	rules []envoyRule
}

// envoyError is a refusal, with its place.
type envoyError struct {
	file      string
	line, col int
	msg       string
}

func (e envoyError) Error() string { return fmt.Sprintf("%s:%d:%d: %s", e.file, e.line, e.col, e.msg) }

// envoy is `gen envoy`.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("gen envoy", stderr,
		"usage: gen envoy [-package limits] [-namespace ns] [-local] [-o policy.yaml] config.yaml...",
		"Translates envoyproxy/ratelimit configuration files (a domain each) into a policy with an rls: section:",
		"a window rule of requests_per_unit in any interval of a unit a limited descriptor, shared by every",
		"instance through the service's store as envoyproxy/ratelimit's Redis shares it, unless -local.",
	)
	pkg := fs.String("package", "limits", "the policy's package")
	out := fs.String("o", "", "the policy file to write (standard output when empty)")
	local := fs.Bool("local", false, "keep each rule in each process's memory (each instance admits the whole limit) instead of sharing it through a store")
	namespace := fs.String("namespace", "", "the shared rules' namespace, part of every store key (default: from the domains)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	var domains []envoyDomain
	failed := false
	for _, path := range fs.Args() {
		raw, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(stderr, err)
			return 1
		}
		d, errs := translateEnvoy(path, raw)
		for _, e := range errs {
			fmt.Fprintln(stderr, e)
			failed = true
		}
		domains = append(domains, d)
	}
	if failed {
		return 1
	}
	opts := envoyOptions{pkg: *pkg, shared: !*local, namespace: *namespace}
	if opts.shared && opts.namespace == "" {
		opts.namespace = namespaceOf(domains)
	}
	src, err := envoyPolicy(opts, domains)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if _, err := policy.Compile("translated", src); err != nil { // what was translated must be a valid policy
		fmt.Fprintf(stderr, "gen envoy: the translation is not a valid policy (a bug in gen envoy):\n%v\n", err)
		return 1
	}
	if *out == "" {
		stdout.Write(src) //nolint:errcheck // standard output
		return 0
	}
	if err := os.WriteFile(*out, src, 0o644); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// translateEnvoy reads one envoyproxy/ratelimit file.
func translateEnvoy(file string, raw []byte) (envoyDomain, []error) {
	d := envoyDomain{file: file}
	var root yaml.Node
	if err := yaml.Unmarshal(raw, &root); err != nil {
		return d, []error{fmt.Errorf("%s: %v", file, err)}
	}
	var errs []error
	bad := func(n *yaml.Node, format string, args ...any) {
		errs = append(errs, envoyError{file, n.Line, n.Column, fmt.Sprintf(format, args...)})
	}
	if len(root.Content) == 0 || root.Content[0].Kind != yaml.MappingNode {
		return d, []error{fmt.Errorf("%s: an envoyproxy/ratelimit configuration is a mapping with domain and descriptors", file)}
	}
	top := fieldsOf(root.Content[0])
	for k, v := range top {
		if k != "domain" && k != "descriptors" {
			bad(v.key, "unknown field %q; envoyproxy/ratelimit's files have domain and descriptors", k)
		}
	}
	dn := top["domain"]
	if dn == nil || dn.val.Value == "" {
		bad(root.Content[0], "the file names no domain")
		return d, errs
	}
	d.name = dn.val.Value
	ds := top["descriptors"]
	if ds == nil || ds.val.Kind != yaml.SequenceNode {
		bad(root.Content[0], "domain %q has no descriptors list", d.name)
		return d, errs
	}
	seen := map[string]int{} // a descriptor's path, by the line it is first given at
	var walk func(list *yaml.Node, path, keyFrom []string)
	walk = func(list *yaml.Node, path, keyFrom []string) {
		for _, n := range list.Content {
			if n.Kind != yaml.MappingNode {
				bad(n, "a descriptor is a mapping with key, and value, rate_limit or descriptors")
				continue
			}
			f := fieldsOf(n)
			for k, v := range f {
				switch k {
				case "key", "value", "rate_limit", "descriptors", "shadow_mode", "detailed_metric":
				default:
					bad(v.key, "descriptor field %q cannot be translated (known: key, value, rate_limit, descriptors, shadow_mode, detailed_metric)", k)
				}
			}
			kn := f["key"]
			if kn == nil || kn.val.Value == "" {
				bad(n, "a descriptor needs a key")
				continue
			}
			entry, from := kn.val.Value, keyFrom
			if vn := f["value"]; vn != nil && vn.val.Value != "" {
				v := vn.val.Value
				if strings.HasSuffix(v, "*") {
					bad(vn.val, "value %q: a wildcard value (a prefix match) cannot be translated: a pattern's entry has one value or any", v)
					continue
				}
				entry += "=" + v
			} else {
				if len(from) == maxEnvoyFields {
					bad(kn.val, "%q: a descriptor path with more than %d entries without a value: a composite key has at most %d fields", kn.val.Value, maxEnvoyFields, maxEnvoyFields)
					continue
				}
				from = append(append([]string(nil), from...), kn.val.Value)
			}
			here := append(append([]string(nil), path...), entry)
			if line, dup := seen[strings.Join(here, "\x00")]; dup {
				// envoyproxy/ratelimit refuses such a file too (a duplicate
				// composite key): one descriptor, two limits.
				bad(kn.key, "descriptor %s is given twice (first at line %d): envoyproxy/ratelimit refuses a duplicate descriptor; merge the two", strings.Join(here, ", "), line)
				continue
			}
			seen[strings.Join(here, "\x00")] = kn.key.Line
			if sub := f["descriptors"]; sub != nil {
				if sub.val.Kind != yaml.SequenceNode {
					bad(sub.val, "descriptors is a list")
				} else {
					walk(sub.val, here, from)
				}
			}
			rl := f["rate_limit"]
			if rl == nil {
				continue
			}
			r := envoyRule{keyFrom: from, entries: here, line: rl.key.Line}
			if sm := f["shadow_mode"]; sm != nil && sm.val.Value == "true" {
				r.shadow = true
			}
			if dm := f["detailed_metric"]; dm != nil && dm.val.Value == "true" {
				r.notes = append(r.notes, "detailed_metric dropped: limitgen counts by rule and pattern, never by value")
			}
			lf := fieldsOf(rl.val)
			for k, v := range lf {
				switch k {
				case "unit", "requests_per_unit", "unlimited", "name":
				case "replaces":
					bad(v.key, "replaces cannot be translated: each descriptor of a request is checked, none replaces another")
				default:
					bad(v.key, "rate_limit field %q cannot be translated (known: unit, requests_per_unit, unlimited, name)", k)
				}
			}
			if u := lf["unlimited"]; u != nil && u.val.Value == "true" {
				d.rules = append(d.rules, r)
				continue
			}
			unit, per := lf["unit"], lf["requests_per_unit"]
			if unit == nil || per == nil {
				bad(rl.val, "rate_limit needs unit and requests_per_unit (or unlimited: true)")
				continue
			}
			period, ok := envoyUnits[strings.ToLower(unit.val.Value)]
			if !ok {
				bad(unit.val, "unit %q: use second, minute, hour, day, week, month or year", unit.val.Value)
				continue
			}
			n, err := strconv.ParseInt(per.val.Value, 10, 64)
			if err != nil || n < 1 {
				bad(per.val, "requests_per_unit %q: a whole number, at least 1 (a limit of 0 admits nothing; use a rule of your own)", per.val.Value)
				continue
			}
			r.limit, r.window = n, period
			if nm := lf["name"]; nm != nil && nm.val.Value != "" {
				r.name = nm.val.Value
			}
			d.rules = append(d.rules, r)
		}
	}
	walk(ds.val, nil, nil)
	return d, errs
}

// envoyField is a mapping's field: its key node and value node.
type envoyField struct{ key, val *yaml.Node }

func fieldsOf(n *yaml.Node) map[string]*envoyField {
	out := map[string]*envoyField{}
	if n == nil || n.Kind != yaml.MappingNode {
		return out
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		out[n.Content[i].Value] = &envoyField{n.Content[i], n.Content[i+1]}
	}
	return out
}

// envoyOptions are what a translation is asked for: the policy's package,
// and whether its rules are shared (in namespace) or each process's own.
type envoyOptions struct {
	pkg       string
	shared    bool
	namespace string
}

// namespaceOf is the namespace of the shared rules translated from domains:
// their names, lower-cased, joined by dots, with what a namespace cannot
// hold as "-" (shared.CheckNamespace), at most 63 bytes; "envoy" when that
// leaves nothing.
func namespaceOf(domains []envoyDomain) string {
	var names []string
	for _, d := range domains {
		var b strings.Builder
		for _, c := range strings.ToLower(d.name) {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
				b.WriteRune(c)
			default:
				b.WriteByte('-')
			}
		}
		names = append(names, b.String())
	}
	ns := strings.Join(names, ".")
	if len(ns) > 63 {
		ns = ns[:63]
	}
	ns = strings.TrimRight(ns, ".-_")
	if ns == "" || !(ns[0] >= 'a' && ns[0] <= 'z' || ns[0] >= '0' && ns[0] <= '9') {
		return "envoy"
	}
	return ns
}

// envoyPolicy writes the policy of the translated domains: a rule for each
// limited leaf, named after its name or its path, and the rls: section.
func envoyPolicy(o envoyOptions, domains []envoyDomain) ([]byte, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "# Translated by `gen envoy` from envoyproxy/ratelimit's configuration (%s).\n", filesOf(domains))
	b.WriteString("# Each rate_limit is a window rule: requests_per_unit in any interval of a unit, sliding, so\n")
	b.WriteString("# never more in a unit than envoyproxy/ratelimit's fixed window admits, nor twice that across its edge.\n")
	if o.shared {
		b.WriteString("# Shared, as envoyproxy/ratelimit shares its counts in Redis: every instance enforces one limit\n")
		b.WriteString("# through the store it is given, and a rule whose store cannot decide answers UNAVAILABLE, so\n")
		b.WriteString("# that Envoy's failure_mode_deny decides, as it does when envoyproxy/ratelimit's Redis fails.\n")
	} else {
		b.WriteString("# Local (gen envoy -local): each instance keeps its own counts and admits the whole limit.\n")
	}
	fmt.Fprintf(&b, "package: %s\n", o.pkg)
	if o.shared {
		fmt.Fprintf(&b, "namespace: %s\n", o.namespace)
	}
	b.WriteString("rules:\n")
	used := map[string]bool{}
	names := make([][]string, len(domains))
	limited := false
	for i, d := range domains {
		for _, r := range d.rules {
			if r.limit == 0 {
				names[i] = append(names[i], "")
				continue
			}
			name := ruleName(r, d.name, used)
			names[i] = append(names[i], name)
			limited = true
			fmt.Fprintf(&b, "  - name: %s   # %s:%d\n", name, d.file, r.line)
			switch fields := fieldNamesOf(r.keyFrom); len(fields) {
			case 0:
			case 1:
				b.WriteString("    key: string\n")
			default:
				var fs []string
				for _, f := range fields {
					fs = append(fs, f+": string")
				}
				fmt.Fprintf(&b, "    key: {%s}\n", strings.Join(fs, ", "))
			}
			fmt.Fprintf(&b, "    limit: %d\n    window: %s\n", r.limit, r.window)
			if o.shared {
				b.WriteString("    shared: true\n    on_failure: deny\n")
			}
		}
	}
	if !limited {
		return nil, fmt.Errorf("gen envoy: no descriptor has a limit (every one is unlimited): nothing to translate")
	}
	b.WriteString("rls:\n  domains:\n")
	for i, d := range domains {
		fmt.Fprintf(&b, "    - domain: %s\n      descriptors:\n", yamlString(d.name))
		for j, r := range d.rules {
			for _, note := range r.notes {
				fmt.Fprintf(&b, "        # %s: %s (%s:%d)\n", strings.Join(r.entries, ", "), note, d.file, r.line)
			}
			quoted := make([]string, len(r.entries))
			for k, e := range r.entries {
				quoted[k] = yamlString(e)
			}
			fmt.Fprintf(&b, "        - entries: [%s]\n", strings.Join(quoted, ", "))
			if r.limit == 0 {
				fmt.Fprintf(&b, "          unlimited: true   # %s:%d\n", d.file, r.line)
				continue
			}
			fmt.Fprintf(&b, "          rule: %s\n", names[i][j])
			switch fields := fieldNamesOf(r.keyFrom); len(fields) {
			case 0:
			case 1:
				fmt.Fprintf(&b, "          keys: {%s: %s}\n", names[i][j], yamlString(r.keyFrom[0]))
			default:
				var fs []string
				for k, f := range fields {
					fs = append(fs, f+": "+yamlString(r.keyFrom[k]))
				}
				fmt.Fprintf(&b, "          keys: {%s: {%s}}\n", names[i][j], strings.Join(fs, ", "))
			}
			if r.shadow {
				b.WriteString("          mode: shadow\n")
			}
		}
	}
	return []byte(b.String()), nil
}

func filesOf(domains []envoyDomain) string {
	var fs []string
	for _, d := range domains {
		fs = append(fs, d.file)
	}
	return strings.Join(fs, ", ")
}

// ruleName is a rule's name: its rate_limit's name, or its domain and path,
// as a Go identifier in CamelCase, made unique.
func ruleName(r envoyRule, domain string, used map[string]bool) string {
	src := r.name
	if src == "" {
		src = domain + " " + strings.Join(r.entries, " ")
	}
	var b strings.Builder
	up := true
	for _, c := range src {
		switch {
		case c < unicode.MaxASCII && (unicode.IsLetter(c) || unicode.IsDigit(c)):
			if up {
				c = unicode.ToUpper(c)
			}
			b.WriteRune(c)
			up = false
		default:
			up = true
		}
	}
	name := b.String()
	if name == "" || !unicode.IsLetter(rune(name[0])) {
		name = "Limit" + name
	}
	if len(name) > 60 {
		name = name[:60]
	}
	base := name
	for n := 2; used[name]; n++ {
		name = base + strconv.Itoa(n)
	}
	used[name] = true
	return name
}

// yamlString is s as a YAML scalar: quoted when it needs to be.
func yamlString(s string) string {
	var n yaml.Node
	n.SetString(s)
	out, err := yaml.Marshal(&n)
	if err != nil {
		return strconv.Quote(s)
	}
	return strings.TrimSuffix(string(out), "\n")
}

// maxEnvoyFields is the most entries without a value a descriptor path may
// have: a composite key's most fields.
const maxEnvoyFields = 8

// fieldNamesOf names a composite key's fields after the entry keys they are
// read from (user_id; X-User as x_user), or f1, f2, … when one would not be
// a field's name or two would be the same.
func fieldNamesOf(entries []string) []string {
	names := make([]string, len(entries))
	seen := map[string]bool{}
	ok := true
	for i, e := range entries {
		var b strings.Builder
		for _, c := range strings.ToLower(e) {
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
				b.WriteRune(c)
			default:
				b.WriteByte('_')
			}
		}
		n := b.String()
		camelName := strings.ReplaceAll(n, "_", "")
		if n == "" || n[0] < 'a' || n[0] > 'z' || len(n) > 32 || seen[camelName] || camelName == "string" || camelName == "appendtext" || token.IsKeyword(n) {
			ok = false
		}
		seen[camelName] = true
		names[i] = n
	}
	if !ok {
		for i := range names {
			names[i] = "f" + strconv.Itoa(i+1)
		}
	}
	return names
}
