package fuzz

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/limitgen/limitgen/atomicbucket"
	"github.com/limitgen/limitgen/atomicslot"
	"github.com/limitgen/limitgen/internal/reference"
)

// FuzzInFlight runs an in-flight rule and a sequence of acquisitions,
// releases (of any slot handed out: second and late releases included), peeks,
// sweeps and changes of the numbers (raised, cut below the slots held, put
// back) on a few keys at explicit, non-decreasing times, against the
// runtime's table (key "g": its gate) and the reference, and fails on the
// first answer that differs. Input: the limit and hold from the first 3
// bytes, then 4 bytes an operation.
func FuzzInFlight(f *testing.F) {
	f.Add([]byte{1, 10, 0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0, 2, 0})
	f.Add([]byte{3, 200, 1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 9, 0, 3, 0, 5, 4, 0, 1, 1, 0, 0, 2})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		limit := 1 + int64(data[0]%8)
		hold := time.Duration(1+int64(binary.LittleEndian.Uint16(data[1:3]))) * time.Microsecond
		if data[0]&0x80 != 0 {
			hold += time.Duration(data[2]) // not a whole microsecond: the expiry rounds up
		}
		r, err := atomicslot.NewRule(limit, hold)
		if err != nil {
			t.Fatal(err)
		}
		tab := atomicslot.NewTable[string](r, atomicbucket.TableOptions{})
		gate := atomicslot.NewGate(r)
		ref := reference.NewInFlight(limit, hold)
		type held struct {
			key string
			id  uint64
			s   atomicslot.Slot
		}
		var slots []held
		now := int64(time.Second)
		for i, b := 0, data[3:]; len(b) >= 4; i, b = i+1, b[4:] {
			switch b[1] % 4 {
			case 1:
				now += int64(hold) * int64(b[2]) / 256
			case 2:
				now += int64(hold) * int64(b[2]) / 64
			case 3:
				now += int64(atomicbucket.SweepGrace) + int64(b[2])*int64(time.Microsecond)
			}
			key := []string{"a", "b", "g"}[b[3]%3]
			at := atomicbucket.Time(now)
			where := func() string {
				return fmt.Sprintf("op %d at %d (limit %d, hold %v, key %s)", i, now, limit, hold, key)
			}
			switch b[0] % 8 {
			case 0, 1, 2, 3:
				var s atomicslot.Slot
				var d atomicbucket.Decision
				if key == "g" {
					s, d = gate.AcquireAt(at)
				} else {
					s, d = tab.AcquireAt(key, at)
				}
				id, want := ref.Acquire(key, now)
				if d != want || s.Held() != want.Allowed {
					t.Fatalf("%s: acquire = %+v, reference %+v", where(), d, want)
				}
				if s.Held() {
					slots = append(slots, held{key, id, s})
				}
			case 4, 5:
				if len(slots) == 0 {
					continue
				}
				h := slots[int(b[2])%len(slots)]
				if got, want := h.s.ReleaseAt(at), ref.Release(h.key, h.id, now); got != want {
					t.Fatalf("%s: release of slot %d = %v, reference %v", where(), h.id, got, want)
				}
			case 6:
				var d atomicbucket.Decision
				if key == "g" {
					d = gate.PeekAt(at)
				} else {
					d = tab.PeekAt(key, at)
				}
				if want := ref.Peek(key, now); d != want {
					t.Fatalf("%s: peek = %+v, reference %+v", where(), d, want)
				}
			default:
				if b[2]&1 == 0 {
					tab.SweepAt(at)
					continue
				}
				n := atomicbucket.Numbers{Tokens: 1 + int64(b[2]>>1)%8, Period: hold * time.Duration(1+(b[2]>>4)&3) / 2}
				n.Burst = n.Tokens
				if n.Period < time.Microsecond {
					n.Period = hold
				}
				if err := tab.SetNumbers(n); err != nil {
					t.Fatalf("%s: SetNumbers(%+v): %v", where(), n, err)
				}
				if err := gate.SetNumbers(n); err != nil {
					t.Fatal(err)
				}
				ref.SetNumbers(n.Tokens, n.Period)
			}
		}
	})
}
