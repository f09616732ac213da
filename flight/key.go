package flight

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strconv"
	"strings"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// KeyParams are the parts of a semantic key (DESIGN.md section 8).
type KeyParams struct {
	// Stage is the pipeline stage, e.g. "interview-evaluation". Required.
	Stage string
	// Tenant is always part of the key: no result is shared across tenants. Required.
	Tenant string
	// Input is the task input, any JSON. Key order and whitespace do not change the key.
	Input json.RawMessage
	// ModelVersion and PromptVersion enter the hash: a new prompt is a new key.
	ModelVersion, PromptVersion string
	// Params are optional extra key parameters, any JSON, that change the answer.
	// Irrelevant fields such as timestamps and request ids must stay out of Input and Params.
	Params json.RawMessage
	// Version is the key scheme version. Defaults to 1.
	Version int
}

var (
	stageRe  = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,63}$`)
	tenantRe = regexp.MustCompile(`^[a-z0-9_-]{1,64}$`)
	userKey  = regexp.MustCompile(`^[A-Za-z0-9._:/=+-]{1,200}$`)
)

// SemanticKey returns ai:<stage>:v<version>:<tenant>:<sha256 of the canonical JSON of input,
// modelVersion, promptVersion and params>. Two inputs that differ only in key order or
// whitespace get the same key. Numbers are compared by their literal text, so 1 and 1.0
// differ. Input or params with an object that has a member name twice are refused with
// ErrInvalidKey and ErrDuplicateMember: a canonical form would keep one of them, a model
// reads both.
func SemanticKey(p KeyParams) (string, error) {
	if err := checkScope(p.Stage, p.Tenant); err != nil {
		return "", err
	}
	if p.Version == 0 {
		p.Version = 1
	}
	input, err := Canonical(p.Input)
	if err != nil {
		return "", fmt.Errorf("%w: input: %w", ErrInvalidKey, err)
	}
	params := json.RawMessage("null")
	if len(bytes.TrimSpace(p.Params)) > 0 {
		if params, err = Canonical(p.Params); err != nil {
			return "", fmt.Errorf("%w: params: %w", ErrInvalidKey, err)
		}
	}
	doc, err := keyDocument(input, params, p.ModelVersion, p.PromptVersion)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrInvalidKey, err)
	}
	sum := sha256.Sum256(doc)
	return scopedKey(KeyScope{Stage: p.Stage, Version: p.Version, Tenant: p.Tenant}, hex.EncodeToString(sum[:])), nil
}

// KeyScope is what a flight key built by SemanticKey or NamespacedKey names before its hash
// or request key: ai:<stage>:v<version>:<tenant>:<rest>. The "ai" is the key scheme's name,
// the same in every keyspace.
type KeyScope struct {
	Stage   string
	Version int
	Tenant  string
}

// scopedKey is the one place flight keys are built.
func scopedKey(s KeyScope, rest string) string {
	return "ai:" + s.Stage + ":v" + strconv.Itoa(s.Version) + ":" + s.Tenant + ":" + rest
}

// ParseKey returns the scope of a key built by SemanticKey or NamespacedKey. ok is false
// for any other key, since a Coordinator caller may run flights under keys of its own.
func ParseKey(key string) (s KeyScope, ok bool) {
	parts := strings.SplitN(key, ":", 5)
	if len(parts) != 5 || parts[0] != "ai" || parts[4] == "" || !validStage(parts[1]) || !validTenant(parts[3]) {
		return KeyScope{}, false
	}
	n, isV := strings.CutPrefix(parts[2], "v")
	v, err := strconv.Atoi(n)
	if !isV || err != nil || v < 1 || strings.TrimLeft(n, "0123456789") != "" {
		return KeyScope{}, false
	}
	return KeyScope{Stage: parts[1], Version: v, Tenant: parts[3]}, true
}

// keyDocument is the document a semantic key hashes: json.Marshal of {input, modelVersion,
// promptVersion, params}, which escapes <, > and &, also inside the raw input and params.
// When none of the parts holds a byte that Marshal would rewrite, it is built by hand.
func keyDocument(input, params json.RawMessage, model, prompt string) ([]byte, error) {
	if plainJSON(input) && plainJSON(params) && plainString(model) && plainString(prompt) {
		doc := make([]byte, 0, len(input)+len(params)+len(model)+len(prompt)+64)
		doc = append(doc, `{"input":`...)
		doc = append(doc, input...)
		doc = append(doc, `,"modelVersion":"`...)
		doc = append(doc, model...)
		doc = append(doc, `","promptVersion":"`...)
		doc = append(doc, prompt...)
		doc = append(doc, `","params":`...)
		doc = append(doc, params...)
		return append(doc, '}'), nil
	}
	return json.Marshal(struct {
		Input         json.RawMessage `json:"input"`
		ModelVersion  string          `json:"modelVersion"`
		PromptVersion string          `json:"promptVersion"`
		Params        json.RawMessage `json:"params"`
	}{input, model, prompt, params})
}

