package main

import (
	"fmt"
	"strings"
	"time"
)

// The doc comments of generated identifiers: each states its rule in plain words.

// amount is "10 requests" or "100 tokens" (when a request costs more than one).
func (l limit) amount(n int64) string {
	unit := "request"
	if l.cost != 1 {
		unit = "token"
	}
	if n != 1 {
		unit += "s"
	}
	return fmt.Sprintf("%d %s", n, unit)
}

// period is "per second", "per minute", or "every 10s".
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
	return "every " + time.Duration(ns).String()
}

// phrase is a limit in words, without the subject: "10 requests per second per
// key, in bursts of up to 50".
func (l limit) phrase(scope string) string {
	s := fmt.Sprintf("%s %s %s", l.amount(l.tokens), period(l.periodNs), scope)
	if l.interval {
		grid := "from the bucket's first use"
		if l.aligned {
			grid = "aligned to the wall clock"
		}
		s += fmt.Sprintf(", added %d at a time at each %v boundary %s", l.tokens, time.Duration(l.periodNs), grid)
	}
	s += fmt.Sprintf(", in bursts of up to %d", l.burst)
	if l.cost != 1 {
		s += fmt.Sprintf("; a request costs %d tokens unless told otherwise", l.cost)
	}
	if l.initialSet && l.initial != l.burst {
		s += fmt.Sprintf("; a new bucket starts with %d", l.initial)
	}
	return s
}

func ruleDoc_(r rule, plans []plan) string {
	scope := "in total"
	if r.keyType != "" {
		scope = "per key"
	}
	var b strings.Builder
	if !r.planned {
		fmt.Fprintf(&b, "%s allows %s", r.goName, r.limits[0].phrase(scope))
	} else {
		fmt.Fprintf(&b, "%s allows", r.goName)
		for i, pl := range plans {
			sep := ";"
			if i == len(plans)-1 {
				sep = ""
			}
			fmt.Fprintf(&b, " on the %s plan %s%s", pl.name, r.limits[i].phrase(scope), sep)
		}
	}
	b.WriteString(".")
	if r.maxKeys > 0 {
		what := "denies new keys"
		if r.allowCap {
			what = "admits new keys without tracking them"
		}
		fmt.Fprintf(&b, " It tracks at most %d keys and beyond that %s.", r.maxKeys, what)
	}
	return b.String()
}

func tierDoc_(t tier, m *model) string {
	names := make([]string, len(t.rules))
	for i, ri := range t.rules {
		names[i] = m.rules[ri].goName
	}
	return fmt.Sprintf("%s checks a request against %s, in that order, and allows it only if every rule does: "+
		"when a rule denies, the tokens the earlier rules took are given back.", t.goName, strings.Join(names, ", "))
}
