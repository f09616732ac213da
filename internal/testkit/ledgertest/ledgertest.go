// Package ledgertest reads the consumers' flightdeck_ledger_* metrics back into ledger counts,
// for tests that compare what /metrics or a registry shows with a known mix.
package ledgertest

import "github.com/flightdeck-ai/flightdeck/topics"

// Add adds one flightdeck_ledger_* sample, a metric name with its labels and value, to the
// counts of the sample's tenant in out. Samples of other metrics are left out.
func Add(out map[string]topics.LedgerCounts, name string, labels map[string]string, v float64) {
	c := out[labels["tenant"]]
	n, nano := int64(v), int64(v*1e9+0.5)
	kind := labels["kind"]
	switch name {
	case "flightdeck_ledger_tasks_total":
		for i, p := range topics.LedgerNames[:6] {
			if p == labels["path"] {
				*c.Counter(i) += n
			}
		}
	case "flightdeck_ledger_model_calls_total":
		c.Calls += n
	case "flightdeck_ledger_rate_limited_total":
		c.RateLimited += n
	case "flightdeck_ledger_limiter_waits_total":
		c.LimiterWaits += n
	case "flightdeck_ledger_tokens_total":
		pick(kind == "prompt", &c.PromptTokens, &c.CompletionTokens, n)
	case "flightdeck_ledger_avoided_tokens_total":
		pick(kind == "prompt", &c.AvoidedPromptTokens, &c.AvoidedCompletionTokens, n)
	case "flightdeck_ledger_cost_usd_total":
		pick(kind == "spent", &c.SpentNanoUSD, &c.AvoidedNanoUSD, nano)
	default:
		return
	}
	out[labels["tenant"]] = c
}

// pick adds n to a when first, else to b.
func pick(first bool, a, b *int64, n int64) {
	if first {
		*a += n
	} else {
		*b += n
	}
}
