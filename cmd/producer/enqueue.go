package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"time"

	"golang.org/x/time/rate"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// chunk is how many tasks one EnqueueBatch call sends when nothing paces them.
const chunk = 500

// waitOpts are the --wait options of enqueue and load.
type waitOpts struct {
	wait     bool
	timeout  time.Duration
	progress bool
	format   *string
}

func (w *waitOpts) register(fs *flag.FlagSet) {
	fs.BoolVar(&w.wait, "wait", false, "print each terminal event as it arrives, then a summary")
	fs.DurationVar(&w.timeout, "timeout", 60*time.Second, "with --wait: how long to wait for the events after the last enqueue")
	fs.BoolVar(&w.progress, "progress", false, "show the progress bar (tasks enqueued, with --wait events received) on stderr even when it is not a terminal")
	w.format = formatFlag(fs)
}

// job describes what submit enqueues.
type job struct {
	total  int
	stages []string
	// next returns the next tasks to enqueue after done tasks. It may block to pace them.
	next     func(ctx context.Context, done int) ([]topics.Task, error)
	single   bool // one task: no progress bar
	anyStage bool // --any-stage: no check of the stages against the stage registry
	waitOpts
}

func (a *app) enqueue(ctx context.Context, args []string) error {
	fs := a.newFlagSet("enqueue", "--stage S --tenant T --input JSON [options]\n       producer enqueue -f FILE [options]")
	var t topics.Task
	var input, file string
	var wo waitOpts
	var anyStage bool
	fs.StringVar(&t.Stage, "stage", "", "task `stage` (with -f: for lines without one)")
	fs.StringVar(&t.Tenant, "tenant", "", "`tenant` (with -f: for lines without one)")
	fs.StringVar(&t.SessionID, "session", "", "session `id` (with -f: for lines without one)")
	fs.StringVar(&input, "input", "", "model input as `JSON`")
	fs.StringVar(&t.RequestKey, "key", "", "explicit request `key` (default: the consumer derives the semantic key)")
	fs.StringVar(&t.TaskID, "id", "", "task `id` (default: a new UUID)")
	fs.StringVar(&t.ModelVersion, "model-version", "", "model `version` (with -f: for lines without one)")
	fs.StringVar(&t.PromptVersion, "prompt-version", "", "prompt `version` (with -f: for lines without one)")
	fs.StringVar(&t.Deadline, "deadline", "", "RFC 3339 `time` after which the result is no longer wanted")
	fs.StringVar(&t.NotBefore, "not-before", "", "RFC 3339 `time` before which the task must not start (a scheduled task)")
	in := fs.Duration("in", 0, "start the task no sooner than this `duration` from now (sets notBefore; with --wait the timeout grows by it)")
	fs.DurationVar(&a.horizon, "schedule-horizon", topics.DefaultScheduleHorizon,
		"refuse a notBefore further ahead than this `duration` (the consumers' stage setting scheduleHorizon)")
	fs.StringVar(&file, "f", "", "JSONL `file` of tasks, one topics.Task JSON per line (\"-\" for stdin)")
	fs.BoolVar(&anyStage, "any-stage", false, anyStageUsage)
	wo.register(fs)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}

	var tasks []topics.Task
	if file != "" {
		if input != "" || t.RequestKey != "" || t.TaskID != "" || t.Deadline != "" || t.NotBefore != "" || *in != 0 {
			return usagef("--input, --key, --id, --deadline, --not-before and --in describe one task; they do not mix with -f")
		}
		if tasks, err = a.readTasks(file, t); err != nil {
			return err
		}
		if len(tasks) == 0 {
			return fmt.Errorf("%s: no tasks", file)
		}
	} else {
		switch {
		case t.Stage == "" || t.Tenant == "" || input == "":
			return usagef("--stage, --tenant and --input are required (or -f FILE)")
		case !json.Valid([]byte(input)):
			return usagef("--input is not valid JSON")
		}
		if t.Deadline != "" {
			if _, err := time.Parse(time.RFC3339, t.Deadline); err != nil {
				return usagef("--deadline %q is not an RFC 3339 time", t.Deadline)
			}
		}
		switch {
		case *in < 0:
			return usagef("--in %v is negative", *in)
		case *in > 0 && t.NotBefore != "":
			return usagef("give --in or --not-before, not both")
		case *in > 0:
			t.NotBefore = topics.FormatTime(time.Now().Add(*in))
		case t.NotBefore != "":
			nb, err := time.Parse(time.RFC3339, t.NotBefore)
			if err != nil {
				return usagef("--not-before %q is not an RFC 3339 time", t.NotBefore)
			}
			*in = max(time.Until(nb), 0)
		}
		wo.timeout += *in
		t.Input = json.RawMessage(input)
		check := t
		fill(&check.TaskID, "placeholder") // Enqueue generates a missing id
		if err := check.Validate(topics.Limits{}); err != nil {
			return usagef("%v", err) // a flag's value: --tenant, --stage, --id, --key, ...
		}
		if err := check.CheckNotBefore(time.Now(), a.horizon); err != nil {
			return usagef("%v (--schedule-horizon)", err) // --in or --not-before
		}
		tasks = []topics.Task{t}
	}
	var stages []string
	for _, t := range tasks {
		if !slices.Contains(stages, t.Stage) {
			stages = append(stages, t.Stage)
		}
	}
	return a.submit(ctx, job{
		total: len(tasks), stages: stages, single: file == "", anyStage: anyStage, waitOpts: wo,
		next: func(_ context.Context, done int) ([]topics.Task, error) {
			return tasks[done:min(done+chunk, len(tasks))], nil
		},
	})
}

