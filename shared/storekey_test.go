package shared

import (
	"strings"
	"testing"
)

// StoreKey keeps a short form, and hashes a long one into MaxKeyLen, apart
// from every form.
func TestStoreKey(t *testing.T) {
	short := strings.Repeat("a", MaxKeyLen)
	if StoreKey(short) != short {
		t.Error("a form of MaxKeyLen bytes is not kept as it is")
	}
	long1, long2 := short+",1", short+",2"
	k1, k2 := StoreKey(long1), StoreKey(long2)
	if k1 == k2 || len(k1) > MaxKeyLen || k1[0] != '#' || StoreKey(long1) != k1 {
		t.Errorf("long forms: %q, %q", k1, k2)
	}
}
