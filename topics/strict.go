package topics

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// taskFields are the JSON names of Task's fields, in struct order: a task payload's object
// has no other member, and none twice. Bit i of a seen set stands for taskFields[i].
var taskFields = [...]string{"taskId", "stage", "tenant", "sessionId", "requestKey", "input",
	"modelVersion", "promptVersion", "deadline", "attempt", "enqueuedAt", "params", "notBefore", "traceparent",
	"tracestate"}

// taskFieldIndex returns the index in taskFields of the exactly spelled name, or -1.
func taskFieldIndex(name []byte) int {
	switch string(name) { // no allocation: the compiler compares the bytes
	case "taskId":
		return 0
	case "stage":
		return 1
	case "tenant":
		return 2
	case "sessionId":
		return 3
	case "requestKey":
		return 4
	case "input":
		return 5
	case "modelVersion":
		return 6
	case "promptVersion":
		return 7
	case "deadline":
		return 8
	case "attempt":
		return 9
	case "enqueuedAt":
		return 10
	case "params":
		return 11
	case "notBefore":
		return 12
	case "traceparent":
		return 13
	case "tracestate":
		return 14
	}
	return -1
}

// The indexes in taskFields of the fields whose values walkTask scans for duplicate names.
const (
	inputField  = 5
	paramsField = 11
)

// attemptField is the index in taskFields of attempt, the one number field.
const attemptField = 9

// walkTask is walkJSON for a whole task payload: in the same single pass it checks the
// nesting depth, the member names of the top-level object, which must be task fields
// spelled exactly, each at most once, and the member names of every object inside input
// and params, which must be unique within their object; names are compared after JSON
// unescaping. It returns the first byte that is not white space. A depth error wins over a
// name error (the first one is kept until the scan ends), so that no payload makes the scan
// stop early on a name and leave deep nesting unchecked. Only the first top-level value is
// looked at; the caller's syntax check refuses trailing data. Values are not looked at.
func walkTask(data []byte, maxDepth int) (byte, error) {
	var (
		first    byte
		depth    int
		inString bool
		top      bool // inside the first top-level value, and it is an object
		wantName bool // the next string at depth 1 of top is a member name
		nameAt   = -1 // offset of the opening quote of the member name being scanned
		escaped  bool // that name holds a backslash
		member   = -1 // index in taskFields of the last member name read, or -1
		seen     uint16
		nameErr  error
		members  memberScan // of input and params
	)
	for i := 0; i < len(data); i++ {
		c := data[i]
		if inString {
			switch c {
			case '\\':
				i++
				escaped = true
			case '"':
				inString = false
				if nameAt >= 0 {
					if nameErr == nil {
						member, nameErr = checkName(data[nameAt:i+1], escaped, &seen)
					}
					nameAt = -1
				}
			}
			continue
		}
		switch c {
		case ' ', '\t', '\n', '\r':
			continue
		case '"':
			inString = true
			if wantName && depth == 1 {
				nameAt, escaped, wantName = i, false, false
			}
		case '[', '{':
			depth++
			if depth > maxDepth {
				return 0, tooDeep("", maxDepth)
			}
			if first == 0 && c == '{' {
				top, wantName = true, true
			}
			if depth > 1 { // a member's value: scan it at once
				var end int
				if top && depth == 2 && nameErr == nil && (member == inputField || member == paramsField) {
					ok := false
					if end, ok = members.scan(data, i, depth, maxDepth, taskFields[member]); !ok {
						return 0, tooDeep("", maxDepth)
					}
					if members.found {
						nameErr = duplicateMember(taskFields[member], members.path)
					}
				} else {
					var err error
					if end, err = skipNested(data, i+1, depth, maxDepth); err != nil {
						return 0, err
					}
				}
				i, depth = end, depth-1
				continue
			}
		case ']', '}':
			depth--
			if depth <= 0 {
				top, wantName = false, false
			}
		case ',':
			if top && depth == 1 {
				wantName = true
			}
		}
		if first == 0 {
			first = c
		}
	}
	if first == 0 {
		return 0, invalid(ReasonBadJSON, "", "empty")
	}
	if nameErr != nil {
		return 0, nameErr
	}
	return first, nil
}

