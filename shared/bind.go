package shared

import (
	"errors"
	"fmt"
	"reflect"
)

// ErrNoStore is Bind's error for a nil store, or a nil pointer (or map,
// slice, func, channel) in a Store interface: a store that was never made.
var ErrNoStore = errors.New("no store")

// Bind binds rules to store as a generated package does when it is built: it
// refuses a nil store, a typed nil in the interface (WithStore((*redisstore.
// Store)(nil)), say: its Bind would panic) and a Bind that panics, each with
// an error instead, so that the package reports it through SharedErr.
func Bind(store Store, rules []Rule) (b Bound, err error) {
	if store == nil {
		return nil, ErrNoStore
	}
	switch v := reflect.ValueOf(store); v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan, reflect.Interface:
		if v.IsNil() {
			return nil, fmt.Errorf("%w: a nil %T", ErrNoStore, store)
		}
	}
	defer func() {
		if e := recover(); e != nil {
			b, err = nil, fmt.Errorf("the store's Bind panicked: %v", e)
		}
	}()
	b, err = store.Bind(rules)
	if err == nil && b == nil {
		err = fmt.Errorf("%T.Bind returned no Bound and no error", store)
	}
	return b, err
}

// Health is b's store's live state when it reports one (a Bound with a
// Health method, as an Engine's binding has): nil while the store answers.
// A generated package's SharedErr returns it.
func Health(b Bound) error {
	if h, ok := b.(interface{ Health() error }); ok {
		return h.Health()
	}
	return nil
}
