package flight

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// A flight is one string key in Redis, its record (DESIGN.md section 2): two lines of
// tab-separated fields, a line holding the attempt log, then the result of a SUCCEEDED flight.
// lua/lib.lua writes it; ParseRecord reads it into the fields a hash of the same name would
// have held, so that readers judge a flight by field name.

// recordVersion opens every record this version writes.
const recordVersion = "f1"

// line1Fields and line2Fields name the record's fields in order, after the version tag.
var (
	line1Fields = []string{"status", "ownerToken", "attempts", "flags", "updatedAt", "usage", "heartbeatAt", "startedAt",
		"progressAt", "progress", "retryAt", "createdAt", "restoredAt"}
	line2Fields = []string{"requestKey", "stage", "tenant", "sessionId", "policy", "ownerId", "taskId", "entry",
		"errorType", "errorCode", "error", "trace"}
)

// headLine splits a record's first line into its tag and the fields of line1Fields. A line of
// the release before usage (one field fewer) reads with usage empty, so that flights an older
// consumer wrote are read during a rolling deploy.
func headLine(l string) ([]string, bool) {
	f := strings.Split(l, "\t")
	if f[0] != recordVersion {
		return nil, false
	}
	switch len(f) {
	case 1 + len(line1Fields):
		return f, true
	case len(line1Fields): // usage, after updatedAt, is missing
		return slices.Insert(f, 1+slices.Index(line1Fields, "usage"), ""), true
	}
	return nil, false
}

// secondLine splits a record's second line into the fields of line2Fields; a line of the
// release before trace, its last field, reads with trace empty.
func secondLine(l string) ([]string, bool) {
	f := strings.Split(l, "\t")
	switch len(f) {
	case len(line2Fields):
		return f, true
	case len(line2Fields) - 1:
		return append(f, ""), true
	}
	return nil, false
}

// recordFlags maps each flag letter to the field ParseRecord sets to "1" for it.
var recordFlags = map[byte]string{'h': "handover", 'f': "free", 'r': "retryable", 'i': "inline", 'm': "fenced"}

// jsonFields are the fields the record keeps as JSON strings.
var jsonFields = map[string]bool{"errorType": true, "errorCode": true, "error": true}

// logSep separates the entries of a record's attempt log.
const logSep = "\x1e"

// ErrBadRecord reports a flight record this version cannot read.
var ErrBadRecord = errors.New("flight: unreadable flight record")

// ParseRecord reads a flight record into its fields, by the names DESIGN.md section 2 gives
// them, and its result. Flags become fields of their own ("handover", "free", "retryable",
// "inline", "fenced": "1" when set; "shared": "archive" for flag a), times and tokens stay
// decimal strings, the error fields are plain text, expireAt is startedAt plus the pinned
// runningTTL, and attemptLog holds the log's entries one per line. A field never set is
// absent. resultRef names the record when the flight SUCCEEDED.
//
// raw may be the first RecordHeaderBytes of a record, as readers of its state read it: the
// result, and the attempt log when that is cut, are then incomplete or empty.
func ParseRecord(raw string) (fields map[string]string, result []byte, err error) {
	l1, rest, ok1 := strings.Cut(raw, "\n")
	l2, rest, ok2 := strings.Cut(rest, "\n")
	l3, res, _ := strings.Cut(rest, "\n")
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%w: %d bytes", ErrBadRecord, len(raw))
	}
	f1, ok1 := headLine(l1)
	f2, ok2 := secondLine(l2)
	if !ok1 || !ok2 {
		return nil, nil, fmt.Errorf("%w: header %q", ErrBadRecord, l1)
	}
	fields = make(map[string]string, 32)
	set := func(name, v string) {
		if v == "" {
			return
		}
		if jsonFields[name] {
			var s string
			if err := json.Unmarshal([]byte(v), &s); err == nil {
				v = s
			}
		}
		fields[name] = v
	}
	for i, name := range line1Fields {
		set(name, f1[i+1])
	}
	for i, name := range line2Fields {
		set(name, f2[i])
	}
	flags := fields["flags"]
	delete(fields, "flags")
	for i := 0; i < len(flags); i++ {
		if name, ok := recordFlags[flags[i]]; ok {
			fields[name] = "1"
		}
		if flags[i] == 'a' {
			fields["shared"] = "archive"
		}
	}
	if fields["status"] == string(StatusCancelled) && fields["error"] != "" {
		fields["cancelReason"] = fields["error"]
	}
	if l3 != "" {
		fields["attemptLog"] = strings.ReplaceAll(l3, logSep, "\n")
	}
	if started, err := strconv.ParseInt(fields["startedAt"], 10, 64); err == nil {
		if r := PinnedPolicy(fields["policy"]).RunningTTL; r > 0 {
			fields["expireAt"] = strconv.FormatInt(started+r.Milliseconds(), 10)
		}
	}
	if fields["status"] == string(StatusSucceeded) {
		result = []byte(res)
	}
	return fields, result, nil
}

