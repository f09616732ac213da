package handlers

import (
	"fmt"
	"math"
	"strings"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// Price is what a model's tokens cost, in US dollars per million tokens.
type Price struct {
	// Prompt prices the tokens sent to the model, Completion those it answered with.
	Prompt     float64 `yaml:"prompt"`
	Completion float64 `yaml:"completion"`
}

// Prices is the stage file's price table: model name -> price. The ledger prices a call's usage
// by the model its provider reported: the entry of that exact name, else the longest name that
// begins it ("gpt-4o-mini" prices "gpt-4o-mini-2024-07-18"), else the entry "*". A model
// without a price costs nothing in the ledger; its tokens are still counted.
type Prices map[string]Price

// maxPrice bounds a price, in dollars per million tokens: far above any model's, low enough
// that a cost stays within an int64 of nano-dollars.
const maxPrice = 1e6

// Validate reports prices that are negative, not finite, or above a million dollars per million
// tokens.
func (p Prices) Validate() error {
	for name, pr := range p {
		for _, v := range []float64{pr.Prompt, pr.Completion} {
			if v < 0 || math.IsNaN(v) || math.IsInf(v, 0) || v > maxPrice {
				return fmt.Errorf("price of %q: %v per million tokens: want a number from 0 to %g", name, v, float64(maxPrice))
			}
		}
		if name == "" {
			return fmt.Errorf("a price without a model name")
		}
	}
	return nil
}

// lookup returns the price of model, as Prices says.
func (p Prices) lookup(model string) (Price, bool) {
	if pr, ok := p[model]; ok {
		return pr, true
	}
	best, found := "", false
	for name := range p {
		if name != "*" && len(name) > len(best) && strings.HasPrefix(model, name) {
			best, found = name, true
		}
	}
	if found {
		return p[best], true
	}
	pr, ok := p["*"]
	return pr, ok
}

// nanoUSD returns what u cost, in billionths of a US dollar. A usage without a model is priced
// as the stage's model, fallback.
func (p Prices) nanoUSD(u flight.Usage, fallback string) int64 {
	if len(p) == 0 {
		return 0
	}
	m := u.Model
	if m == "" {
		m = fallback
	}
	pr, ok := p.lookup(m)
	if !ok {
		return 0
	}
	// Dollars per million tokens are thousandths of a nano-dollar per token. A sum past 2^60
	// (a billion dollars) is cut there, so that adding it up cannot overflow.
	return int64(min(math.Round(float64(u.PromptTokens)*pr.Prompt*1000+float64(u.CompletionTokens)*pr.Completion*1000), 1<<60))
}
