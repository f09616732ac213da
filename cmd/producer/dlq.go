package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The dlq subcommands act through the dashboard's own code, admin.Inspector. The CLI and the
// page list, requeue and purge dead letters the same way.

// dlqUsage is the synopsis of 'producer dlq'.
const dlqUsage = `ls [--stage S] [--n 20] [--format table|json]
       producer dlq show ID --stage S
       producer dlq requeue (ID... | --all) --stage S
       producer dlq purge (ID... | --all) --stage S --yes`

func (a *app) dlq(ctx context.Context, args []string) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fs := a.newFlagSet("dlq", dlqUsage)
		if _, err := a.parse(fs, args); err != nil {
			return err
		}
		return usagef("want a subcommand: ls, show, requeue or purge")
	}
	switch sub, rest := args[0], args[1:]; sub {
	case "ls":
		return a.dlqList(ctx, rest)
	case "show":
		return a.dlqShow(ctx, rest)
	case "requeue", "purge":
		return a.dlqBulk(ctx, sub, rest)
	default:
		return usagef("unknown subcommand %q: want ls, show, requeue or purge", sub)
	}
}

// inspector connects and returns the dashboard's Inspector over stages and the Redis client,
// for the caller to close. No stages means every registered stage.
func (a *app) inspector(ctx context.Context, stages []string) (*admin.Inspector, redis.UniversalClient, error) {
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return nil, nil, err
	}
	if len(stages) == 0 {
		reg, _, err := broker.ReadStages(ctx, rdb, c.Keyspace())
		if err != nil {
			_ = rdb.Close()
			return nil, nil, err
		}
		for _, s := range reg {
			stages = append(stages, s.Name)
		}
		if len(stages) == 0 {
			_ = rdb.Close()
			return nil, nil, usagef("no consumer has registered any stage under prefix %q: name one with --stage", a.prefix)
		}
	}
	in, err := admin.New(admin.Config{Client: rdb, Keyspace: c.Keyspace(), Stages: stages})
	if err != nil {
		_ = rdb.Close()
		return nil, nil, err
	}
	return in, rdb, nil
}

// stageFlag registers --stage. required says whether the subcommand needs it.
func stageFlag(fs *flag.FlagSet, required bool) *string {
	what := "the `stage` whose DLQ (<prefix>:tasks:<stage>:dlq) to act on"
	if !required {
		what = "list only this `stage`'s DLQ (default: every registered stage)"
	}
	return fs.String("stage", "", what)
}

// checkStageName refuses a --stage that no consumer could have written a DLQ for.
func checkStageName(stage string, required bool) error {
	switch {
	case stage == "" && required:
		return usagef("--stage is required")
	case stage == "":
		return nil
	}
	if err := topics.CheckStage(stage); err != nil {
		return usagef("--stage %q: %v", stage, err)
	}
	return nil
}

// dlqRow is one line of 'producer dlq ls'. It holds the dashboard's view, with the payload cut
// to admin.MaxPayloadBytes, and the entry's age by the Redis clock.
type dlqRow struct {
	admin.DeadLetterView
	AgeMs int64 `json:"ageMs"`
}

func (a *app) dlqList(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq ls", "[--stage S] [--n 20] [--format table|json]")
	stage := stageFlag(fs, false)
	n := fs.Int("n", 20, "show the newest `N` dead letters")
	format := listFormatFlag(fs)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case *n < 1 || *n > admin.MaxListEntries:
		return usagef("--n must be between 1 and %d", admin.MaxListEntries)
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
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("read the Redis clock: %w", err)
	}
	dls, err := in.DeadLetters(ctx, nil, int64(*n))
	if err != nil {
		return err
	}
	rows := make([]dlqRow, len(dls))
	for i, d := range dls {
		rows[i] = dlqRow{DeadLetterView: d, AgeMs: entryAgeMs(d.ID, now)}
	}
	if *format == "json" {
		return writeJSON(a.stdout, rows)
	}
	if len(rows) == 0 {
		fmt.Fprintf(a.stderr, "producer: no dead letters in %s\n", describeStages(*stage))
		return nil
	}
	tw := tabwriter.NewWriter(a.stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "STAGE\tID\tAGE\tREASON\tTASK\tDETAIL")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Stage, r.ID, ago(time.Duration(r.AgeMs)*time.Millisecond),
			cell(r.Reason, 32), cell(orDash(r.TaskID), 40), cell(r.Detail, 80))
	}
	return tw.Flush()
}

// describeStages names what 'dlq ls' read.
func describeStages(stage string) string {
	if stage == "" {
		return "the DLQs of the registered stages"
	}
	return "the DLQ of stage " + stage
}

// entryAgeMs is how long before now a stream entry was added, from its id's time.
func entryAgeMs(id string, now time.Time) int64 {
	ms, _, _ := strings.Cut(id, "-")
	t, err := strconv.ParseInt(ms, 10, 64)
	if err != nil {
		return 0
	}
	return max(now.UnixMilli()-t, 0)
}

