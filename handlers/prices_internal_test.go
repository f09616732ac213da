package handlers

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// TestPricesLookup: a model is priced by its exact entry, else the longest entry it begins
// with, else "*"; a usage without a model by the stage's; a model without a price costs nothing.
func TestPricesLookup(t *testing.T) {
	p := Prices{"gpt-4o": {Prompt: 2.5, Completion: 10}, "gpt-4o-mini": {Prompt: 0.15, Completion: 0.6},
		"gpt-4o-mini-2024-07-18": {Prompt: 1, Completion: 1}}
	u := func(model string) flight.Usage {
		return flight.Usage{Model: model, PromptTokens: 1000, CompletionTokens: 100}
	}
	cases := []struct {
		usage    flight.Usage
		fallback string
		want     int64
	}{
		{u("gpt-4o-mini-2024-07-18"), "", 1000*1000 + 100*1000},    // exact
		{u("gpt-4o-mini-2025-01-01"), "", 1000*150 + 100*600},      // longest prefix
		{u("gpt-4o-2024-08-06"), "", 1000*2500 + 100*10000},        // the shorter prefix
		{u(""), "gpt-4o-mini", 1000*150 + 100*600},                 // the stage's model
		{u("claude-3"), "", 0},                                     // no price
		{flight.Usage{Model: "gpt-4o", PromptTokens: 1}, "", 2500}, // a fraction of a cent
	}
	for _, c := range cases {
		if got := p.nanoUSD(c.usage, c.fallback); got != c.want {
			t.Errorf("%+v (stage model %q): %d nano-dollars, want %d", c.usage, c.fallback, got, c.want)
		}
	}
	p["*"] = Price{Prompt: 1}
	if got := p.nanoUSD(u("claude-3"), ""); got != 1000*1000 {
		t.Errorf("claude-3 by the \"*\" entry: %d, want %d", got, 1000*1000)
	}
	if got := Prices(nil).nanoUSD(u("gpt-4o"), ""); got != 0 {
		t.Errorf("no price table: %d", got)
	}
}

// TestLoadStagesPrices: the stage file's prices reach every stage, and a negative or infinite
// price stops the consumer with an error naming it.
func TestLoadStagesPrices(t *testing.T) {
	dir := t.TempDir()
	write := func(body string) string {
		path := filepath.Join(dir, "stages.yaml")
		if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	stages, err := LoadStages(write("prices:\n  gpt-4o-mini: {prompt: 0.15, completion: 0.6}\nstages:\n  interview-evaluation: {}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stages {
		if p := s.Prices["gpt-4o-mini"]; p.Prompt != 0.15 || p.Completion != 0.6 {
			t.Errorf("stage %s: prices %v", s.Name, s.Prices)
		}
	}
	for body, want := range map[string]string{
		"prices:\n  m: {prompt: -1}\nstages: {}\n":           `price of "m"`,
		"prices:\n  m: {completion: .inf}\nstages: {}\n":     `price of "m"`,
		"prices:\n  m: {completion: 2e6}\nstages: {}\n":      `price of "m"`,
		"prices:\n  m: {prompt: 1, output: 2}\nstages: {}\n": "field output not found",
		"prices:\n  \"\": {prompt: 1}\nstages: {}\n":         "without a model name",
	} {
		_, err := LoadStages(write(body), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %q", body, err, want)
		}
	}
}
