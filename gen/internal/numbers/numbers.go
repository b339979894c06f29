package numbers

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/atomicwindow"
	"github.com/limitgen/limitgen/gen/internal/cli"
	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/gen/internal/policy"
	"github.com/limitgen/limitgen/genimpl"
	"github.com/limitgen/limitgen/overlay"
	"github.com/limitgen/limitgen/overlay/yamlfile"
	"github.com/limitgen/limitgen/shared"
)

// numbers checks overlay files against a policy offline, as the generated
// package's ApplyNumbers would check them: every problem, with its position.
func Main(args []string, stdout, stderr io.Writer) int {
	fs := cli.FlagSet("gen numbers", stderr,
		"usage: gen numbers [-policy policy.yaml] numbers.yaml...",
		"Checks overlay files (numbers per rule, plan and key: package overlay) against the policy,",
		"as a service's ApplyNumbers would; exit 1 with every problem, file:line:col first.",
	)
	policyFile := fs.String("policy", "policy.yaml", "the policy file")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	m, err := policy.Load(*policyFile, *policyFile)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	p := Checkers(m)
	status := 0
	for _, name := range fs.Args() {
		src, err := os.ReadFile(name)
		if err == nil {
			var set overlay.Set
			if set, err = yamlfile.Parse(name, src); err == nil {
				if err = overlay.Check(p, set); err == nil {
					fmt.Fprintf(stdout, "%s: %d entries, all good for %s\n", name, len(set), *policyFile)
				}
			}
		}
		if err != nil {
			fmt.Fprintln(stderr, err)
			status = 1
		}
	}
	return status
}

// checkers is m's rules as an overlay Set is checked against them.
func Checkers(m *model.Model) overlay.Policy[overlay.Checker] {
	p := overlay.Policy[overlay.Checker]{Rules: map[string]overlay.Checker{}}
	for _, pl := range m.Plans {
		p.Plans = append(p.Plans, pl.Name)
	}
	for _, r := range m.Rules {
		p.Rules[r.Name] = ruleChecker{r}
	}
	return p
}

// ruleChecker is a policy's rule as an overlay.Checker: the generator's
// checks of numbers, and a store's for a shared rule.
type ruleChecker struct{ r model.Rule }

func (c ruleChecker) Plans() int {
	if c.r.Planned {
		return len(c.r.Limits)
	}
	return 0
}

func (c ruleChecker) Keyed() bool { return c.r.KeyType != "" }

// InFlight says whether the rule is an in-flight rule (overlay.Entry.InFlight).
func (c ruleChecker) InFlight() bool { return c.r.IsInFlight() }

func (c ruleChecker) Check(plan int, n atomicbucket.Numbers) error {
	if c.r.IsInFlight() {
		_, err := atomicslot.RuleOf(n)
		return err
	}
	if c.r.IsWindow() {
		w, err := atomicwindow.RuleOf(n, c.r.Limits[max(plan, 0)].Cost)
		if err == nil && c.r.Shared && !w.Exact() && w.Grain()%time.Microsecond != 0 {
			err = fmt.Errorf("%w: a shared counted window's sixteenths are whole microseconds: %v is not a multiple of 16µs", atomicwindow.ErrNumbers, w.Window())
		}
		return err
	}
	base, err := atomicbucket.NewRule(c.r.Limits[max(plan, 0)].Atomic())
	if err != nil {
		return err
	}
	nr, err := base.WithNumbers(n)
	if err != nil {
		return err
	}
	if err := genimpl.CheckCost(n.Burst, c.r.Limits[max(plan, 0)].Cost); err != nil {
		return err
	}
	if c.r.Shared {
		if _, err := shared.NewIntegers(nr.Limit()); err != nil {
			return fmt.Errorf("%w: a store cannot hold %v: %w", shared.ErrInvalidNumbers, n, err)
		}
	}
	return nil
}

func (c ruleChecker) CheckKey(key string) error {
	if c.r.IsInFlight() {
		return errors.New("an in-flight rule's numbers are the rule's (or a plan's), for every key: give them without a key")
	}
	if c.r.IsWindow() {
		return errors.New("a window rule's numbers are the rule's, for every key: give them without a key")
	}
	var err error
	bits, _ := strconv.Atoi(strings.TrimLeft(c.r.KeyType, "uint"))
	switch {
	case c.r.Composite():
		_, err = CanonicalKey(c.r, key)
	case c.r.KeyType == "string" && key == "":
		err = fmt.Errorf("an empty key: no door checks one (a request without a key is missing_key), so its numbers would never apply")
	case c.r.KeyType == "string":
		if c.r.Shared && (key == "" || len(key) > shared.MaxKeyLen) {
			err = fmt.Errorf("a shared rule's key has 1 to %d bytes, not %d", shared.MaxKeyLen, len(key))
		}
	case strings.HasPrefix(c.r.KeyType, "uint"):
		_, err = strconv.ParseUint(key, 10, bits)
	default:
		_, err = strconv.ParseInt(key, 10, bits)
	}
	return err
}
