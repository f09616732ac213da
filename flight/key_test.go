package flight_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
)

func TestSemanticKey(t *testing.T) {
	base := flight.KeyParams{Stage: "interview-evaluation", Tenant: "acme",
		Input: json.RawMessage(`{"answer":"I led the team","question":{"id":7,"text":"Tell me"}}`), ModelVersion: "m1", PromptVersion: "p1"}
	k0, err := flight.SemanticKey(base)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(k0, "ai:interview-evaluation:v1:acme:") || len(k0) != len("ai:interview-evaluation:v1:acme:")+64 {
		t.Fatalf("key %q", k0)
	}
	same := base
	same.Input = json.RawMessage("{ \"question\" : {\"text\":\"Tell me\", \"id\":7},\n\t\"answer\":\"I led the team\" }")
	if k, _ := flight.SemanticKey(same); k != k0 {
		t.Errorf("key order and whitespace changed the key: %s vs %s", k, k0)
	}
	for name, mut := range map[string]func(p *flight.KeyParams){
		"tenant":  func(p *flight.KeyParams) { p.Tenant = "other" },
		"stage":   func(p *flight.KeyParams) { p.Stage = "interview-followup" },
		"input":   func(p *flight.KeyParams) { p.Input = json.RawMessage(`{"answer":"I led the team."}`) },
		"model":   func(p *flight.KeyParams) { p.ModelVersion = "m2" },
		"prompt":  func(p *flight.KeyParams) { p.PromptVersion = "p2" },
		"params":  func(p *flight.KeyParams) { p.Params = json.RawMessage(`{"lang":"en"}`) },
		"version": func(p *flight.KeyParams) { p.Version = 2 },
	} {
		p := base
		mut(&p)
		if k, err := flight.SemanticKey(p); err != nil || k == k0 {
			t.Errorf("changing %s kept the key (%v)", name, err)
		}
	}
	for name, mut := range map[string]func(p *flight.KeyParams){
		"no tenant":     func(p *flight.KeyParams) { p.Tenant = "" },
		"tenant braces": func(p *flight.KeyParams) { p.Tenant = "a}b" },
		"stage colon":   func(p *flight.KeyParams) { p.Stage = "a:b" },
		"bad input":     func(p *flight.KeyParams) { p.Input = json.RawMessage(`{"a":`) },
		"trailing":      func(p *flight.KeyParams) { p.Input = json.RawMessage(`{} {}`) },
		"no input":      func(p *flight.KeyParams) { p.Input = nil },
	} {
		p := base
		mut(&p)
		if _, err := flight.SemanticKey(p); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("%s: %v, want ErrInvalidKey", name, err)
		}
	}
}

func TestNamespacedKey(t *testing.T) {
	a, err := flight.NamespacedKey("interview-evaluation", "acme", "q-7", 0)
	if err != nil || a != "ai:interview-evaluation:v1:acme:rk:q-7" {
		t.Fatalf("%q %v", a, err)
	}
	// A key crafted to look like another tenant's key still lands under the caller's tenant.
	b, _ := flight.NamespacedKey("interview-evaluation", "evil", "ai:interview-evaluation:v1:acme:rk:q-7", 0)
	if !strings.HasPrefix(b, "ai:interview-evaluation:v1:evil:rk:") || b == a {
		t.Errorf("crafted key %q", b)
	}
	for _, bad := range []string{"", "a{b}", "a*", "a b", strings.Repeat("x", 201)} {
		if _, err := flight.NamespacedKey("interview-evaluation", "acme", bad, 0); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestCanonical(t *testing.T) {
	got, err := flight.Canonical(json.RawMessage(` {"b":[1, 2.50,{"d":null,"c":"<&>"}],"a":true} `))
	if err != nil || string(got) != `{"a":true,"b":[1,2.50,{"c":"<&>","d":null}]}` {
		t.Errorf("%s %v", got, err)
	}
}
