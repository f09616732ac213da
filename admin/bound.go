package admin

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of everything the Inspector returns. The data comes from Redis, where anyone who may
// XADD to a task stream can put a 10 MB uuid into a dead letter, and the dashboard polls it
// every few seconds.
const (
	// MaxFieldBytes caps every string and inline JSON field. A longer value is cut at a
	// UTF-8 boundary and ends in "…(N bytes)", N being its full length.
	MaxFieldBytes = 4096
	// MaxPayloadBytes caps the payload of a dead letter, which the dashboard shows inline.
	MaxPayloadBytes = 2048
	// MaxListEntries caps every list the Inspector returns, such as events, dead letters,
	// flights and consumers, and every list or map inside an entry, such as a flight's parked tasks.
	MaxListEntries = 1000
	// MaxResponseBytes caps the sum of the string fields of one listing. Entries past it
	// are left out, as if fewer had been asked for.
	MaxResponseBytes = 4 << 20
)

// Truncate returns s when it has at most limit bytes. Otherwise it returns the first limit
// bytes, cut back to a UTF-8 boundary, followed by "…(N bytes)", N being len(s).
func Truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := max(limit, 0)
	for cut > 0 && cut < len(s) && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "\uFFFD") + fmt.Sprintf("…(%d bytes)", len(s))
}

var rawMessageType = reflect.TypeFor[json.RawMessage]()

// bound caps, in place, every exported string, json.RawMessage, slice and map reachable from
// the pointer ptr: strings to fieldMax bytes, lists and maps to MaxListEntries entries. An
// inline JSON value that is too long becomes a JSON string holding its truncated text. It
// returns the bytes of strings left, an estimate of the entry's JSON size, and whether
// anything was cut.
func bound(ptr any, fieldMax int) (size int, cut bool) {
	b := bounder{max: fieldMax}
	b.walk(reflect.ValueOf(ptr).Elem())
	return b.size, b.cut
}

type bounder struct {
	max  int
	size int
	cut  bool
}

func (b *bounder) str(s string) string {
	if len(s) > b.max {
		b.cut = true
		s = Truncate(s, b.max)
	}
	b.size += len(s) + 8 // quotes, name, separators
	return s
}

func (b *bounder) walk(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if v.CanSet() {
			if s := v.String(); len(s) > b.max {
				v.SetString(b.str(s))
			} else {
				b.size += len(s) + 8
			}
		}
	case reflect.Pointer:
		if !v.IsNil() {
			b.walk(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if f := v.Field(i); f.CanSet() {
				b.walk(f)
			}
		}
	case reflect.Array:
		for i := range v.Len() {
			b.walk(v.Index(i))
		}
	case reflect.Slice:
		if !v.CanSet() || v.IsNil() {
			return
		}
		if v.Type() == rawMessageType {
			if raw := v.Bytes(); len(raw) > b.max {
				b.cut = true
				q, _ := json.Marshal(Truncate(string(raw), b.max))
				v.SetBytes(q)
			}
			b.size += v.Len()
			return
		}
		if v.Type().Elem().Kind() == reflect.Uint8 {
			if v.Len() > b.max {
				b.cut = true
				v.SetBytes(v.Bytes()[:b.max:b.max])
			}
			b.size += v.Len()
			return
		}
		if v.Len() > MaxListEntries {
			b.cut = true
			v.Set(v.Slice3(0, MaxListEntries, MaxListEntries))
		}
		for i := range v.Len() {
			b.walk(v.Index(i))
		}
	case reflect.Map:
		if v.CanSet() && !v.IsNil() {
			b.walkMap(v)
		}
	default:
		b.size += 8
	}
}

// walkMap replaces the map v with a bounded copy of at most MaxListEntries entries, each key
// and value bounded. With string keys it keeps the smallest keys.
func (b *bounder) walkMap(v reflect.Value) {
	keys := v.MapKeys()
	if v.Type().Key().Kind() == reflect.String {
		slices.SortFunc(keys, func(x, y reflect.Value) int { return strings.Compare(x.String(), y.String()) })
	}
	if len(keys) > MaxListEntries {
		b.cut = true
		keys = keys[:MaxListEntries]
	}
	out := reflect.MakeMapWithSize(v.Type(), len(keys))
	for _, k := range keys {
		nk := reflect.New(k.Type()).Elem()
		nk.Set(k)
		b.walk(nk)
		nv := reflect.New(v.Type().Elem()).Elem()
		nv.Set(v.MapIndex(k))
		b.walk(nv)
		out.SetMapIndex(nk, nv)
	}
	v.Set(out)
}

// boundList bounds every entry of list with fieldMax and keeps at most n entries, and fewer
// when their strings pass MaxResponseBytes. It reports whether anything was cut.
func boundList[T any](list []T, n int, fieldMax int) ([]T, bool) {
	cut := false
	n = min(max(n, 0), MaxListEntries)
	if len(list) > n {
		list, cut = list[:n], true
	}
	total := 0
	for i := range list {
		size, c := bound(&list[i], fieldMax)
		cut = cut || c
		total += size
		if total > MaxResponseBytes && i > 0 {
			return list[:i], true
		}
	}
	return list, cut
}
