package policy

import (
	"fmt"
	"strings"
	"time"

	"github.com/limitgen/limitgen/gen/internal/model"
)

// The doc comments of generated identifiers: each states its rule in plain words.

// amount is "10 requests" or "100 tokens" (when a request costs more than one).
func amount(l model.Limit, n int64) string {
	unit := "request"
	if l.Cost != 1 {
		unit = "token"
	}
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// period is "per second", "per minute", or "every 10 seconds".
func period(ns int64) string {
	switch time.Duration(ns) {
	case time.Second:
		return "per second"
	case time.Minute:
		return "per minute"
	case time.Hour:
		return "per hour"
	case 24 * time.Hour:
		return "per day"
	}
	return "every " + durationWords(ns)
}

// durationAdjective is durationWords before a noun: "10-second", "minute".
func durationAdjective(ns int64) string {
	n, unit, _ := strings.Cut(durationWords(ns), " ")
	unit = strings.TrimSuffix(unit, "s")
	if n == "1" {
		return unit
	}
	return n + "-" + unit
}

// durationWords says ns in the largest unit that holds it whole: "10 seconds",
// "90 seconds", "24 hours", "250 milliseconds", "1 nanosecond".
func durationWords(ns int64) string {
	for _, u := range []struct {
		d    time.Duration
		name string
	}{
		{time.Hour, "hour"}, {time.Minute, "minute"}, {time.Second, "second"},
		{time.Millisecond, "millisecond"}, {time.Microsecond, "microsecond"}, {time.Nanosecond, "nanosecond"},
	} {
		if ns%int64(u.d) == 0 {
			n := ns / int64(u.d)
			if n == 1 {
				return "1 " + u.name
			}
			return fmt.Sprintf("%d %ss", n, u.name)
		}
	}
	return fmt.Sprintf("%d nanoseconds", ns)
}

// phrase is a limit in words, without the subject: "10 requests per second per
// key, in bursts of up to 50".
func phrase(l model.Limit, scope string) string {
	if l.Window {
		s := fmt.Sprintf("at most %s in any %s %s (a sliding window)", amount(l, l.Tokens), strings.TrimPrefix(durationWords(l.PeriodNs), "1 "), scope)
		if l.Cost != 1 {
			s += fmt.Sprintf("; a request costs %d tokens unless told otherwise", l.Cost)
		}
		return s
	}
	s := fmt.Sprintf("%s %s %s", amount(l, l.Tokens), period(l.PeriodNs), scope)
	if l.Interval {
		grid := "of the key's own grid (placed by the key)"
		switch {
		case l.Aligned:
			grid = "of the wall clock"
		case scope == "in total":
			grid = "of a grid that starts when the bucket is made"
		}
		s += fmt.Sprintf(", added %d at a time at each %s boundary %s", l.Tokens, durationAdjective(l.PeriodNs), grid)
	}
	s += fmt.Sprintf(", in bursts of up to %d", l.Burst)
	if l.Cost != 1 {
		s += fmt.Sprintf("; a request costs %d tokens unless told otherwise", l.Cost)
	}
	if l.InitialSet && l.Initial != l.Burst {
		s += fmt.Sprintf("; a new bucket starts with %d", l.Initial)
	}
	return s
}

func ruleDoc_(r model.Rule, plans []model.Plan) string {
	scope := "in total"
	if r.KeyType != "" {
		scope = "per key"
	}
	if r.Composite() {
		var names []string
		for _, f := range r.Fields {
			names = append(names, f.Name)
		}
		scope = "per " + strings.Join(names, " and ")
	}
	var b strings.Builder
	if r.IsInFlight() {
		l := r.Limits[0]
		whose := map[string]string{"in total": "", "per key": " of a key"}[scope]
		if r.Composite() {
			whose = " " + scope
		}
		fmt.Fprintf(&b, "%s lets at most %d requests%s hold a slot at once: Acquire takes one, its Slot's Release gives it back, "+
			"and a slot never released comes back %s after it was taken.", r.GoName, l.Tokens, whose, durationWords(l.PeriodNs))
		if r.MaxKeys > 0 {
			what := "denies new keys"
			if r.AllowCap {
				what = "admits new keys without tracking them"
			}
			fmt.Fprintf(&b, " It tracks at most %d keys; at that cap it reclaims keys that have held no slot for a second, and when there are none it %s.", r.MaxKeys, what)
		}
		return b.String()
	}
	if !r.Planned {
		fmt.Fprintf(&b, "%s allows %s", r.GoName, phrase(r.Limits[0], scope))
	} else {
		fmt.Fprintf(&b, "%s allows", r.GoName)
		for i, pl := range plans {
			sep := ";"
			if i == len(plans)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, " on the %s plan %s%s", pl.Name, phrase(r.Limits[i], scope), sep)
		}
	}
	b.WriteString(".")
	if r.MaxKeys > 0 && r.IsWindow() {
		what := "denies new keys"
		if r.AllowCap {
			what = "admits new keys without tracking them"
		}
		fmt.Fprintf(&b, " It tracks at most %d keys; at that cap it reclaims keys whose windows have been empty for a second, and when there are none it %s.", r.MaxKeys, what)
	} else if r.MaxKeys > 0 {
		what := "denies new keys"
		if r.AllowCap {
			what = "admits new keys without tracking them"
		}
		per := ""
		if r.Planned {
			per = " per plan"
		}
		fmt.Fprintf(&b, " It tracks at most %d keys%s; at that cap it reclaims keys whose buckets have been full for a second, and when there are none it %s.", r.MaxKeys, per, what)
	}
	return b.String()
}

