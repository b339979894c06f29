package numbers

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/limitgen/limitgen/gen/internal/model"
	"github.com/limitgen/limitgen/genimpl"
	"github.com/limitgen/limitgen/internal/wire"
	"github.com/limitgen/limitgen/verdict"
)

// CanonicalKey checks that key is a value of rule r's Go key type and
// returns its canonical form (as the generated package keys it).
func CanonicalKey(r model.Rule, key string) (string, error) {
	if !r.Composite() {
		return canonicalValue(r.KeyType, key)
	}
	var desc []string
	for _, f := range r.Fields {
		desc = append(desc, f.Name+" ("+f.Type+")")
	}
	fields, ok := genimpl.KeyFields(key, len(r.Fields))
	if !ok {
		return "", fmt.Errorf("key %q is not one of rule %s: %s, comma-separated (a string's '%%', ',' and '#' as %%25, %%2C and %%23)", key, r.Name, strings.Join(desc, ", "))
	}
	var b []byte
	for i, f := range r.Fields {
		if i > 0 {
			b = append(b, ',')
		}
		if f.Type == "string" {
			if !wire.KeyOK(fields[i]) {
				return "", fmt.Errorf("key %q: field %s is empty or longer than %d bytes", key, f.Name, verdict.MaxKeyLen)
			}
			b = genimpl.AppendKeyField(b, fields[i])
			continue
		}
		v, err := canonicalValue(f.Type, fields[i])
		if err != nil {
			return "", fmt.Errorf("key %q: field %s: %v", key, f.Name, err)
		}
		b = append(b, v...)
	}
	return string(b), nil
}

// canonicalValue checks that key is a value of a key of one value's type, and
// returns its canonical form.
func canonicalValue(keyType, key string) (string, error) {
	if keyType == "string" {
		return key, nil
	}
	bits := map[string]int{"int8": 8, "int16": 16, "int32": 32, "uint8": 8, "uint16": 16, "uint32": 32}[keyType]
	if bits == 0 {
		bits = 64 // int, uint, int64, uint64 (int and uint are 64 bits on the platforms Go supports here)
	}
	if strings.HasPrefix(keyType, "uint") {
		v, err := strconv.ParseUint(key, 10, bits)
		if err != nil {
			return "", fmt.Errorf("key %q is not a %s (0 to %d)", key, keyType, uint64(1)<<bits-1)
		}
		return strconv.FormatUint(v, 10), nil
	}
	v, err := strconv.ParseInt(key, 10, bits)
	if err != nil {
		return "", fmt.Errorf("key %q is not an %s (%d to %d)", key, keyType, -(int64(1) << (bits - 1)), int64(1)<<(bits-1)-1)
	}
	return strconv.FormatInt(v, 10), nil
}
