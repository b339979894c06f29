// Package enum names the values of limitgen's small enumerations (iota from
// 0): one String method's body for each.
package enum

import "strconv"

// Name is names[v], or "Type(v)" for a value with no name.
func Name[T ~uint8](v T, typ string, names ...string) string {
	if int(v) < len(names) {
		return names[v]
	}
	return typ + "(" + strconv.Itoa(int(v)) + ")"
}