// typeDoc_ is the limiter type's doc comment (for a shared rule, its
// process-local limiter's).
func typeDoc_(r model.Rule) string {
	s := fmt.Sprintf("%s is the type of %s. Its methods are safe for concurrent use.", r.TypeName(), r.GoName)
	if r.Shared {
		s = fmt.Sprintf("%s is %s decided in this process only, with the whole limit: what %s.Local returns, "+
			"for tests, and what %s's checks use while the package has no store (SharedErr says so). "+
			"Its methods are safe for concurrent use.", r.LocalTypeName(), r.GoName, r.TypeName(), r.GoName)
	}
	if r.Planned && r.IsWindow() {
		s += " Each plan has a window of its own for each key: a key that changes plan is checked against the new " +
			"plan's window (empty, if it has none), and finds its old one, less what left it meanwhile, if it changes back. " +
			"The plan comes from your service's records of the caller, so a client cannot switch at will."
		if r.MaxKeys > 0 {
			s += " The key cap applies to each plan's table."
		}
	} else if r.Planned {
		s += " Each plan has a table of its own: a key that changes plan is checked against the new plan's bucket " +
			"for it (full, if it has none), and finds its old one, refilled by the time that passed, if it changes back. " +
			"The plan comes from your service's records of the caller, so a client cannot switch at will."
		if r.MaxKeys > 0 {
			s += " The key cap applies to each plan's table."
		}
	}
	return s
}

// sharedTypeDoc_ is a shared rule's limiter type's doc comment.
func sharedTypeDoc_(r model.Rule) string {
	if r.IsInFlight() {
		return fmt.Sprintf("%s is the type of %s, a shared in-flight rule: Acquire takes a slot on the store given "+
			"to New, so that the count holds across every instance that shares it, and takes the request's context. "+
			"Without a store it acquires in this process with the whole limit, and its results carry SharedErr's "+
			"error; Local is that process-local set of slots, under a name that says so. Its methods are safe for "+
			"concurrent use.", r.TypeName(), r.GoName)
	}
	if r.IsWindow() {
		return fmt.Sprintf("%s is the type of %s, a shared window rule: Allow and AllowN decide on the store given to "+
			"New, so that the window holds across every instance that shares it, and take the request's context. "+
			"Without a store they decide in this process with the whole limit, and their results carry SharedErr's "+
			"error; Local is that process-local window, under a name that says so. Its methods are safe for "+
			"concurrent use.", r.TypeName(), r.GoName)
	}
	return fmt.Sprintf("%s is the type of %s, a shared rule: Allow, AllowN and Wait decide on the store given to "+
		"New, so that the limit holds across every instance that shares it, and take the request's context. "+
		"Without a store they decide in this process with the whole limit, and their results carry SharedErr's "+
		"error; Local is that process-local limiter, under a name that says so. Its methods are safe for "+
		"concurrent use.", r.TypeName(), r.GoName)
}

// unitsDoc_ is the doc comment of a folded rule's unit constants.
func unitsDoc_(r model.Rule) string {
	return fmt.Sprintf("%s's fixed-point units (atomicbucket.Rule.Units, checked as the package initialises): "+
		"time in 1/%d ns (%s), a token's worth (%s) and the burst's (%s), GCRA's emission interval and tolerance.", r.GoName, r.Limits[0].Scale, r.UnitsPerNs(), r.UnitsPerToken(), r.BurstUnits())
}

// modelDocs fills the doc prose of the model and its rules.
func modelDocs(m *model.Model) {
	m.Doc = fmt.Sprintf("Package %s holds the rate limits of %s, generated by limitgen.", m.Pkg, m.Source)
	m.LimitsDoc = "Limits is one set of the policy's limiters, each with buckets of its own. New makes one " +
		"(a test gets fresh buckets; two sets never share state); Default is the set the package-level " +
		"variables and functions use; its embedded overlay.Numbers changes the numbers in force at run time."
	for i := range m.Rules {
		r := &m.Rules[i]
		r.TypeDoc = typeDoc_(*r)
		if r.Shared {
			r.LocalDoc = r.TypeDoc
			r.TypeDoc = sharedTypeDoc_(*r)
		}
		r.FieldDoc = "see the package-level " + r.GoName
		if r.Folded() {
			r.UnitsDoc = unitsDoc_(*r)
		}
	}
}

func tierDoc_(t model.Tier, m *model.Model) string {
	names := make([]string, len(t.Rules))
	var windows []string
	for i, ri := range t.Rules {
		names[i] = m.Rules[ri].GoName
		if m.Rules[ri].IsWindow() {
			windows = append(windows, m.Rules[ri].GoName)
		}
	}
	s := fmt.Sprintf("%s checks a request against %s, in that order, and allows it only if every rule does: "+
		"when a rule denies, the tokens the earlier rules took are given back.", t.GoName, strings.Join(names, ", "))
	if len(windows) > 0 {
		s += fmt.Sprintf(" A window cannot give back what it counted, so %s %s looked at before anything is taken and "+
			"counted last: a request denied by any rule counts in no window (unless, between the look and the count, "+
			"a concurrent request of the same key filled the window: then the windows counted before it keep it).",
			strings.Join(windows, " and "), map[bool]string{true: "is", false: "are"}[len(windows) == 1])
	}
	return s
}
