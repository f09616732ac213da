package chaos

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is the one-line JSON form of a run's figures.
type Summary struct {
	Seed      uint64  `json:"seed"`
	Duration  string  `json:"duration"`
	Consumers int     `json:"consumers"`
	Keys      int     `json:"liveKeys"`
	Rate      float64 `json:"rate"`
	Elapsed   string  `json:"elapsed"`
	Out       string  `json:"out"`
	Figures
	Unavailable map[string]string `json:"unavailableFaults,omitempty"`
}

// Summary returns the figures of o with the run's settings.
func (o *Outcome) Summary(cfg Config) Summary {
	cfg.setDefaults()
	return Summary{Seed: cfg.Seed, Duration: cfg.Duration.String(), Consumers: cfg.Consumers, Keys: cfg.Keys,
		Rate: cfg.Rate, Elapsed: o.Elapsed.Round(time.Second).String(), Out: o.Out, Figures: o.Report.Figures,
		Unavailable: o.Unavailable}
}

// WriteTable writes the figures as a readable table, then at most maxViolations violations.
func (o *Outcome) WriteTable(w io.Writer, cfg Config, maxViolations int) {
	s := o.Summary(cfg)
	f := s.Figures
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(name string, v any, note string) { fmt.Fprintf(tw, "%s\t%v\t%s\n", name, v, note) }
	fmt.Fprintf(tw, "chaos run\tseed %d\t%s, %d consumers, %d live keys, %.0f sends/s (elapsed %s)\n",
		s.Seed, s.Duration, s.Consumers, s.Keys, s.Rate, s.Elapsed)
	row("tasks", f.Tasks, fmt.Sprintf("surely enqueued; %d more XADDs answered an error (may or may not exist)", f.UnsureEnqueues))
	row("distinct keys", f.DistinctKeys, "")
	row("events", f.Events, fmt.Sprintf("%d duplicates (at-least-once), %d of unsure or unknown tasks", f.DuplicateEvts, f.StrayEvents))
	row("tasks by outcome", fmt.Sprintf("%d ok", f.Succeeded), fmt.Sprintf("%d FAILED, %d EXPIRED, %d CANCELLED; %d tasks got conflicting events",
		f.Failed, f.Expired, f.Cancelled, f.ConflictingTasks))
	row("lost tasks", f.LostTasks, "surely enqueued, no terminal event")
	if f.DataLosses > 0 {
		row("tasks lost with Redis", f.LostWithRedis, fmt.Sprintf("of %d unanswered at a data loss (their entries went with Redis; excused from rule 1); %d sent again under new ids",
			f.UnansweredAtLoss, f.Resent))
	}
	row("dead letters", f.DeadLetters, "entries moved to ai:tasks:<stage>:dlq")
	kinds := make([]string, 0, len(f.Faults))
	for k := range f.Faults {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	row("faults", f.FaultsTotal, "")
	for _, k := range kinds {
		row("  "+k, f.Faults[k], faultNote(k, f))
	}
	unavailable := make([]string, 0, len(s.Unavailable))
	for k := range s.Unavailable {
		unavailable = append(unavailable, k)
	}
	sort.Strings(unavailable)
	for _, k := range unavailable {
		row("  "+k, "-", "not available: "+s.Unavailable[k])
	}
	row("model runs", f.ModelRuns, fmt.Sprintf("over %d flights (1 per key, plus %d fresh flights after a failure, %d after vanished records and %d after a Redis data loss)",
		f.Flights, f.FreshAfterEnd, f.FreshVanished, f.FreshAfterLoss))
	row("duplicate runs", f.DuplicateRuns, "runs beyond the first of a flight:")
	row("  takeovers", f.Takeovers, "reason takeover (lease lapsed)")
	row("  expired", f.ExpiredRuns, "reason expired (runningTTL spent)")
	row("  retry", f.RetryRuns, "reason retry (allowed extra)")
	row("  result_lost", f.ResultLostRuns, "reason result_lost (allowed extra)")
	row("  handover", f.HandoverRuns, "reason handover (the previous owner handed the flight over; no attempt spent)")
	if f.DataLosses > 0 || f.ArchiveAnswers > 0 {
		row("answered from archive", f.ArchiveKeys, fmt.Sprintf("keys whose owner answered from the archive (%d events shared \"archive\"); %d tasks got an archive answer's outcome, followers and hits included",
			f.ArchiveAnswers, f.ArchiveTasks))
	}
	if f.DataLosses > 0 {
		row("archived at a loss", f.ArchivedAtLoss, fmt.Sprintf("keys whose SUCCEEDED outcome the archive held when Redis lost its data (per loss); %d of them asked again after it",
			f.AskedAfterLoss))
		row("  runs before loss", f.ArchivedRunsBefore, "model runs of those keys before the loss")
		row("  runs after loss", f.ArchivedRunsAfter, fmt.Sprintf("model runs of those keys after it, on %d keys (rule 7: must be 0; %d of them after a failed archive lookup, allowed)",
			f.KeysRanAgain, f.LookupFailedRuns))
	}
	row("runs after answer", f.RunsAfterAnswer, fmt.Sprintf("runs of a task started after its first terminal event (rule 6); %d more of tasks enqueued twice or unsurely (allowed); %d logged late but acquired before the event",
		f.ReRunsMultiEnqueued, f.LateRunLogs))
	row("results accepted", f.Completions, fmt.Sprintf("%d written back with their flight; %d records written back by their owner's heartbeat", f.Restored, f.MetaBack))
	row("late results refused", f.Refused, fmt.Sprintf("fencing; %d runs aborted by the flight (stale token, cancel, expiry)", f.Aborted))
	row("uncertain outcomes", f.Spooled, fmt.Sprintf("spooled while Redis was away; %d written back by the flush loop or at start (a task's own flush logs nothing)", f.SpoolBack))
	row("held outcomes used", f.Held, "owners that completed their flight with an outcome their process held unwritten, instead of a model call")
	row("own entries picked up", f.PickedUp, "by consumers restarted under their name")
	row("cancelled keys", f.CancelledKeys, fmt.Sprintf("a cancel script ran; %d cancellers crashed after it (exit 86)", f.CancellerCrashes))
	row("injected crashes", f.InjectedCrashes, "consumers that exited 86 after a complete script, as their knobs told them")
	row("consumer crashes", f.Crashes, "exits nobody asked for")
	row("pending at end", f.Pending, fmt.Sprintf("entries pending or never delivered; %d of them parked followers", f.Parked))
	row("violations", f.Violations, violationsByRule(f.ViolationsByRule))
	tw.Flush()
	for i, v := range o.Report.Violations {
		if i == maxViolations {
			fmt.Fprintf(w, "... and %d more (see %s/report.json)\n", len(o.Report.Violations)-i, o.Out)
			break
		}
		fmt.Fprintln(w, "VIOLATION", v)
	}
	for _, e := range o.History.Exits {
		fmt.Fprintf(w, "CRASH %s at %s: %s\n%s\n", e.Process, e.At.Format(time.TimeOnly), e.Status, indent(e.Tail))
	}
}

// faultNote describes the effect of a fault kind in the table.
func faultNote(kind string, f Figures) string {
	switch kind {
	case FaultAllDown:
		return "every consumer down past runningTTL + failureTTL"
	case FaultDeleteKeys:
		return "record and waiters of a running flight deleted"
	case FaultPauseLease:
		return "owner paused for 30-60% of its lease"
	case FaultRestartSame:
		return "SIGKILL, restarted at once under the same name"
	case FaultCrashComplete:
		return fmt.Sprintf("windows with the crash knobs; %d injected crashes", f.InjectedCrashes)
	case FaultCancellerCrash:
		return fmt.Sprintf("%d cancellers exited 86 after the cancel script", f.CancellerCrashes)
	case FaultRedisDataLoss:
		return fmt.Sprintf("SIGKILL, data deleted, started empty; %d tasks unanswered then", f.UnansweredAtLoss)
	}
	return ""
}

func violationsByRule(m map[string]int) string {
	var parts []string
	for r := RuleEvent; r <= RuleArchive; r++ {
		if n := m[fmt.Sprint(r)]; n > 0 {
			parts = append(parts, fmt.Sprintf("rule %d (%s): %d", r, RuleNames[r], n))
		}
	}
	return strings.Join(parts, "; ")
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// JSONLine is the summary as one JSON line.
func (o *Outcome) JSONLine(cfg Config) string {
	b, _ := json.Marshal(o.Summary(cfg))
	return string(b)
}
