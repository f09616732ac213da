package flight

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Finished is the outcome of a flight this process completed, kept for a moment so that a
// later duplicate of its key is answered by Hit instead of a full acquire (DESIGN.md section
// 5, "Late duplicates").
type Finished struct {
	o Ownership
	// raw is the result as the owner's call returned it, until inline compacts it: most kept
	// outcomes never answer a duplicate, so their results are never parsed again.
	raw    []byte
	once   sync.Once
	result []byte // the compact result when the events of others inline it, else nil
}

// inline returns the compact result when the events of other tasks inline it, else nil.
func (f *Finished) inline() []byte {
	f.once.Do(func() {
		if f.raw != nil {
			f.result, f.raw = inlined(f.o, f.raw), nil
		}
	})
	return f.result
}

// inlined returns result compacted when it is JSON that the events of o's other tasks inline,
// else nil.
func inlined(o Ownership, result []byte) []byte {
	if compact, err := compactJSON(result); err == nil && len(compact) <= sharedInline(o.MaxSharedInline, o.MaxInline) {
		return compact
	}
	return nil
}

// maxKeptResult is the largest result a Finished keeps: a key whose events inline a larger one
// is not kept, so that the outcomes a consumer keeps stay small (maxFinished of them per stage).
const maxKeptResult = 4 << 10

// Finished returns what Hit needs of the flight o completed with result; o.Usage is what the
// call reported it used. It keeps the result only when the events of other tasks inline it,
// and returns nil when that result is larger than 4 KiB.
func (c *Coordinator) Finished(o Ownership, result []byte) *Finished {
	f := &Finished{o: o}
	f.o.Joined = nil
	f.o.Usage = parseUsage(usageArg(o.Usage).(string)) // as the record keeps it
	if len(result) <= maxKeptResult {
		f.raw = result // compacted, if ever, when a duplicate comes
		return f
	}
	// Compacting may bring a larger result within the bound: it is rare, so it is done now.
	if f.result = inlined(f.o, result); len(f.result) > maxKeptResult {
		return nil
	}
	return f // raw stays nil: inline has nothing left to compact
}

// FinishedBy returns what Hit needs of the flight whose stored outcome answered the acquire p
// made as a hit (d), or nil when d is no hit. p.WantInline must have been set, so that d
// carries the result when the events of other tasks inline it.
func (c *Coordinator) FinishedBy(p AcquireParams, d Decision) *Finished {
	if d.Action != ActionResultHit || !p.WantInline {
		return nil
	}
	pol := c.policyArgsOf(p.Policy).pol
	o := Ownership{Key: p.Key, Token: d.Token, Attempts: d.Attempts, OwnerID: d.OwnerID, Task: Task{ID: d.OwnerTaskID},
		Stage: p.Stage, Tenant: p.Tenant, Policy: pol, MaxInline: p.MaxInline, MaxSharedInline: p.MaxSharedInline,
		Usage: d.Usage, Trace: d.OwnerTrace}
	if len(d.Result) > maxKeptResult {
		return nil
	}
	return &Finished{o: o, result: d.Result}
}

// Hit answers task t, a duplicate of f's key, from f: its event, labelled hit, and the
// acknowledgement of its entry, in one call that first checks that the flight is still
// SUCCEEDED under f's token. ok and a nil error mean it did; ok false and a nil error that the
// flight no longer holds f's outcome, nothing was written, and the caller acquires as usual.
// A task whose entry is no longer pending was answered before, by whoever acknowledged it:
// then Decision.Shared is "" and nothing was written. After an error the call may have
// answered the task or not. run is the caller's runMs, as in
// AcquireParams.Run. Like an acquire's hit, the event says no usage, and Decision.Usage is the
// owner's, which the task avoided.
func (c *Coordinator) Hit(ctx context.Context, f *Finished, t Task, run time.Duration) (d Decision, ok bool, err error) {
	o := f.o
	if t.ID == "" {
		return Decision{}, false, nil
	}
	body := o
	body.Usage = nil // an event reports usage only for the call that used it
	result := f.inline()
	ev := make([]byte, 0, 384+len(o.Key)+len(t.ID)+len(result))
	ev = append(ev, `{"taskId":"`...)
	ev = append(ev, t.ID...)
	ev = append(ev, `","shared":"hit","queuedMs":`...)
	ev = strconv.AppendInt(ev, t.Queued.Milliseconds(), 10)
	ev = append(ev, ',')
	ev = c.successBody(ev, body, result, result != nil, run)
	ev = append(ev, '}')
	argv := c.answerArgv(o.Stage, t, run, sharedInline(o.MaxSharedInline, o.MaxInline))
	argv = append(argv, tok(o.Token), ev)
	cmd, _, _ := c.fcall(ctx, lua.Hit, o.Policy, c.ks.FlightKeys(o.Key), argv)
	res, err := cmd.Slice()
	if err != nil {
		return Decision{}, false, fmt.Errorf("flight: hit %q: %w", o.Key, err)
	}
	if len(res) < 1 {
		return Decision{}, false, fmt.Errorf("%w: hit answered nothing", ErrProtocol)
	}
	ans, err := c.parseTail(res, 1)
	if err != nil {
		return Decision{}, false, fmt.Errorf("flight: hit %q: %w", o.Key, err)
	}
	code, _ := res[0].(string)
	if code != "HIT" && code != "ANSWERED" {
		return Decision{}, false, nil
	}
	d = Decision{Action: ActionResultHit, Token: o.Token, Attempts: max(o.Attempts, 1), OwnerID: o.OwnerID,
		OwnerTaskID: o.Task.ID, Status: StatusSucceeded, Shared: topics.SharedHit, Usage: o.Usage,
		OwnerTrace: o.Trace, Answered: ans.n, Waited: ans.waited}
	if code == "ANSWERED" {
		d.Shared = "" // the task was answered before, by another call
	}
	if err := c.settle(ctx, o.Key, o.Stage, ans); err != nil {
		return d, true, fmt.Errorf("flight: hit %q: %w", o.Key, err)
	}
	return d, true, nil
}
