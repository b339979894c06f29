package main

// gen envoy: envoyproxy/ratelimit's configuration, translated into a policy.
//
// envoyproxy/ratelimit reads a file a domain: descriptors of a key and
// an optional value, nested, each leaf with a rate_limit of
// requests_per_unit a unit (a fixed window), or unlimited. A descriptor
// without a value limits each value apart; with one, that value only. The
// translation makes a rule for each leaf (a token bucket of
// requests_per_unit a unit with a burst of as many: it admits as many in any
// one unit as a fixed window admits in one window, and never the double a
// fixed window admits across its edge), keyed by the entry without a value
// (several: a composite key, a field each, at most 8), and an rls: pattern
// of the leaf's path that checks it. What a policy cannot say is refused
// with its line: replaces, wildcard values.

import (
	"bytes"
	"flag"
	"fmt"
	"go/token"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode"

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
	rate    string
	burst   int64
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
func envoy(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("gen envoy", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gen envoy [-package limits] [-o policy.yaml] config.yaml...")
		fmt.Fprintln(stderr, "Translates envoyproxy/ratelimit configuration files (a domain each) into a policy with an rls: section.")
		fs.PrintDefaults()
	}
	pkg := fs.String("package", "limits", "the policy's package")
	out := fs.String("o", "", "the policy file to write (standard output when empty)")
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
	src, err := envoyPolicy(*pkg, domains)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if _, err := compile("translated", src); err != nil { // what was translated must be a valid policy
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
				r.notes = append(r.notes, "unlimited: no rule (a descriptor no pattern checks is OK)")
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
			r.rate = strconv.FormatInt(n, 10) + " per " + period
			r.burst = n
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

// envoyPolicy writes the policy of the translated domains: a rule for each
// limited leaf, named after its name or its path, and the rls: section.
func envoyPolicy(pkg string, domains []envoyDomain) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "# Translated by `gen envoy` from envoyproxy/ratelimit's configuration (%s).\n", filesOf(domains))
	b.WriteString("# Each rate_limit is a token bucket of requests_per_unit a unit with a burst of as many:\n")
	b.WriteString("# as many in any one unit as a fixed window admits in one, never twice that across its edge.\n")
	fmt.Fprintf(&b, "package: %s\nrules:\n", pkg)
	used := map[string]bool{}
	names := make([][]string, len(domains))
	limited := false
	for i, d := range domains {
		for _, r := range d.rules {
			if r.rate == "" {
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
			fmt.Fprintf(&b, "    rate: %s\n    burst: %d\n", r.rate, r.burst)
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
			if r.rate == "" {
				continue
			}
			quoted := make([]string, len(r.entries))
			for k, e := range r.entries {
				quoted[k] = yamlString(e)
			}
			fmt.Fprintf(&b, "        - entries: [%s]\n          rule: %s\n", strings.Join(quoted, ", "), names[i][j])
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
	return b.Bytes(), nil
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