// shownDeadLetter is what 'dlq show' prints: the dead letter in full, the payload as JSON
// when it is JSON, else as text.
type shownDeadLetter struct {
	admin.DeadLetterEntry
	Payload     json.RawMessage `json:"payload,omitempty"`
	PayloadText string          `json:"payloadText,omitempty"`
	Original    json.RawMessage `json:"original,omitempty"`
	AgeMs       int64           `json:"ageMs"`
}

func (a *app) dlqShow(ctx context.Context, args []string) error {
	fs := a.newFlagSet("dlq show", "ID --stage S")
	stage := stageFlag(fs, true)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one dead letter id, got %d arguments", len(pos))
	}
	if err := checkStageName(*stage, true); err != nil {
		return err
	}
	in, rdb, err := a.inspector(ctx, []string{*stage})
	if err != nil {
		return err
	}
	defer rdb.Close()
	d, err := in.DeadLetter(ctx, *stage, pos[0])
	if err != nil {
		return dlqError(err, *stage, pos)
	}
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		return fmt.Errorf("read the Redis clock: %w", err)
	}
	out := shownDeadLetter{DeadLetterEntry: d, AgeMs: entryAgeMs(d.ID, now)}
	if json.Valid([]byte(d.Payload)) {
		out.Payload = json.RawMessage(d.Payload)
	} else {
		out.PayloadText = d.Payload
	}
	if d.Original != "" && json.Valid([]byte(d.Original)) {
		out.Original = json.RawMessage(d.Original)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return fmt.Errorf("encode the dead letter: %w", err)
	}
	_, err = fmt.Fprintf(a.stdout, "%s\n", b)
	return err
}

// dlqError turns the Inspector's refusals into the CLI's: a bad id is a usage error, an
// entry that is not there a failure naming it.
func dlqError(err error, stage string, ids []string) error {
	switch {
	case errors.Is(err, admin.ErrBadRequest):
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, admin.ErrBadRequest.Error()+": "); ok {
			msg = after
		}
		return usagef("%s", msg)
	case errors.Is(err, admin.ErrNotFound):
		return notInDLQError{fmt.Sprintf("no dead letter %s in the DLQ of stage %s", strings.Join(ids, ", "), stage)}
	}
	return err
}

// notInDLQError reports dead letters a command named that are not in the stage's DLQ: exit 1.
type notInDLQError struct{ msg string }

func (e notInDLQError) Error() string { return e.msg }

func (a *app) dlqBulk(ctx context.Context, op string, args []string) error {
	synopsis := "(ID... | --all) --stage S"
	if op == "purge" {
		synopsis += " --yes"
	}
	fs := a.newFlagSet("dlq "+op, synopsis)
	stage := stageFlag(fs, true)
	all := fs.Bool("all", false, "every dead letter of the stage (those there when the command starts)")
	var yes *bool
	if op == "purge" {
		yes = fs.Bool("yes", false, "delete for good: purge refuses to run without it")
	}
	ids, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case *all && len(ids) > 0:
		return usagef("give dead letter ids or --all, not both")
	case !*all && len(ids) == 0:
		return usagef("want dead letter ids or --all")
	}
	if err := checkStageName(*stage, true); err != nil {
		return err
	}
	if yes != nil && !*yes {
		return usagef("refusing to delete dead letters for good without --yes")
	}
	in, rdb, err := a.inspector(ctx, []string{*stage})
	if err != nil {
		return err
	}
	defer rdb.Close()
	act := in.RequeueDLQ
	if op == "purge" {
		act = in.PurgeDLQ
	}
	sel := admin.DLQSelection{Stage: *stage, IDs: slices.Compact(slices.Sorted(slices.Values(ids))), All: *all}
	var total admin.BulkResult
	for {
		res, err := act(ctx, sel)
		total.Done += res.Done
		total.Missing += res.Missing
		if err != nil {
			if total.Done > 0 {
				fmt.Fprintf(a.stdout, "%s %s before the error\n", pastTense(op), deadLetters(total.Done))
			}
			return dlqError(err, *stage, ids)
		}
		if res.Remaining == 0 || res.UpTo == "" {
			break
		}
		sel.UpTo = res.UpTo // the same selection: not what was dead-lettered since
	}
	where := "from the DLQ of stage " + *stage
	if op == "requeue" {
		where = "of stage " + *stage + " onto its task stream"
	}
	fmt.Fprintf(a.stdout, "%s %s %s\n", pastTense(op), deadLetters(total.Done), where)
	if total.Missing > 0 {
		return notInDLQError{fmt.Sprintf("%d of the %d ids given are not in the DLQ of stage %s", total.Missing, len(sel.IDs), *stage)}
	}
	return nil
}

func pastTense(op string) string { return op + "d" }

// deadLetters counts dead letters in words: "1 dead letter", "3 dead letters".
func deadLetters(n int) string {
	if n == 1 {
		return "1 dead letter"
	}
	return strconv.Itoa(n) + " dead letters"
}

// optionalStage checks the stage a --stage flag names and returns it as the stages to read,
// nil (every registered stage) when it names none.
func optionalStage(stage string) ([]string, error) {
	if err := checkStageName(stage, false); err != nil {
		return nil, err
	}
	if stage == "" {
		return nil, nil
	}
	return []string{stage}, nil
}
