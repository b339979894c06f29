package overlay

import (
	"fmt"
	"strconv"
	"unsafe"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/genimpl"
)

// KeyedTarget is a keyed rule without plans, kept in the process
// (genimpl.Keyed, which a generated limiter embeds), as a Set changes
// it: numbers are checked as the generator checks a policy's (the rule's
// limits, a burst of at least a request's cost), and a key given as text is
// read by parse (nil for string keys; ParseInt or ParseUint for integers; a
// generated Parse…Key for composite keys). A Set's buckets are carried as
// they are (atomicbucket.CarryAsIs).
func KeyedTarget[K comparable](l genimpl.Keyed[K], parse func(string) (K, error)) Target {
	return keyedTarget[K]{l, parse}
}

type keyedTarget[K comparable] struct {
	l     genimpl.Keyed[K]
	parse func(string) (K, error)
}

func (t keyedTarget[K]) Plans() int  { return 0 }
func (t keyedTarget[K]) Keyed() bool { return true }

func (t keyedTarget[K]) Check(_ int, n atomicbucket.Numbers) error {
	if _, err := t.l.Rule().WithNumbers(n); err != nil {
		return err
	}
	return t.l.CheckBurst(n)
}

// Base's Cost is the least burst the limiter takes (its default cost, or
// the most a request of its routes may cost): a scaled burst stays at it.
func (t keyedTarget[K]) Base(int) Base { return baseOf(t.l.Rule(), t.l.MinBurst()) }

// baseOf is rule's Base: the policy's numbers, the default cost, the refill.
func baseOf(rule *atomicbucket.Rule, cost int64) Base {
	r := rule.Limit()
	return Base{Numbers: atomicbucket.NumbersOf(r), Cost: cost, Interval: r.Refill == atomicbucket.Interval}
}

func (t keyedTarget[K]) CheckKey(key string) error {
	_, err := t.key(key)
	return err
}

// key is key's value: parsed, or for a string key (parse nil) key itself.
func (t keyedTarget[K]) key(key string) (K, error) {
	if t.parse != nil {
		return t.parse(key)
	}
	k, ok := any(key).(K)
	if !ok { // a KeyedTarget of other keys made without its parse: say so, never a zero key
		return k, fmt.Errorf("overlay: a KeyedTarget of %T keys needs a parse function to read %q", k, key)
	}
	return k, nil
}

func (t keyedTarget[K]) Set(_ int, key *string, n atomicbucket.Numbers) error {
	if key == nil {
		return t.l.SetNumbers(n, atomicbucket.CarryAsIs)
	}
	k, err := t.key(*key)
	if err != nil {
		return err
	}
	return t.l.SetKeyNumbers(k, n, atomicbucket.CarryAsIs)
}

func (t keyedTarget[K]) Clear(_ int, key *string) {
	if key == nil {
		t.l.ClearNumbers(atomicbucket.CarryAsIs)
		return
	}
	if k, err := t.key(*key); err == nil { // a key that does not parse has no numbers
		t.l.ClearKeyNumbers(k, atomicbucket.CarryAsIs)
	}
}

// ParseInt reads a signed integer key of K's size in base 10, as
// KeyedTarget's parse.
func ParseInt[K ~int | ~int8 | ~int16 | ~int32 | ~int64](s string) (K, error) {
	var zero K
	v, err := strconv.ParseInt(s, 10, int(unsafe.Sizeof(zero))*8)
	return K(v), err
}

// ParseUint reads an unsigned integer key of K's size in base 10, as
// KeyedTarget's parse.
func ParseUint[K ~uint | ~uint8 | ~uint16 | ~uint32 | ~uint64](s string) (K, error) {
	var zero K
	v, err := strconv.ParseUint(s, 10, int(unsafe.Sizeof(zero))*8)
	return K(v), err
}

// GlobalTarget is a global rule without plans, kept in the process
// (genimpl.Global, which a generated limiter embeds), as a Set changes
// it: numbers are checked as the generator checks a policy's; a Set's bucket
// is carried as it is (atomicbucket.CarryAsIs). It takes no keys.
func GlobalTarget(l genimpl.Global) Target { return globalTarget{l} }

type globalTarget struct{ l genimpl.Global }

func (t globalTarget) Plans() int            { return 0 }
func (t globalTarget) Keyed() bool           { return false }
func (t globalTarget) CheckKey(string) error { return nil }

func (t globalTarget) Check(_ int, n atomicbucket.Numbers) error {
	if _, err := t.l.Rule().WithNumbers(n); err != nil {
		return err
	}
	return t.l.CheckBurst(n)
}

func (t globalTarget) Base(int) Base { return baseOf(t.l.Rule(), t.l.MinBurst()) }

func (t globalTarget) Set(_ int, _ *string, n atomicbucket.Numbers) error {
	return t.l.SetNumbers(n, atomicbucket.CarryAsIs)
}

func (t globalTarget) Clear(int, *string) { t.l.ClearNumbers(atomicbucket.CarryAsIs) }
