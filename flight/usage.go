package flight

import (
	"context"
	"sync"
)

// callReport collects what a model call reports of itself while it runs.
type callReport struct {
	mu    sync.Mutex
	usage Usage
	has   bool
	rem   Remaining
}

type reportKey struct{}

// withReport returns ctx carrying a fresh report for one call.
func withReport(ctx context.Context) (context.Context, *callReport) {
	r := &callReport{rem: Remaining{Requests: -1, Tokens: -1}}
	return context.WithValue(ctx, reportKey{}, r), r
}

// ReportUsage records what a model call used, from inside the call. The owner charges it to
// the stage's limiter and the ledger, and the owner's event carries it. A call that makes
// several model requests reports each, and the counts add up.
func ReportUsage(ctx context.Context, u Usage) {
	r, ok := ctx.Value(reportKey{}).(*callReport)
	if !ok {
		return
	}
	r.mu.Lock()
	r.usage.PromptTokens += u.PromptTokens
	r.usage.CompletionTokens += u.CompletionTokens
	if u.Model != "" {
		r.usage.Model = u.Model
	}
	r.has = true
	r.mu.Unlock()
}

// ReportRemaining records the budget a provider says is left, from inside the call, as given
// by its x-ratelimit-remaining-* headers. The stage's limiter lowers its view to it.
func ReportRemaining(ctx context.Context, rem Remaining) {
	r, ok := ctx.Value(reportKey{}).(*callReport)
	if !ok {
		return
	}
	r.mu.Lock()
	r.rem = rem
	r.mu.Unlock()
}

// result returns the usage reported, or nil for none, and the remaining budget.
func (r *callReport) result() (*Usage, Remaining) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.has {
		return nil, r.rem
	}
	u := r.usage
	return &u, r.rem
}
