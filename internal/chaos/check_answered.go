package chaos

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Rule 6: a model is never run for a task that is already answered.

// answeredSlack is how much later than a task's first terminal event a run of that task may
// seem to start and still count as started before it. The event's finishedAt is its writer's
// clock just before the answering script ran. A run's start is its consumer's "model call"
// log line or its token's Redis time. These are clocks of one machine, truncated to the
// millisecond, so a few milliseconds of skew are normal. 50 ms covers them with room to
// spare, and a woken owner that runs an answered task again does so after a lease or more.
const answeredSlack = 50 * time.Millisecond

// tokenClockWindow bounds how long before its log line a run's token may date its acquire.
// A token is max(previous token + 1, Redis TIME in µs) at the acquire that made the run's
// owner, so its time is the latest moment the flight handed the run out. A consumer stopped
// between that acquire and its "model call" line logs the run late, possibly after the owner
// that took over answered the task. The run still started before the answer. The
// sigstop-owner fault stops a consumer for the lease plus up to 3 s. Tokens dated outside the
// window, such as the small tokens of the unit tests, are not read as times.
const tokenClockWindow = time.Minute

// runStart is when run started: its token's time when that dates the acquire within
// tokenClockWindow before the log line, else the log line's time.
func runStart(r ModelRun) time.Time {
	if tt := time.UnixMicro(r.Token); tt.Before(r.At) && r.At.Sub(tt) <= tokenClockWindow {
		return tt
	}
	return r.At
}

// answeredCount counts the runs of tasks that already had a terminal event.
type answeredCount struct {
	violations int // started after the task's first event: rule 6 violations
	multi      int // the same, of tasks enqueued more than once or unsurely: allowed
	lateLog    int // logged after the first event, but their token dates the acquire before it
}

// checkAnswered applies rule 6. A model run of task T that started more than answeredSlack
// after T's first terminal event is a violation. A run is a "model call" line, and its start
// is runStart: its acquire as its token dates it, or else its log line. T's first terminal
// event is the earliest finishedAt of T's events. The bug this catches is an owner that ran
// its task again after the owner that took it over had answered it.
//
// Only the run's own task id counts. A run of another task of the same key is not a run of
// T, and a follower's task never runs the model: the owner's run answers it. Runs are allowed
// for a task the producer sent more than once, with two enqueues of its id or an unsure one.
// An XADD that answered an error may have been applied, even twice, so the second stream
// entry may legitimately run after the first was answered. Retries need no exception: a
// retryable failure writes no event, so a retry of T runs before T's first event.
func checkAnswered(h History, add func(Violation)) answeredCount {
	enqueued := map[string]int{}
	unsure := map[string]bool{}
	for _, e := range h.Enqueues {
		enqueued[e.TaskID]++
		if e.Unsure {
			unsure[e.TaskID] = true
		}
	}
	first := map[string]topics.Event{}
	for _, ev := range h.Events {
		if f, ok := first[ev.TaskID]; !ok || ev.FinishedAt.Before(f.FinishedAt) {
			first[ev.TaskID] = ev
		}
	}
	runsOf := map[string][]ModelRun{}
	for _, r := range h.Runs {
		runsOf[r.TaskID] = append(runsOf[r.TaskID], r)
	}
	var c answeredCount
	for _, id := range sortedKeys(runsOf) {
		ev, ok := first[id]
		if !ok {
			continue
		}
		runs := runsOf[id]
		sort.SliceStable(runs, func(i, j int) bool { return runs[i].Token < runs[j].Token })
		answeredBy := ev.FinishedAt.Add(answeredSlack)
		for _, r := range runs {
			if !runStart(r).After(answeredBy) {
				if r.At.After(answeredBy) {
					c.lateLog++
				}
				continue
			}
			if enqueued[id] > 1 || unsure[id] {
				c.multi++
				continue
			}
			c.violations++
			add(Violation{Rule: RuleAnsweredRun, Key: r.Key, TaskID: id, Detail: fmt.Sprintf(
				"model run with token %d (reason %s, attempt %d, %s) started at %s, %s after the task's first terminal event (%s, %s, token %d, by %s, finished %s); the task's runs: %s",
				r.Token, r.Reason, r.Attempt, r.Consumer, runStart(r).Format(time.StampMilli),
				runStart(r).Sub(ev.FinishedAt).Round(time.Millisecond), ev.Status, ev.Shared, ev.OwnerToken, ev.Consumer,
				ev.FinishedAt.Format(time.StampMilli), describeTaskRuns(runs))})
		}
	}
	return c
}

// describeTaskRuns lists a task's runs as token/reason/consumer@time.
func describeTaskRuns(runs []ModelRun) string {
	parts := make([]string, len(runs))
	for i, r := range runs {
		parts[i] = fmt.Sprintf("%d/%s/%s@%s", r.Token, r.Reason, r.Consumer, r.At.Format(time.StampMilli))
	}
	return strings.Join(parts, ", ")
}
