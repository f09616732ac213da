package topics

import (
	"bytes"
	"hash/maphash"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Bounds of the path of a duplicate member in an error detail.
const (
	// maxPathBytes bounds the whole path; a longer one keeps its first step and as many of its
	// last steps as fit, with "…" between them.
	maxPathBytes = 160
	// maxStepName bounds a member name in a path, as written (quoted and escaped); a longer
	// one is cut and ends in "…".
	maxStepName = 32
)

// nameSpan is one member name of an object the scan has open: data[start:end], the name
// between its quotes, or, when unescaped is set, memberScan.scratch[start:end], the name
// after JSON unescaping.
type nameSpan struct {
	start, end int
	unescaped  bool
}

// container is an array or object the scan has open.
type container struct {
	object bool
	// names is the index in the scan's names of the object's first member name, and
	// scratch the length of memberScan.scratch when the object opened.
	names, scratch int
	// at is, in an object, the index in the scan's names of the member being read (-1
	// before the first); in an array, the index of the element being read.
	at int
}

// memberScan finds a member name that occurs twice in one object of a JSON value, in the
// pass that bounds the value's nesting: every object keeps the names of its members until
// it closes, and then they are compared. Time and memory are linear in the value's size.
// The zero value is ready to use; one memberScan scans one document at a time.
type memberScan struct {
	data    []byte
	scratch []byte // unescaped names
	found   bool   // a duplicate was found; the scan no longer looks at names
	path    string // its path
	// table and seed are duplicate's hash table for objects of many members.
	table  []int
	seed   maphash.Seed
	seeded bool
}

// scan scans the array or object that opens at data[i], nested depth deep counting itself,
// up to the byte that closes it, and answers that byte's index (len(data) when data ends
// first) and true. It stops and answers false as soon as the nesting exceeds maxDepth; it
// checks no other syntax rule (the caller's syntax check does). The first duplicate member
// name found is kept in s.found and s.path, its path starting with root, and the scan goes
// on to check the depth.
//
// The open containers and their member names are kept in slices local to scan, which
// start in arrays on its stack: most values need no allocation.
func (s *memberScan) scan(data []byte, i, depth, maxDepth int, root string) (int, bool) {
	s.data = data
	var (
		openBuf [8]container
		nameBuf [16]nameSpan
		open    = append(openBuf[:0], s.container(data[i] == '{', 0))
		names   = nameBuf[:0]
	)
	wantName := data[i] == '{' // the next string is a member name
	for i++; i < len(data); i++ {
		switch c := data[i]; c {
		case '"': // a string: find its closing quote
			q := i
			escaped := false // it holds a backslash
			for i++; i < len(data) && data[i] != '"'; i++ {
				if data[i] == '\\' {
					i++
					escaped = true
				}
			}
			if wantName && i < len(data) {
				names = s.name(&open[len(open)-1], names, q, i, escaped)
			}
			wantName = false
		case '[', '{':
			depth++
			if depth > maxDepth {
				return 0, false
			}
			open = append(open, s.container(c == '{', len(names)))
			wantName = c == '{'
		case ']', '}':
			top := open[len(open)-1]
			open = open[:len(open)-1]
			if top.object {
				names = s.close(top, open, names, root)
			}
			if len(open) == 0 {
				return i, true
			}
			depth--
			wantName = false
		case ',':
			if top := &open[len(open)-1]; top.object {
				wantName = true
			} else {
				top.at++
			}
		}
	}
	return min(i, len(data)), true
}

// container returns a newly opened array or object, whose first member name, if any, will
// be names[first].
func (s *memberScan) container(object bool, first int) container {
	at := 0
	if object {
		at = -1
	}
	return container{object: object, names: first, scratch: len(s.scratch), at: at}
}

// name appends to names the member name quoted at data[q:e+1] of the innermost open
// container, top, when that is an object, and returns names.
func (s *memberScan) name(top *container, names []nameSpan, q, e int, escaped bool) []nameSpan {
	if s.found || !top.object {
		return names
	}
	n := nameSpan{start: q + 1, end: e}
	if escaped || !utf8.Valid(s.data[q+1:e]) {
		// Rare: unescape as a JSON decoder does. A malformed name is compared as it is: the
		// syntax check refuses it.
		if out, ok := appendUnquoted(s.scratch, s.data[q+1:e]); ok {
			n = nameSpan{start: len(s.scratch), end: len(out), unescaped: true}
			s.scratch = out
		}
	}
	top.at = len(names)
	if len(names) == cap(names) { // double: append grows big slices by a quarter
		names = slices.Grow(names, len(names))
	}
	return append(names, n)
}

// appendUnquoted appends to dst the contents of a JSON string, quotes removed, as
// encoding/json decodes them: escapes resolved ("\u0061" is a), and an escaped lone or
// invalid surrogate and every byte of invalid UTF-8 read as U+FFFD. It answers false for a
// malformed string.
func appendUnquoted(dst, s []byte) ([]byte, bool) {
	for r := 0; r < len(s); {
		switch c := s[r]; {
		case c == '\\':
			if r+1 >= len(s) {
				return dst, false
			}
			switch e := s[r+1]; e {
			case '"', '\\', '/':
				dst = append(dst, e)
			case 'b':
				dst = append(dst, '\b')
			case 'f':
				dst = append(dst, '\f')
			case 'n':
				dst = append(dst, '\n')
			case 'r':
				dst = append(dst, '\r')
			case 't':
				dst = append(dst, '\t')
			case 'u':
				rr := hex4(s[r:])
				if rr < 0 {
					return dst, false
				}
				r += 6
				if utf16.IsSurrogate(rr) {
					// A pair only when the next escape completes it; else U+FFFD, and the
					// next escape is read on its own.
					if dec := utf16.DecodeRune(rr, hex4(s[r:])); dec != utf8.RuneError {
						r += 6
						dst = utf8.AppendRune(dst, dec)
						continue
					}
					rr = utf8.RuneError
				}
				dst = utf8.AppendRune(dst, rr)
				continue
			default:
				return dst, false
			}
			r += 2
		case c < ' ':
			return dst, false
		case c < utf8.RuneSelf:
			dst = append(dst, c)
			r++
		default:
			rr, size := utf8.DecodeRune(s[r:])
			dst = utf8.AppendRune(dst, rr)
			r += size
		}
	}
	return dst, true
}

// hex4 returns the code unit of the \uXXXX escape s starts with, or -1.
func hex4(s []byte) rune {
	if len(s) < 6 || s[0] != '\\' || s[1] != 'u' {
		return -1
	}
	var r rune
	for _, c := range s[2:6] {
		switch {
		case isDigit(c):
			c -= '0'
		case 'a' <= c && c <= 'f':
			c -= 'a' - 10
		case 'A' <= c && c <= 'F':
			c -= 'A' - 10
		default:
			return -1
		}
		r = r<<4 | rune(c)
	}
	return r
}

func (s *memberScan) bytes(n nameSpan) []byte {
	if n.unescaped {
		return s.scratch[n.start:n.end]
	}
	return s.data[n.start:n.end]
}

// close compares the member names of the object obj, just closed inside the containers
// still open, and drops them: it returns names without them.
func (s *memberScan) close(obj container, open []container, names []nameSpan, root string) []nameSpan {
	if s.found {
		return names[:obj.names]
	}
	if dup, ok := s.duplicate(names[obj.names:]); ok {
		s.found, s.path = true, s.pathTo(root, open, names, dup)
	}
	s.scratch = s.scratch[:obj.scratch]
	return names[:obj.names]
}

// maxPairs is the number of names up to which duplicate compares every pair.
const maxPairs = 16

// duplicate returns a name that occurs more than once among names (the second occurrence
// of the first one repeated, in document order), and true. Few names are compared pair by
// pair; more go through a hash table with a seed of this scan's own, so that no payload can
// make many names collide: the work is linear in the names' bytes.
func (s *memberScan) duplicate(names []nameSpan) ([]byte, bool) {
	if len(names) <= maxPairs {
		for j := 1; j < len(names); j++ {
			b := s.bytes(names[j])
			for i := range j {
				if bytes.Equal(b, s.bytes(names[i])) {
					return b, true
				}
			}
		}
		return nil, false
	}
	if !s.seeded {
		s.seed, s.seeded = maphash.MakeSeed(), true
	}
	size := 1
	for size < 2*len(names) {
		size <<= 1
	}
	if cap(s.table) < size {
		s.table = make([]int, size)
	} else {
		s.table = s.table[:size]
		clear(s.table)
	}
	mask := uint64(size - 1)
	for j, n := range names {
		b := s.bytes(n)
		for k := maphash.Bytes(s.seed, b) & mask; ; k = (k + 1) & mask {
			at := s.table[k] // index in names + 1; 0 is empty
			if at == 0 {
				s.table[k] = j + 1
				break
			}
			if bytes.Equal(b, s.bytes(names[at-1])) {
				return b, true
			}
		}
	}
	return nil, false
}

// pathTo returns the path of the member name in the object just closed, inside the
// containers still open, whose member names are in names: see nameStep for the steps and
// maxPathBytes for the bound.
func (s *memberScan) pathTo(root string, open []container, names []nameSpan, name []byte) string {
	steps := make([]string, 0, len(open)+1)
	for _, c := range open {
		switch {
		case !c.object:
			steps = append(steps, "["+strconv.Itoa(c.at)+"]")
		case c.at >= 0: // (not in malformed JSON such as {{)
			steps = append(steps, nameStep(s.bytes(names[c.at])))
		}
	}
	steps = append(steps, nameStep(name))
	n := len(root)
	for _, st := range steps {
		n += len(st)
	}
	if n <= maxPathBytes {
		return root + strings.Join(steps, "")
	}
	// Keep the last steps that fit after root and "…": the duplicate itself always does.
	keep, n := len(steps), len(root)+len("…")
	for keep > 0 && n+len(steps[keep-1]) <= maxPathBytes {
		keep--
		n += len(steps[keep])
	}
	return root + "…" + strings.Join(steps[keep:], "")
}

// nameStep writes a member name as a step of a path: .name when the name is an identifier
// ([A-Za-z_][A-Za-z0-9_]*) of at most maxStepName bytes, else ["name"] with the name as a
// JSON string (", \ and control characters escaped), cut to maxStepName bytes and ended in
// "…" when longer.
func nameStep(name []byte) string {
	if len(name) > 0 && len(name) <= maxStepName && isIdent(name) {
		return "." + string(name)
	}
	var b strings.Builder
	b.WriteString(`["`)
	n := 0
	for _, r := range string(name) {
		var w string
		switch {
		case r == '"' || r == '\\':
			w = `\` + string(r)
		case r < 0x20:
			w = `\u00` + strconv.FormatUint(uint64(r)>>4, 16) + strconv.FormatUint(uint64(r)&0xf, 16)
		default:
			w = string(r)
		}
		if n+len(w) > maxStepName {
			b.WriteString("…")
			break
		}
		b.WriteString(w)
		n += len(w)
	}
	b.WriteString(`"]`)
	return b.String()
}

func isIdent(name []byte) bool {
	for i, c := range name {
		if !(isLower(c) || isUpper(c) || c == '_' || (i > 0 && isDigit(c))) {
			return false
		}
	}
	return true
}

// DuplicateMember returns the path of a member name that occurs twice in one object of the
// JSON document doc, compared after JSON unescaping, and true; or "" and false when there
// is none. The path starts with root and is written as in the detail of a duplicate_field
// refusal: .name or ["name"] for a member, [i] for an array element, at most 160 bytes.
// doc is scanned once, to a nesting of 10000 (encoding/json's own limit); doc need not be
// valid JSON, but then the answer means nothing.
func DuplicateMember(root string, doc []byte) (string, bool) {
	var s memberScan
	inString := false
	for i := 0; i < len(doc) && !s.found; i++ {
		c := doc[i]
		if inString {
			switch c {
			case '\\':
				i++
			case '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			end, ok := s.scan(doc, i, 1, 10000, root)
			if !ok {
				return "", false
			}
			i = end
		}
	}
	return s.path, s.found
}

// duplicateMember is the refusal of a task whose field (input or params) holds a member
// name twice in one object, at path.
func duplicateMember(field, path string) error {
	return invalid(ReasonDuplicateField, field, "the member "+path+" occurs more than once")
}