// RecordHeaderBytes bounds what a reader of a record's state needs: its header lines, without
// a large result. Readers read this much with GETRANGE and hand it to ParseRecord.
const RecordHeaderBytes = 4096

// ReadRecordHeader reads the header lines of the record at key, a flight's record key: its
// first RecordHeaderBytes, or the whole record when its header is longer. It answers
// redis.Nil when there is no record.
func ReadRecordHeader(ctx context.Context, rdb redis.Cmdable, key string) (map[string]string, error) {
	raw, err := rdb.GetRange(ctx, key, 0, RecordHeaderBytes-1).Result()
	if err != nil {
		return nil, err
	}
	return recordHeader(ctx, rdb, key, raw)
}

// recordHeader parses raw, the first RecordHeaderBytes of the record at key, reading it whole
// when its header is longer. An empty raw is no record: redis.Nil.
func recordHeader(ctx context.Context, rdb redis.Cmdable, key, raw string) (map[string]string, error) {
	if raw == "" {
		return nil, redis.Nil
	}
	f, _, err := ParseRecord(raw)
	if err != nil && len(raw) == RecordHeaderBytes {
		if raw, err = rdb.Get(ctx, key).Result(); err != nil {
			return nil, err
		}
		f, _, err = ParseRecord(raw)
	}
	return f, err
}

// RecordHeaders reads the header lines of the records at keys in one pipeline, as
// ReadRecordHeader does for one. A key without a record has a nil map.
func RecordHeaders(ctx context.Context, rdb redis.Cmdable, keys []string) ([]map[string]string, error) {
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.GetRange(ctx, k, 0, RecordHeaderBytes-1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]map[string]string, len(keys))
	for i, k := range keys {
		f, err := recordHeader(ctx, rdb, k, cmds[i].Val())
		if err == nil {
			out[i] = f
		} else if !errors.Is(err, redis.Nil) && !errors.Is(err, ErrBadRecord) {
			return nil, err
		}
	}
	return out, nil
}

// RecordHeadBytes bounds what a reader of a record's head needs: its first line, with the
// state, in full. Readers that judge a flight's state read this much with GETRANGE, which never
// copies a large result.
const RecordHeadBytes = 512

// ParseRecordHead reads the first line of a flight record, or of its first RecordHeadBytes,
// into the fields ParseRecord names: status, ownerToken, attempts, the flags, the times and
// the progress. ok is false when raw does not start with one.
func ParseRecordHead(raw string) (fields map[string]string, ok bool) {
	l1, _, found := strings.Cut(raw, "\n")
	if !found {
		return nil, false
	}
	f1, ok := headLine(l1)
	if !ok {
		return nil, false
	}
	fields = make(map[string]string, 16)
	for i, name := range line1Fields {
		if v := f1[i+1]; v != "" {
			fields[name] = v
		}
	}
	flags := fields["flags"]
	delete(fields, "flags")
	for i := 0; i < len(flags); i++ {
		if name, ok := recordFlags[flags[i]]; ok {
			fields[name] = "1"
		}
	}
	return fields, true
}

// EncodeRecord writes a flight record from fields named as ParseRecord names them, with
// result after its header lines. Tests and fault injection use it to set up a flight as the
// scripts would have left it. It ignores expireAt, cancelReason and resultRef, which
// ParseRecord derives.
func EncodeRecord(fields map[string]string, result []byte) string {
	var flags strings.Builder
	for _, c := range []byte("hfrim") {
		if fields[recordFlags[c]] == "1" {
			flags.WriteByte(c)
		}
	}
	if fields["shared"] == "archive" {
		flags.WriteByte('a')
	}
	field := func(name string) string {
		v := fields[name]
		if name == "flags" {
			return flags.String()
		}
		if jsonFields[name] && v != "" {
			b, _ := json.Marshal(v)
			return string(b)
		}
		return clean(v)
	}
	var b strings.Builder
	b.WriteString(recordVersion)
	for _, name := range line1Fields {
		b.WriteByte('\t')
		b.WriteString(field(name))
	}
	b.WriteByte('\n')
	for i, name := range line2Fields {
		if i > 0 {
			b.WriteByte('\t')
		}
		b.WriteString(field(name))
	}
	b.WriteByte('\n')
	b.WriteString(strings.ReplaceAll(fields["attemptLog"], "\n", logSep))
	b.WriteByte('\n')
	b.Write(result)
	return b.String()
}

// RecordResult returns the result a SUCCEEDED flight's record holds, as a client reads it
// from the key an event's resultRef names; ok is false for a record of any other status.
func RecordResult(raw string) (result []byte, ok bool) {
	f, res, err := ParseRecord(raw)
	if err != nil || f["status"] != string(StatusSucceeded) {
		return nil, false
	}
	return res, true
}

// clean makes s fit a record field: its tabs and line breaks become spaces.
func clean(s string) string {
	if !strings.ContainsAny(s, "\t\r\n") {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\t' || r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}
