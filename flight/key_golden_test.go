package flight_test

import (
	"encoding/json"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// goldenInputs are inputs whose semantic keys are pinned in TestSemanticKeyGolden: a key must
// never change between versions (the flights, stored outcomes and archived rows of a key are
// found by it).
var goldenInputs = []struct{ input, model, params string }{
	{`{"question":"q1","answer":"a","sim":{"latencyMs":0}}`, "m1", ``},
	{` { "b" : [1, 2.50, {"d":null, "c":"<&>"}], "a" : true } `, "gpt-4o", `{"lang":"en"}`},
	// Pinned when keys kept the last of duplicate members, as {"a":1,"a":2,...}; such an
	// input is refused now (TestSemanticKeyDuplicates), and this one has the same key.
	{`{"a":2,"A":3,"é":"\u00e9\/\n\u2028"}`, "", `null`},
	{`[1e999,-0,0.0,1E+2,"\ud800","x\u0000y"]`, "m\"q", `{"z":{},"y":[]}`},
	{`"plain"`, "", ``},
	{`{"nested":{"z":[{"b":1,"a":2}],"y":"\t"},"":0}`, "m", `[]`},
}

func TestSemanticKeyGolden(t *testing.T) {
	want := []string{
		"ai:s:v1:acme:63968e5a58b562beb5337aeaba450e9e7041f8e92feb5c6d68d8a4f6b59a475a",
		"ai:s:v1:acme:6d42892f35452a66a1bd325f7b1e31d3313d8d50f28f59e22827d22ddf617cad",
		"ai:s:v1:acme:1bc5dd502640f7ff8c736860aed32d2ed9f629e9e070addc5dee45de4711648a",
		"ai:s:v1:acme:feb4384011a5f493792b9c5cc3f81b616c1bd3e7ee87c17b80cd2da5552de526",
		"ai:s:v1:acme:3be5dc750696a93a11f3039170faff08750eead65638947a09617a1912a0f730",
		"ai:s:v1:acme:d26d3405d3cf6bb504dbdf29243b31d2e3a186e3c98a928963001f6ebe4bcd58",
	}
	for i, in := range goldenInputs {
		k, err := flight.SemanticKey(flight.KeyParams{Stage: "s", Tenant: "acme", Input: json.RawMessage(in.input),
			ModelVersion: in.model, PromptVersion: "p<1>", Params: json.RawMessage(in.params)})
		if err != nil || k != want[i] {
			t.Errorf("input %d (%s): key %q (%v), want %q", i, in.input, k, err, want[i])
		}
	}
}
