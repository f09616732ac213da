package flight_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode"
	"unicode/utf16"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// FuzzKeys checks the key builders on arbitrary parts: they never panic, refuse only with
// ErrInvalidKey, and every key they build passes CheckKey, starts with ai:<stage>:v<version>
// and has the tenant as its fourth ':' segment, so no input can move a key into another
// tenant's namespace. A semantic key does not change when its input or params are reformatted
// (other whitespace, object keys in another order), and a namespaced key never equals a
// semantic key or the namespaced key of another tenant.
func FuzzKeys(f *testing.F) {
	for _, s := range []struct {
		stage, tenant, input, model, prompt, params, requestKey string
		version                                                 int
	}{
		{"interview-evaluation", "acme", `{"answer":"I led the team","question":{"id":7}}`, "m1", "p1", "", "q-7", 0},
		{"interview-evaluation", "evil", `{"b":[1,2.50,{"d":null,"c":"<&>"}],"a":true}`, "", "", `{"lang":"en"}`, "ai:interview-evaluation:v1:acme:rk:q-7", 1},
		{"s", "a", `"\u2028\ud800\xff"`, "gpt-x", "p:3", `null`, "k/+=", 2},
		{"s", "a", `{"a":1,"a":2,"A":3}`, "", "", `{}`, "a{b}", -1},
		{"s", "a", `[1e999,-0,0.0,1E+2]`, "m m", "", `{"x":[{}]}`, "a*", 9223372036854775807},
		{"s", "a:b", `{}`, "", "", "", "x", 0},
		{"a:b", "acme", `{}`, "", "", "", "x", 0},
		{"S", "ACME", `1`, "", "", "", " ", 0},
		{"s", "a", `{"a":`, "", "", "[1]", strings.Repeat("x", 201), 0},
		{"s", "a", ` {} {} `, "", "", "", "\x00", 0},
		{strings.Repeat("s", 64), strings.Repeat("t", 64), strings.Repeat("[", 40) + strings.Repeat("]", 40), "", "", "", strings.Repeat("k", 200), -9223372036854775808},
	} {
		f.Add(s.stage, s.tenant, []byte(s.input), s.model, s.prompt, []byte(s.params), s.requestKey, s.version)
	}
	f.Fuzz(func(t *testing.T, stage, tenant string, input []byte, model, prompt string, params []byte, requestKey string, version int) {
		p := flight.KeyParams{Stage: stage, Tenant: tenant, Input: input, ModelVersion: model,
			PromptVersion: prompt, Params: params, Version: version}
		wantVersion := version
		if wantVersion == 0 {
			wantVersion = 1
		}
		key, err := flight.SemanticKey(p)
		if err != nil {
			if !errors.Is(err, flight.ErrInvalidKey) {
				t.Fatalf("SemanticKey error %v is not ErrInvalidKey", err)
			}
		} else {
			checkScoped(t, key, stage, tenant, wantVersion)
			hash := key[strings.LastIndexByte(key, ':')+1:]
			if len(hash) != 64 || strings.Trim(hash, "0123456789abcdef") != "" {
				t.Fatalf("key %q does not end in a sha256 hex digest", key)
			}
			// Reformatting the same input and params gives the same key.
			q := p
			q.Input = reformat(t, input)
			if len(bytes.TrimSpace(params)) > 0 {
				q.Params = reformat(t, params)
			}
			if again, err := flight.SemanticKey(q); err != nil || again != key {
				t.Fatalf("reformatted input %q params %q: key %q (%v), want %q", q.Input, q.Params, again, err, key)
			}
		}

		nk, err := flight.NamespacedKey(stage, tenant, requestKey, version)
		if err != nil {
			if !errors.Is(err, flight.ErrInvalidKey) {
				t.Fatalf("NamespacedKey error %v is not ErrInvalidKey", err)
			}
			return
		}
		checkScoped(t, nk, stage, tenant, wantVersion)
		want := "ai:" + stage + ":v" + strconv.Itoa(wantVersion) + ":" + tenant + ":rk:" + requestKey
		if nk != want {
			t.Fatalf("NamespacedKey = %q, want %q", nk, want)
		}
		if nk == key {
			t.Fatalf("namespaced key %q equals the semantic key", nk)
		}
		// The same request key under another tenant lands elsewhere.
		other := "x" + tenant
		if len(other) > 64 {
			other = "x" + tenant[1:]
			if other == tenant {
				other = "y" + tenant[1:]
			}
		}
		if ok, err := flight.NamespacedKey(stage, other, requestKey, version); err != nil || ok == nk {
			t.Fatalf("tenant %q and %q share key %q (%v)", tenant, other, nk, err)
		}
	})
}

// checkScoped checks that key is a valid flight key under stage, version and tenant.
func checkScoped(t *testing.T, key, stage, tenant string, version int) {
	t.Helper()
	if err := flight.CheckKey(key); err != nil {
		t.Fatalf("built key %q fails CheckKey: %v", key, err)
	}
	seg := strings.Split(key, ":")
	if len(seg) < 5 || seg[0] != "ai" || seg[1] != stage || seg[2] != "v"+strconv.Itoa(version) || seg[3] != tenant {
		t.Fatalf("key %q: segments %q, want ai, %q, v%d, %q first", key, seg, stage, version, tenant)
	}
}

// reformat rewrites a valid JSON document with other whitespace and object members in
// reverse order of their names, keeping every value (numbers as written).
func reformat(t *testing.T, doc []byte) json.RawMessage {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		t.Fatalf("SemanticKey accepted JSON that does not decode: %q: %v", doc, err)
	}
	var buf bytes.Buffer
	buf.WriteString("\n ")
	writeReordered(t, &buf, v)
	buf.WriteString("\t\r\n")
	return buf.Bytes()
}

func writeReordered(t *testing.T, buf *bytes.Buffer, v any) {
	switch v := v.(type) {
	case map[string]any:
		names := make([]string, 0, len(v))
		for k := range v {
			names = append(names, k)
		}
		slices.Sort(names)
		slices.Reverse(names)
		buf.WriteString("{ ")
		for i, k := range names {
			if i > 0 {
				buf.WriteString(" ,\n")
			}
			writeReordered(t, buf, k)
			buf.WriteString(" :\t")
			writeReordered(t, buf, v[k])
		}
		buf.WriteString(" }")
	case []any:
		buf.WriteString("[ ")
		for i, e := range v {
			if i > 0 {
				buf.WriteString(" , ")
			}
			writeReordered(t, buf, e)
		}
		buf.WriteString(" ]")
	case string:
		// Escape every non-ASCII rune, unlike Canonical, so the bytes differ but the value not.
		buf.WriteByte('"')
		for _, r := range v {
			switch {
			case r == '"' || r == '\\':
				buf.WriteByte('\\')
				buf.WriteRune(r)
			case r < 0x20 || r > 0x7e:
				r1, r2 := utf16.EncodeRune(r) // U+FFFD, U+FFFD below U+10000
				if r1 == unicode.ReplacementChar {
					r1, r2 = r, -1
				}
				buf.WriteString(fmt.Sprintf(`\u%04x`, r1))
				if r2 >= 0 {
					buf.WriteString(fmt.Sprintf(`\u%04x`, r2))
				}
			default:
				buf.WriteRune(r)
			}
		}
		buf.WriteByte('"')
	default: // json.Number, bool, nil
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatalf("marshal %v: %v", v, err)
		}
		buf.Write(b)
	}
}
