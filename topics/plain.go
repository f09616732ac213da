package topics

import (
	"encoding/json"
	"math"
	"strconv"
)

// decodePlain fills t from payload, valid UTF-8 whose member names walkTask accepted, without
// encoding/json's reflection, and reports whether it could. It can when the payload is valid
// JSON and every member is plain: a string field's value a string without escapes, attempt an
// integer, input and params any value but null. Then t is exactly what json.Unmarshal gives
// (FuzzDecodePlain holds it to that); otherwise t is left partly filled and the caller
// unmarshals the payload, so that every refusal keeps encoding/json's error.
func decodePlain(payload []byte, t *Task) bool {
	if !json.Valid(payload) {
		return false
	}
	i := skipSpace(payload, 0)
	if i >= len(payload) || payload[i] != '{' {
		return false
	}
	i = skipSpace(payload, i+1)
	if i < len(payload) && payload[i] == '}' {
		return true
	}
	for i < len(payload) {
		// A member name: walkTask let through only exact task field names, so a name with an
		// escape is the one case to hand back.
		if payload[i] != '"' {
			return false
		}
		end := plainStringEnd(payload, i)
		if end < 0 {
			return false
		}
		name := payload[i+1 : end-1]
		i = skipSpace(payload, end)
		if i >= len(payload) || payload[i] != ':' {
			return false
		}
		i = skipSpace(payload, i+1)
		end = valueEnd(payload, i)
		if end < 0 || !setPlain(t, name, payload[i:end]) {
			return false
		}
		i = skipSpace(payload, end)
		if i >= len(payload) {
			return false
		}
		switch payload[i] {
		case ',':
			i = skipSpace(payload, i+1)
		case '}':
			return true
		default:
			return false
		}
	}
	return false
}

// setPlain sets the field named name to the JSON value v, or reports false when v is not plain
// for that field.
func setPlain(t *Task, name, v []byte) bool {
	if v[0] == 'n' { // null: encoding/json leaves strings alone and gives raw fields "null"
		return false
	}
	switch f := taskFieldIndex(name); f {
	case -1:
		return false
	case inputField:
		t.Input = v // DecodeTask compacts it into a copy of its own
	case paramsField:
		t.Params = v
	case attemptField:
		return plainInt(v, &t.Attempt)
	default:
		if v[0] != '"' || plainStringEnd(v, 0) != len(v) {
			return false
		}
		*t.stringFields()[f] = string(v[1 : len(v)-1])
	}
	return true
}

// stringFields returns t's string fields by their index in taskFields (nil for the others).
func (t *Task) stringFields() [len(taskFields)]*string {
	return [len(taskFields)]*string{&t.TaskID, &t.Stage, &t.Tenant, &t.SessionID, &t.RequestKey, nil,
		&t.ModelVersion, &t.PromptVersion, &t.Deadline, nil, &t.EnqueuedAt, nil, &t.NotBefore, &t.Traceparent,
		&t.Tracestate}
}

// plainInt sets *n to the JSON number v when it is an integer literal that fits an int, as
// encoding/json reads one into an int.
func plainInt(v []byte, n *int) bool {
	for _, c := range v {
		if (c < '0' || c > '9') && c != '-' {
			return false // a fraction, an exponent, or not a number
		}
	}
	x, err := strconv.ParseInt(string(v), 10, strconv.IntSize)
	if err != nil {
		return false
	}
	*n = int(x)
	return true
}

// plainStringEnd returns the offset just past the string that starts with the quote at
// data[i], or -1 when it holds an escape or does not end.
func plainStringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '"':
			return j + 1
		case '\\':
			return -1
		}
	}
	return -1
}

// valueEnd returns the offset just past the value that starts at data[i] in valid JSON, or -1
// when none starts there.
func valueEnd(data []byte, i int) int {
	if i >= len(data) {
		return -1
	}
	switch data[i] {
	case '"':
		return stringEnd(data, i)
	case '{', '[':
		end, _ := skipNested(data, i+1, 1, math.MaxInt) // the offset of the closing bracket
		if end >= len(data) {
			return -1
		}
		return end + 1
	}
	// A literal: a number, true, false or null runs to the next delimiter.
	j := i
	for j < len(data) {
		switch data[j] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return j
		}
		j++
	}
	return j
}

// stringEnd returns the offset just past the string, escapes and all, that starts with the
// quote at data[i] in valid JSON, or -1 when it does not end.
func stringEnd(data []byte, i int) int {
	for j := i + 1; j < len(data); j++ {
		switch data[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

// skipSpace returns the offset of the first byte at or after i that is not JSON white space.
func skipSpace(data []byte, i int) int {
	for i < len(data) {
		switch data[i] {
		case ' ', '\t', '\n', '\r':
			i++
		default:
			return i
		}
	}
	return i
}
