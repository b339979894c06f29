package genimpl

import (
	"errors"
	"strings"
)

// NilHooks is the error of a generated constructor given nil hooks: names are
// the hooks' names, isNil says which are nil, and the error names every nil
// one; prefix is where, then the hooks' type ("limits: NewMiddleware:
// Hooks."). Nil when none is nil.
func NilHooks(prefix string, names []string, isNil ...bool) error {
	where, typ := "", prefix
	if i := strings.LastIndex(prefix, ": "); i >= 0 {
		where, typ = prefix[:i+2], prefix[i+2:]
	}
	var missing []string
	for i, n := range isNil {
		if n && i < len(names) {
			missing = append(missing, typ+names[i])
		}
	}
	switch len(missing) {
	case 0:
		return nil
	case 1:
		return errors.New(where + missing[0] + " is nil")
	}
	return errors.New(where + strings.Join(missing[:len(missing)-1], ", ") + " and " + missing[len(missing)-1] + " are nil")
}
