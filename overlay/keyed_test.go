package overlay

import (
	"errors"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/genimpl"
)

// KeyedTarget reads keys of every kind a policy has (text, integers of each
// size, a parse of its own), checks numbers as the generator does, and puts
// a Set's numbers on the key or the rule it names.
func TestKeyedTarget(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}
	ints := genimpl.NewKeyed(atomicbucket.NewTable[int8](atomicbucket.MustRule(l), atomicbucket.TableOptions{}), genimpl.Cost{Default: 5}, nil)
	tg := KeyedTarget(ints, ParseInt[int8])
	if tg.Plans() != 0 || !tg.Keyed() {
		t.Errorf("Plans %d, Keyed %v: want 0 and true", tg.Plans(), tg.Keyed())
	}
	for key, ok := range map[string]bool{"127": true, "-128": true, "128": false, "x": false, "": false} {
		if err := tg.CheckKey(key); (err == nil) != ok {
			t.Errorf("CheckKey(%q) of an int8 key: %v", key, err)
		}
	}
	if b := tg.Base(-1); b.Cost != 5 || b.Numbers != atomicbucket.NumbersOf(l) || b.Interval {
		t.Errorf("Base: %+v", b)
	}
	if err := tg.Check(-1, atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 4}); !errors.Is(err, atomicbucket.ErrInvalidLimit) {
		t.Errorf("a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	n := atomicbucket.Numbers{Tokens: 2, Period: time.Second, Burst: 7}
	key := "-3"
	if err := tg.Set(-1, &key, n); err != nil {
		t.Fatal(err)
	}
	if got, o := ints.NumbersFor(-3); got != n || o != atomicbucket.FromKeyOverride {
		t.Errorf("key -3 after Set: %v from %v", got, o)
	}
	bad := "300"
	if err := tg.Set(-1, &bad, n); err == nil {
		t.Error("Set on 300, no int8: no error")
	}
	tg.Clear(-1, &bad) // no such key: nothing
	tg.Clear(-1, &key)
	if _, o := ints.NumbersFor(-3); o != atomicbucket.FromPolicy {
		t.Errorf("key -3 after Clear: from %v", o)
	}
	if err := tg.Set(-1, nil, n); err != nil {
		t.Fatal(err)
	}
	if got, o := ints.NumbersFor(9); got != n || o != atomicbucket.FromOverride {
		t.Errorf("the rule after Set: %v from %v", got, o)
	}

	strs := genimpl.NewKeyed(atomicbucket.NewTable[string](atomicbucket.MustRule(l), atomicbucket.TableOptions{}), genimpl.Cost{Default: 1}, genimpl.NonEmpty)
	ts := KeyedTarget(strs, nil)
	k := "acme"
	if err := ts.Set(-1, &k, n); err != nil {
		t.Fatal(err)
	}
	if got, _ := strs.NumbersFor("acme"); got != n {
		t.Errorf("a string key after Set: %v", got)
	}
	// A target of integer keys made without its parse refuses every key,
	// never putting numbers on the zero key.
	noParse := KeyedTarget(ints, nil)
	if err := noParse.Set(-1, &key, n); err == nil {
		t.Error("a KeyedTarget of int8 keys without a parse took a key")
	}
	if _, o := ints.NumbersFor(0); o == atomicbucket.FromKeyOverride {
		t.Error("the zero key got numbers of its own")
	}
	if v, err := ParseUint[uint16]("65535"); err != nil || v != 65535 {
		t.Errorf("ParseUint[uint16](65535) = %v, %v", v, err)
	}
	if _, err := ParseUint[uint16]("65536"); err == nil {
		t.Error("ParseUint[uint16](65536): no error")
	}
}

// GlobalTarget checks numbers as the generator does and puts a Set's on the
// rule.
func TestGlobalTarget(t *testing.T) {
	l := atomicbucket.Limit{Tokens: 10, Period: time.Second, Burst: 20}
	g := genimpl.NewGlobal(atomicbucket.NewBucketAt(atomicbucket.MustRule(l), 0), genimpl.Cost{Default: 5})
	tg := GlobalTarget(g)
	if tg.Plans() != 0 || tg.Keyed() {
		t.Errorf("Plans %d, Keyed %v: want 0 and false", tg.Plans(), tg.Keyed())
	}
	if b := tg.Base(-1); b.Cost != 5 || b.Numbers != atomicbucket.NumbersOf(l) {
		t.Errorf("Base: %+v", b)
	}
	if err := tg.Check(-1, atomicbucket.Numbers{Tokens: 1, Period: time.Second, Burst: 4}); !errors.Is(err, atomicbucket.ErrInvalidLimit) {
		t.Errorf("a burst of 4 under a cost of 5: %v, want ErrInvalidLimit", err)
	}
	n := atomicbucket.Numbers{Tokens: 2, Period: time.Second, Burst: 7}
	if err := tg.Set(-1, nil, n); err != nil {
		t.Fatal(err)
	}
	if got, o := g.NumbersFor(); got != n || o != atomicbucket.FromOverride {
		t.Errorf("after Set: %v from %v", got, o)
	}
	tg.Clear(-1, nil)
	if _, o := g.NumbersFor(); o != atomicbucket.FromPolicy {
		t.Errorf("after Clear: from %v", o)
	}
}