// plainJSON reports whether Marshal copies the canonical document b unchanged. b must hold
// no <, > or &, which Marshal escapes, and no raw U+2028 or U+2029, which Marshal escapes
// too. A canonical form never holds those two raw: canonicalFast declines them and the
// general path escapes them, so that check only guards the claim.
func plainJSON(b []byte) bool {
	return bytes.IndexAny(b, "<>&\u2028\u2029") < 0
}

// plainString reports whether Marshal writes s as it is between quotes: printable ASCII
// without ", \\, <, > or &.
func plainString(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// NamespacedKey turns a caller-supplied request key into a flight key that cannot reach
// another tenant's or stage's flight: ai:<stage>:v<version>:<tenant>:rk:<requestKey>. The
// caller's key may hold only [A-Za-z0-9._:/=+-], so no braces, '*' or whitespace, and is at
// most 200 bytes.
func NamespacedKey(stage, tenant, requestKey string, version int) (string, error) {
	if err := checkScope(stage, tenant); err != nil {
		return "", err
	}
	if !userKey.MatchString(requestKey) {
		return "", fmt.Errorf("%w: requestKey %q: want 1-200 of [A-Za-z0-9._:/=+-]", ErrInvalidKey, requestKey)
	}
	if version == 0 {
		version = 1
	}
	return scopedKey(KeyScope{Stage: stage, Version: version, Tenant: tenant}, "rk:"+requestKey), nil
}

// validStage and validTenant are stageRe and tenantRe without the regexp engine. They run
// for every task.
func validStage(s string) bool {
	if len(s) == 0 || len(s) > 64 || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

func validTenant(s string) bool {
	if len(s) == 0 || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
			return false
		}
	}
	return true
}

func checkScope(stage, tenant string) error {
	if !validStage(stage) {
		return fmt.Errorf("%w: stage %q: want [a-z0-9-], at most 64", ErrInvalidKey, stage)
	}
	if !validTenant(tenant) {
		return fmt.Errorf("%w: tenant %q: want [a-z0-9_-], 1-64", ErrInvalidKey, tenant)
	}
	return nil
}

// Canonical returns the canonical form of a JSON document: object keys sorted, no
// insignificant whitespace, numbers kept as written. It rejects invalid or trailing JSON. It
// also rejects an object with a member name twice, compared after JSON unescaping, so
// "\u0061" is "a". That error wraps ErrDuplicateMember and names the member's path from $,
// as in $.rubric[2].id.
func Canonical(doc json.RawMessage) (json.RawMessage, error) {
	if out, ok := canonicalFast(doc); ok {
		return out, nil
	}
	return canonicalGeneral(doc)
}

// canonicalGeneral is Canonical for any document: decoded with UseNumber, checked for
// duplicate member names, encoded without HTML escaping.
func canonicalGeneral(doc json.RawMessage) (json.RawMessage, error) {
	if len(bytes.TrimSpace(doc)) == 0 {
		return nil, errors.New("empty JSON")
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("invalid JSON: trailing data")
	}
	if path, dup := topics.DuplicateMember("$", doc); dup {
		return nil, fmt.Errorf("%w %s", ErrDuplicateMember, path)
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// TaskKey returns the flight key of a task: its requestKey namespaced by tenant and stage when
// the producer gave one, else the semantic key of its input, versions and params. Consumers
// run the task's flight under it; clients find the flight's outcome by it.
func TaskKey(t topics.Task) (string, error) {
	if t.RequestKey != "" {
		return NamespacedKey(t.Stage, t.Tenant, t.RequestKey, 1)
	}
	return SemanticKey(KeyParams{Stage: t.Stage, Tenant: t.Tenant, Input: t.Input,
		ModelVersion: t.ModelVersion, PromptVersion: t.PromptVersion, Params: t.Params})
}