// tooDeep is the refusal of nesting past maxDepth in field ("" for the whole payload).
func tooDeep(field string, maxDepth int) error {
	return invalid(ReasonTooDeep, field, fmt.Sprintf("nesting exceeds %d", maxDepth))
}

// skipNested scans data from i, inside arrays and objects nested depth deep, up to the byte
// that closes the outermost of them, and answers its index (len(data) when data ends first).
// It fails as soon as the nesting exceeds maxDepth. It is walkTask's inner loop for the
// values of members other than input and params, without the work on names.
func skipNested(data []byte, i, depth, maxDepth int) (int, error) {
	outer := depth
	inString := false
	for ; i < len(data); i++ {
		c := data[i]
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
			depth++
			if depth > maxDepth {
				return 0, tooDeep("", maxDepth)
			}
		case ']', '}':
			if depth == outer {
				return i, nil
			}
			depth--
		}
	}
	return i, nil
}

// checkName checks one member name of the payload object, quoted as it appears in the
// payload, records it in seen and returns its index in taskFields.
func checkName(quoted []byte, escaped bool, seen *uint16) (int, error) {
	name := quoted[1 : len(quoted)-1]
	if escaped { // rare: unescape as every JSON parser does ("\u0074enant" is tenant)
		var s string
		if err := json.Unmarshal(quoted, &s); err != nil {
			return -1, invalid(ReasonBadJSON, "", "bad escape in a field name")
		}
		name = []byte(s)
	}
	i := taskFieldIndex(name)
	if i < 0 {
		return -1, invalid(ReasonUnknownField, "", unknownDetail(string(name)))
	}
	if *seen&(1<<i) != 0 {
		return -1, invalid(ReasonDuplicateField, taskFields[i], "the field occurs more than once")
	}
	*seen |= 1 << i
	return i, nil
}

// unknownDetail describes an unknown member name, quoting at most 40 bytes of it, and names
// the task field it folds to, if any (encoding/json would have taken it for that field).
func unknownDetail(name string) string {
	q := name
	if len(q) > 40 {
		q = q[:40] + "…"
	}
	d := fmt.Sprintf("%q is not a task field", q)
	for _, f := range taskFields {
		if strings.EqualFold(name, f) {
			return d + fmt.Sprintf(" (field names are exact: %q)", f)
		}
	}
	return d
}

// NamedField returns the value of the top-level string member name of payload, read the
// way DecodeTask reads names: payload must be one valid JSON object in which name occurs
// exactly once, spelled exactly (after JSON unescaping), with a JSON string value. It
// answers "" otherwise, so that a refused payload that is ambiguous about a field (two
// taskIds, a "TaskId") names nothing. It does not check the value's syntax rules.
func NamedField(payload []byte, name string) string {
	if p := bytes.TrimLeft(payload, " \t\r\n"); len(p) == 0 || p[0] != '{' || !json.Valid(payload) {
		return ""
	}
	// encoding/json's token reader unescapes member names and compares nothing itself: the
	// comparison below is exact.
	dec := json.NewDecoder(bytes.NewReader(payload))
	if _, err := dec.Token(); err != nil { // {
		return ""
	}
	var value string
	count := 0
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return ""
		}
		if key, _ := tok.(string); key == name {
			count++
			if json.Unmarshal(raw, &value) != nil {
				value = ""
			}
		}
	}
	if count != 1 {
		return ""
	}
	return value
}

// CheckFieldNames reports, as DecodeTask would (an *InvalidTaskError with ReasonUnknownField
// or ReasonDuplicateField, or a syntax or depth error), a task payload whose top-level object
// has a member that is not a Task field spelled exactly, or has one twice, or whose input or
// params hold an object with a member name twice. It checks nothing else: for producers that
// fill missing fields before they validate the task.
func CheckFieldNames(payload []byte, lim Limits) error {
	lim.setDefaults()
	_, err := walkTask(payload, lim.MaxJSONDepth)
	return err
}
