package gateway

import (
	"encoding/json"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// openAPIDocument is the part of the OpenAPI document the tests check.
type openAPIDocument struct {
	OpenAPI    string                                `json:"openapi"`
	Paths      map[string]map[string]json.RawMessage `json:"paths"`
	Components struct {
		Schemas map[string]struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		} `json:"schemas"`
	} `json:"components"`
}

func loadOpenAPI(t *testing.T) (openAPIDocument, map[string]any) {
	t.Helper()
	var doc openAPIDocument
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil {
		t.Fatalf("the OpenAPI document is not JSON: %v", err)
	}
	var raw map[string]any
	_ = json.Unmarshal(OpenAPI(), &raw)
	return doc, raw
}

// TestOpenAPIRoutes: the document is OpenAPI 3, every route the Server serves is in it with
// the same methods and nothing else is, it asks for a token on exactly the routes that need
// one, and every $ref in it resolves.
func TestOpenAPIRoutes(t *testing.T) {
	doc, raw := loadOpenAPI(t)
	if !strings.HasPrefix(doc.OpenAPI, "3.") {
		t.Errorf("openapi %q, want 3.x", doc.OpenAPI)
	}
	served := map[string][]string{}
	for _, rt := range routes() {
		served[rt.pattern] = append(served[rt.pattern], strings.ToLower(rt.method))
	}
	documented := map[string][]string{}
	for p, ops := range doc.Paths {
		for m := range ops {
			if slices.Contains([]string{"get", "put", "post", "delete", "options", "head", "patch", "trace"}, m) {
				documented[p] = append(documented[p], m)
			}
		}
	}
	for _, m := range []map[string][]string{served, documented} {
		for p := range m {
			slices.Sort(m[p])
		}
	}
	if !reflect.DeepEqual(served, documented) {
		t.Errorf("routes served %v, documented %v", served, documented)
	}
	for _, rt := range routes() {
		var op struct{ Security []map[string][]string }
		_ = json.Unmarshal(doc.Paths[rt.pattern][strings.ToLower(rt.method)], &op)
		if needs := len(op.Security) > 0; needs == rt.public {
			t.Errorf("%s %s: the document says a token is needed: %v; the route is public: %v", rt.method, rt.pattern, needs, rt.public)
		}
	}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if ref, ok := v["$ref"].(string); ok {
				if !resolves(raw, ref) {
					t.Errorf("$ref %q does not resolve", ref)
				}
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(raw)
}

// resolves reports whether ref, "#/a/b", names a member of doc.
func resolves(doc map[string]any, ref string) bool {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return false
	}
	var cur any = doc
	for part := range strings.SplitSeq(p, "/") {
		m, ok := cur.(map[string]any)
		if !ok {
			return false
		}
		if cur, ok = m[part]; !ok {
			return false
		}
	}
	return true
}

// jsonFields returns the JSON member names of a struct type's fields.
func jsonFields(v any) []string {
	var out []string
	rt := reflect.TypeOf(v)
	for f := range rt.Fields() {
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}

// TestOpenAPISchemas: each schema of the document lists exactly the JSON members of the Go
// type the handlers write, and the members a task request may carry are exactly those the
// handler accepts.
func TestOpenAPISchemas(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	for name, v := range map[string]any{
		"Receipt": client.Receipt{}, "Event": topics.Event{}, "Done": done{}, "Pending": pending{},
		"KeyState": keyState{}, "CancelResult": cancelResult{}, "Error": errorBody{}, "ScheduledTask": client.ScheduledTask{},
	} {
		s, ok := doc.Components.Schemas[name]
		if !ok {
			t.Errorf("no schema %s", name)
			continue
		}
		if got, want := slices.Sorted(maps.Keys(s.Properties)), jsonFields(v); !slices.Equal(got, want) {
			t.Errorf("schema %s lists %v; the handlers write %v", name, got, want)
		}
	}
	req := doc.Components.Schemas["TaskRequest"]
	for p := range req.Properties {
		val := `"x"`
		if p == "params" {
			val = `{}`
		}
		if _, err := decodeTaskRequest([]byte(`{"input":1,` + `"` + p + `":` + val + `}`)); err != nil && p != "input" {
			if re, ok := err.(*requestError); ok {
				t.Errorf("TaskRequest property %s: the handler refuses it: %v", p, re)
			}
		}
	}
	if _, err := decodeTaskRequest([]byte(`{"input":1,"notInTheDocument":1}`)); err == nil {
		t.Error("a member the document does not list was accepted")
	}
	// Every member the handler accepts is documented: its unknown-field message names them.
	_, err := decodeTaskRequest([]byte(`{"input":1,"zzz":1}`))
	msg := err.Error()
	for p := range req.Properties {
		if p != "tenant" && !strings.Contains(msg, p) {
			t.Errorf("the handler's list of fields %q lacks documented %s", msg, p)
		}
	}
}

// TestOpenAPIResponseBodies: the receipt and error bodies the handlers return have only
// members their schema lists, and every member it requires.
func TestOpenAPIResponseBodies(t *testing.T) {
	doc, _ := loadOpenAPI(t)
	b := newBundle(t, nil)
	check := func(what, schema string, body []byte) {
		t.Helper()
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		s := doc.Components.Schemas[schema]
		for k := range m {
			if _, ok := s.Properties[k]; !ok {
				t.Errorf("%s: member %q is not in schema %s", what, k, schema)
			}
		}
		for _, k := range s.Required {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: required member %q of %s is missing: %s", what, k, schema, body)
			}
		}
	}
	r := b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `{"input":1}`)
	if r.status != http.StatusAccepted {
		t.Fatalf("POST: %d %s", r.status, r.body)
	}
	check("receipt", "Receipt", r.body)
	var m map[string]any
	r.json(t, &m)
	if got, want := slices.Sorted(maps.Keys(m)), slices.Sorted(maps.Keys(doc.Components.Schemas["Receipt"].Properties)); !slices.Equal(got, want) {
		t.Errorf("a receipt has members %v, the schema %v", got, want)
	}
	for _, e := range []resp{
		b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `{"input":1,"taskId":"a b"}`),
		b.do("POST", "/v1/stages/"+stage+"/tasks", acmeSecret, `nope`),
		b.do("GET", "/v1/tasks/none", acmeSecret, nil),
		b.do("GET", "/v1/tasks/none", "", nil),
	} {
		check("error "+e.code(), "Error", e.body)
	}
}
