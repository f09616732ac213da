package flight

import (
	"context"
	"strconv"
	"strings"
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

// CollectUsage returns ctx carrying a fresh report for one model call made outside an owner's
// run, and the function that returns what the call reported it used through ReportUsage, or
// nil for nothing.
func CollectUsage(ctx context.Context) (context.Context, func() *Usage) {
	ctx, r := withReport(ctx)
	return ctx, func() *Usage { u, _ := r.result(); return u }
}

// ReportedUsage returns what the call running under ctx reported it used so far through
// ReportUsage, or nil for nothing.
func ReportedUsage(ctx context.Context) *Usage {
	r, ok := ctx.Value(reportKey{}).(*callReport)
	if !ok {
		return nil
	}
	u, _ := r.result()
	return u
}

// maxReportedTokens bounds each count a call reports, so that sums and costs cannot overflow.
const maxReportedTokens = 1 << 40

// ReportUsage records what a model call used, from inside the call. The owner charges it to
// the stage's limiter and the ledger, and the owner's event carries it. A call that makes
// several model requests reports each, and the counts add up. A negative count, which no
// provider should send, counts as 0, and a count is at most 2^40.
func ReportUsage(ctx context.Context, u Usage) {
	r, ok := ctx.Value(reportKey{}).(*callReport)
	if !ok {
		return
	}
	r.mu.Lock()
	r.usage.PromptTokens = min(r.usage.PromptTokens+max(min(u.PromptTokens, maxReportedTokens), 0), maxReportedTokens)
	r.usage.CompletionTokens = min(r.usage.CompletionTokens+max(min(u.CompletionTokens, maxReportedTokens), 0), maxReportedTokens)
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

// maxUsageModel bounds the model name a flight record keeps with its usage.
const maxUsageModel = 128

// usageArg encodes u as a flight record keeps it: "<prompt tokens> <completion tokens>
// <model>", the model with its blanks and control characters replaced, or "" for nil.
func usageArg(u *Usage) any {
	if u == nil {
		return ""
	}
	b := make([]byte, 0, 24+len(u.Model))
	b = strconv.AppendInt(b, int64(max(u.PromptTokens, 0)), 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(max(u.CompletionTokens, 0)), 10)
	b = append(b, ' ')
	for i := 0; i < len(u.Model) && i < maxUsageModel; i++ {
		c := u.Model[i]
		if c <= ' ' || c == 0x7f {
			c = '_'
		}
		b = append(b, c)
	}
	return string(b)
}

// parseUsage reads a record's usage field, as usageArg writes it; nil when s is not one.
func parseUsage(s string) *Usage {
	if s == "" {
		return nil
	}
	p, rest, ok1 := strings.Cut(s, " ")
	c, model, ok2 := strings.Cut(rest, " ")
	pn, err1 := strconv.Atoi(p)
	cn, err2 := strconv.Atoi(c)
	if !ok1 || !ok2 || err1 != nil || err2 != nil || pn < 0 || cn < 0 {
		return nil
	}
	return &Usage{Model: model, PromptTokens: pn, CompletionTokens: cn}
}
