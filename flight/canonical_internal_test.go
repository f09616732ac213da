package flight

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// FuzzCanonicalFast checks that the one-pass canonical form is byte for byte the general
// path's whenever it answers, and that it never accepts what the general path refuses; that
// both refuse a valid document with a duplicate member; and that the semantic key's document
// built by hand is json.Marshal's.
func FuzzCanonicalFast(f *testing.F) {
	for _, s := range []string{
		`{"question":"q1","answer":"a","sim":{"latencyMs":0}}`,
		` { "b" : [1, 2.50, {"d":null, "c":"<&>"}], "a" : true } `,
		`{"a":1,"a":2,"A":3,"a!":4,"a ":5,"":6}`,
		`{"é":"ü","e":"\u00e9"}`, `[1e999,-0,0.0,1E+2,-1.5e-3]`, `"x"`, `null`, `true`, `false`,
		`{"a":[{"b":{"c":[]}},{}]}`, `[01]`, `[1.]`, `[.5]`, `[1e]`, `[-]`, `{"a" 1}`, `{"a":1,}`,
		`[1,]`, `{} {}`, `tru`, "\"a\u2028b\"", "\"\xff\"", `"\/"`, "[\"\t\"]", ` `, ``,
		`{"a":1,"\u0061":2}`, `[{"x":{"b":1,"b":2}}]`, `{"a":{"b":1},"c":{"b":2}}`, "{\"\xff\":1,\"\xfe\":2}",
	} {
		f.Add([]byte(s), "m1", "p<1>")
	}
	f.Fuzz(func(t *testing.T, doc []byte, model, prompt string) {
		general, gerr := canonicalGeneral(doc)
		fast, ok := canonicalFast(doc)
		if ok {
			if gerr != nil {
				t.Fatalf("fast path accepted %q, which the general path refuses: %v", doc, gerr)
			}
			if !bytes.Equal(fast, general) {
				t.Fatalf("canonical forms of %q differ:\nfast    %s\ngeneral %s", doc, fast, general)
			}
		}
		if _, dup := topics.DuplicateMember("$", doc); dup && json.Valid(doc) && (ok || !errors.Is(gerr, ErrDuplicateMember)) {
			t.Fatalf("%q has a duplicate member: fast ok %v, general error %v; want it refused", doc, ok, gerr)
		}
		if gerr != nil {
			return
		}
		got, err := keyDocument(general, general, model, prompt)
		want, werr := json.Marshal(struct {
			Input         json.RawMessage `json:"input"`
			ModelVersion  string          `json:"modelVersion"`
			PromptVersion string          `json:"promptVersion"`
			Params        json.RawMessage `json:"params"`
		}{general, model, prompt, general})
		if (err != nil) != (werr != nil) || !bytes.Equal(got, want) {
			t.Fatalf("key document of %q:\ngot  %s (%v)\nwant %s (%v)", doc, got, err, want, werr)
		}
	})
}

// BenchmarkCanonical compares the one-pass canonical form with the general path on a typical
// task input.
func BenchmarkCanonical(b *testing.B) {
	doc := []byte(`{"question":"Tell me about a time you led a team","answer":"I led the migration of our billing system","candidate":{"id":7,"level":"senior"},"sim":{"latencyMs":0}}`)
	b.Run("fast", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, ok := canonicalFast(doc); !ok {
				b.Fatal("declined")
			}
		}
	})
	b.Run("general", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			if _, err := canonicalGeneral(doc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