// readTasks reads a JSONL file of tasks. Empty fields take def's stage, tenant, session and
// versions. Every task is checked before anything is enqueued.
func (a *app) readTasks(name string, def topics.Task) ([]topics.Task, error) {
	var r io.Reader = a.stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	var tasks []topics.Task
	for line := 1; sc.Scan(); line++ {
		b := sc.Bytes()
		if len(trimSpace(b)) == 0 {
			continue
		}
		// Check field names exactly as the consumers read them. A misspelt field would be
		// dead-lettered there, or silently change the key if it is a key field.
		if err := topics.CheckFieldNames(b, topics.Limits{}); err != nil {
			return nil, usagef("%s:%d: %v", name, line, err)
		}
		var t topics.Task
		if err := json.Unmarshal(b, &t); err != nil {
			return nil, fmt.Errorf("%s:%d: not a task JSON object: %w", name, line, err)
		}
		fill(&t.Stage, def.Stage)
		fill(&t.Tenant, def.Tenant)
		fill(&t.SessionID, def.SessionID)
		fill(&t.ModelVersion, def.ModelVersion)
		fill(&t.PromptVersion, def.PromptVersion)
		check := t
		fill(&check.TaskID, "placeholder") // Enqueue generates missing ids
		if err := check.Validate(topics.Limits{}); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", name, line, err)
		}
		if err := check.CheckNotBefore(time.Now(), a.horizon); err != nil {
			return nil, fmt.Errorf("%s:%d: %w (--schedule-horizon)", name, line, err)
		}
		tasks = append(tasks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return tasks, nil
}

func fill(s *string, def string) {
	if *s == "" {
		*s = def
	}
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t' || b[0] == '\r') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

func (a *app) load(ctx context.Context, args []string) error {
	fs := a.newFlagSet("load", "[options]")
	var (
		n, keys, burst, latency int
		perSec                  float64
		stagesFlag, tenant      string
		wo                      waitOpts
		anyStage                bool
	)
	fs.IntVar(&n, "n", 600, "number of tasks")
	fs.IntVar(&keys, "keys", 60, "number of distinct inputs; task i uses input i % keys")
	fs.Float64Var(&perSec, "rate", 200, "tasks per second (0: as fast as possible)")
	fs.IntVar(&burst, "burst", 20, "token bucket burst")
	fs.StringVar(&stagesFlag, "stages", defaultStages, "comma-separated `stages`, used round-robin")
	fs.StringVar(&tenant, "tenant", "load", "`tenant` of every task")
	fs.IntVar(&latency, "latency-ms", 50, "simulated model latency in ms (input.sim.latencyMs)")
	fs.BoolVar(&anyStage, "any-stage", false, anyStageUsage)
	wo.register(fs)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	stages := splitList(stagesFlag)
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case n < 1 || keys < 1:
		return usagef("--n and --keys must be at least 1")
	case perSec < 0 || burst < 1 || latency < 0:
		return usagef("--rate and --latency-ms must not be negative, --burst must be at least 1")
	case len(stages) == 0:
		return usagef("--stages is empty")
	}
	lim := rate.NewLimiter(rate.Limit(perSec), burst)
	if perSec == 0 {
		lim = rate.NewLimiter(rate.Inf, burst)
	}
	return a.submit(ctx, job{
		total: n, stages: stages, anyStage: anyStage, waitOpts: wo,
		next: func(ctx context.Context, done int) ([]topics.Task, error) {
			k := min(chunk, n-done)
			if perSec > 0 {
				// Take what the bucket holds now, at least one token, so that a full bucket
				// goes out in one round trip and a steady rate one task at a time.
				k = min(max(int(lim.Tokens()), 1), burst, n-done)
			}
			if err := lim.WaitN(ctx, k); err != nil {
				return nil, err
			}
			tasks := make([]topics.Task, k)
			for j := range tasks {
				i := done + j
				key := i % keys
				tasks[j] = topics.Task{
					Stage: stages[i%len(stages)], Tenant: tenant,
					Input: json.RawMessage(fmt.Sprintf(`{"question":"q%d","answer":"answer %d","sim":{"latencyMs":%d}}`, key, key, latency)),
				}
			}
			return tasks, nil
		},
	})
}

// submit enqueues a job's tasks. Without --wait it prints each task's receipt. With --wait it
// prints their terminal events, the receipts of the tasks still missing at the timeout with
// hints at the cause, and a summary. Unless --any-stage is set, it refuses stages that no
// consumer has registered. It subscribes to the result streams before the first enqueue, so
// that every arrival time is measured when the event comes.
func (a *app) submit(ctx context.Context, j job) error {
	format, err := a.eventFormat(*j.format)
	if err != nil {
		return err
	}
	if !j.wait && *j.format != "" {
		return usagef("--format sets how --wait prints the events: it needs --wait")
	}
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if !j.anyStage {
		if err := a.checkStages(ctx, c, j.stages); err != nil {
			return err
		}
	}

	start := time.Now()
	showBar := !j.single && (j.progress || isTerminal(a.stderr))
	printer := newEventPrinter(a.stdout, format)
	var w *waiter
	if j.wait {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		ch, err := c.Subscribe(sctx, j.stages, "$")
		if err != nil {
			return err
		}
		w = newWaiter(a, client.NewTally(start), cancel, printer, newProgress(a.stderr, j.total, "events", showBar))
		go w.loop(ch)
	}

	// With --wait the waiter's bar counts the events. Otherwise this one counts the enqueued tasks.
	bar := newProgress(a.stderr, j.total, "", showBar && w == nil)
	done := 0
	var enqErr error
	for done < j.total {
		tasks, err := j.next(ctx, done)
		if err != nil {
			enqErr = err
			break
		}
		receipts, err := c.EnqueueBatch(ctx, tasks)
		for _, r := range receipts {
			if w != nil {
				w.expect(r)
			} else if werr := writeJSON(a.stdout, r); werr != nil {
				return werr
			}
		}
		done += len(receipts)
		bar.set(done)
		if err != nil {
			enqErr = err
			break
		}
	}
	elapsed := time.Since(start)
	switch {
	case j.single:
	case w != nil:
		w.say(enqueuedLine(done, j.total, elapsed))
	default:
		bar.finish(done, elapsed)
	}
	if enqErr != nil {
		if ctx.Err() != nil {
			enqErr = fmt.Errorf("interrupted after %d of %d tasks", done, j.total)
		}
		if w != nil {
			w.stop()
		}
		return enqErr
	}
	if w == nil {
		return nil
	}

	w.tally.Seal()
	timer := time.NewTimer(j.timeout)
	defer timer.Stop()
	var why string
	select {
	case <-w.tally.Done():
	case <-timer.C:
		why = "timeout after " + j.timeout.String()
	case <-ctx.Done():
		why = "interrupted"
	}
	end := time.Now()
	w.stop()
	s := w.tally.Summary(end)
	missing := w.tally.Missing()
	for _, r := range missing {
		if err := printer.missing(r); err != nil {
			return err
		}
	}
	if printer.table {
		printTable(a.stdout, s) // the table is the summary: no JSON line
	} else {
		if err := writeJSON(a.stdout, map[string]client.Summary{"summary": s}); err != nil {
			return err
		}
		printTable(a.stderr, s)
	}
	if s.Missing > 0 {
		fmt.Fprintf(a.stderr, "producer: %s: %d of %d events missing\n", why, s.Missing, s.Tasks)
		a.hints(ctx, rdb, c, missing)
		return errReported
	}
	return nil
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// isTerminal reports whether w is a character device, such as a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
