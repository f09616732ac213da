package main

import (
	"context"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/flightdeck-ai/flightdeck/admin"
)

// statsUsage is the synopsis of 'producer stats'.
const statsUsage = "[--stage S] [--window hour|day] [--format table|json]"

// stats prints the fleet's savings ledger through the dashboard's own code, admin.Inspector:
// per stage and tenant, the tasks answered by each path, the model calls, the tokens and money
// spent and avoided.
func (a *app) stats(ctx context.Context, args []string) error {
	fs := a.newFlagSet("stats", statsUsage)
	stage := fs.String("stage", "", "show only this `stage` (default: every registered stage)")
	window := fs.String("window", admin.WindowHour, "the `window`: hour (the last 60 minutes) or day (the last 24 hours)")
	format := listFormatFlag(fs)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *window != admin.WindowHour && *window != admin.WindowDay {
		return usagef("--window %q: want hour or day", *window)
	}
	if err := checkFormat(*format); err != nil {
		return err
	}
	stages, err := optionalStage(*stage)
	if err != nil {
		return err
	}
	in, rdb, err := a.inspector(ctx, stages)
	if err != nil {
		return err
	}
	defer rdb.Close()
	rep, err := in.Ledger(ctx, stages, *window)
	if err != nil {
		return err
	}
	if *format == formatJSON {
		return writeJSON(a.stdout, rep)
	}
	fmt.Fprintf(a.stdout, "the last %s, since %s (Redis clock)\n", rep.Window, time.Unix(rep.From, 0).UTC().Format(time.RFC3339))
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "STAGE\tTENANT\tTASKS\tOWNER\tJOINED\tFOLLOWER\tHIT\tARCHIVE\tLOCAL\tSHARED\tCALLS\t429\tWAITS\tTOKENS\tAVOIDED\tSPENT $\tAVOIDED $\t")
	row := func(stage, tenant string, r admin.LedgerRow) {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\t\n", stage, tenant, r.Tasks,
			r.Owner, r.Joined, r.Follower, r.Hit, r.Archive, r.Local, shareOf(r), r.Calls, r.RateLimited,
			r.LimiterWaits, r.PromptTokens+r.CompletionTokens, r.AvoidedPromptTokens+r.AvoidedCompletionTokens,
			dollars(r.SpentUSD), dollars(r.AvoidedUSD))
	}
	for _, s := range rep.Stages {
		row(s.Stage, "all", s.Total)
		for _, t := range s.Tenants {
			row("", t.Tenant, t)
		}
	}
	if len(rep.Stages) > 1 {
		row("all", "all", rep.Total)
	}
	return tw.Flush()
}

// percent formats a share as a percentage with one decimal.
func percent(f float64) string { return strconv.FormatFloat(f*100, 'f', 1, 64) + "%" }

// shareOf is a row's hit rate, or "-" for a row without tasks, as the dashboard shows it.
func shareOf(r admin.LedgerRow) string {
	if r.Tasks == 0 {
		return "-"
	}
	return percent(r.HitRate)
}

// dollars formats US dollars with four decimals, enough for a few cheap calls.
func dollars(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) }
