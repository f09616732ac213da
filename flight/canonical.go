package flight

import (
	"bytes"
	"slices"
	"unicode/utf8"
)

// maxFastDepth is the deepest nesting canonicalFast handles; deeper documents take the
// general path.
const maxFastDepth = 64

// canonicalFast is Canonical for the documents most tasks carry, in one pass and without
// decoding into interface values: its output is byte for byte what the general path (decode
// with UseNumber, encode without HTML escaping) produces. It declines (ok false) whatever it
// does not handle exactly that way, and the caller then takes the general path: invalid JSON,
// strings with escapes, control characters, invalid UTF-8 or U+2028/U+2029 (which the encoder
// rewrites), nesting deeper than maxFastDepth, and an object with a member name twice (which
// the general path refuses, naming it).
func canonicalFast(doc []byte) (out []byte, ok bool) {
	p := canonParser{in: doc}
	p.space()
	out, ok = p.value(make([]byte, 0, len(doc)), 0)
	if !ok {
		return nil, false
	}
	p.space()
	return out, p.pos == len(p.in)
}

// canonParser reads one JSON document for canonicalFast.
type canonParser struct {
	in  []byte
	pos int
}

// member is one object member: its key (raw, quotes included; keys are compared without
// them) and where its canonical value lies in the object's scratch buffer.
type member struct {
	key        []byte
	start, end int
}

func (p *canonParser) space() {
	for p.pos < len(p.in) {
		switch p.in[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// value appends the canonical form of the value at p.pos to out.
func (p *canonParser) value(out []byte, depth int) ([]byte, bool) {
	if p.pos >= len(p.in) || depth > maxFastDepth {
		return out, false
	}
	switch c := p.in[p.pos]; {
	case c == '{':
		return p.object(out, depth)
	case c == '[':
		return p.array(out, depth)
	case c == '"':
		s, ok := p.str()
		return append(out, s...), ok
	case c == 't':
		return p.literal(out, "true")
	case c == 'f':
		return p.literal(out, "false")
	case c == 'n':
		return p.literal(out, "null")
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number(out)
	}
	return out, false
}

func (p *canonParser) literal(out []byte, lit string) ([]byte, bool) {
	if !bytes.HasPrefix(p.in[p.pos:], []byte(lit)) {
		return out, false
	}
	p.pos += len(lit)
	return append(out, lit...), true
}

// number copies a number literal as it is (UseNumber keeps its text), after checking its
// grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (p *canonParser) number(out []byte) ([]byte, bool) {
	in, i := p.in, p.pos
	if in[i] == '-' {
		i++
	}
	switch {
	case i < len(in) && in[i] == '0':
		i++
	case i < len(in) && in[i] >= '1' && in[i] <= '9':
		i = digits(in, i)
	default:
		return out, false
	}
	if i < len(in) && in[i] == '.' {
		j := digits(in, i+1)
		if j == i+1 {
			return out, false
		}
		i = j
	}
	if i < len(in) && (in[i] == 'e' || in[i] == 'E') {
		i++
		if i < len(in) && (in[i] == '+' || in[i] == '-') {
			i++
		}
		j := digits(in, i)
		if j == i {
			return out, false
		}
		i = j
	}
	out = append(out, in[p.pos:i]...)
	p.pos = i
	return out, true
}

func digits(in []byte, i int) int {
	for i < len(in) && in[i] >= '0' && in[i] <= '9' {
		i++
	}
	return i
}

// str returns the string at p.pos, quotes included, when the encoder would write it back
// unchanged: no escape, no control character, valid UTF-8 without U+2028 and U+2029.
func (p *canonParser) str() ([]byte, bool) {
	start := p.pos
	for i := start + 1; i < len(p.in); i++ {
		switch c := p.in[i]; {
		case c == '"':
			s := p.in[start : i+1]
			p.pos = i + 1
			return s, utf8.Valid(s)
		case c == '\\' || c < 0x20:
			return nil, false
		case c == 0xE2 && i+2 < len(p.in) && p.in[i+1] == 0x80 && (p.in[i+2] == 0xA8 || p.in[i+2] == 0xA9):
			return nil, false
		}
	}
	return nil, false
}

func (p *canonParser) array(out []byte, depth int) ([]byte, bool) {
	p.pos++ // [
	out = append(out, '[')
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == ']' {
		p.pos++
		return append(out, ']'), true
	}
	for {
		var ok bool
		p.space()
		if out, ok = p.value(out, depth+1); !ok {
			return out, false
		}
		p.space()
		if p.pos >= len(p.in) {
			return out, false
		}
		switch p.in[p.pos] {
		case ',':
			p.pos++
			out = append(out, ',')
		case ']':
			p.pos++
			return append(out, ']'), true
		default:
			return out, false
		}
	}
}

// object appends the object's members sorted by key (byte order, as the encoder sorts a
// map's keys). It declines an object with two members of the same key: keys hold no escape
// here, so equal bytes are equal names.
func (p *canonParser) object(out []byte, depth int) ([]byte, bool) {
	p.pos++ // {
	p.space()
	if p.pos < len(p.in) && p.in[p.pos] == '}' {
		p.pos++
		return append(out, '{', '}'), true
	}
	var members []member
	var vals []byte
	for {
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != '"' {
			return out, false
		}
		key, ok := p.str()
		if !ok {
			return out, false
		}
		p.space()
		if p.pos >= len(p.in) || p.in[p.pos] != ':' {
			return out, false
		}
		p.pos++
		p.space()
		start := len(vals)
		if vals, ok = p.value(vals, depth+1); !ok {
			return out, false
		}
		members = append(members, member{key: key, start: start, end: len(vals)})
		p.space()
		if p.pos >= len(p.in) {
			return out, false
		}
		if p.in[p.pos] == ',' {
			p.pos++
			continue
		}
		if p.in[p.pos] != '}' {
			return out, false
		}
		p.pos++
		break
	}
	slices.SortFunc(members, func(a, b member) int {
		return bytes.Compare(a.key[1:len(a.key)-1], b.key[1:len(b.key)-1])
	})
	for i := 1; i < len(members); i++ {
		if bytes.Equal(members[i-1].key, members[i].key) {
			return out, false
		}
	}
	out = append(out, '{')
	for i, m := range members {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, m.key...)
		out = append(out, ':')
		out = append(out, vals[m.start:m.end]...)
	}
	return append(out, '}'), true
}
