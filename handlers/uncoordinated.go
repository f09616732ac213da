package handlers

import (
	"context"
	"fmt"
	"time"

	"github.com/flightdeck-ai/flightdeck/executor"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/guard"
	"github.com/flightdeck-ai/flightdeck/stream"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// runUncoordinated runs the model without the flight state machine. For LOCAL_ONLY stages it
// runs once per key per process, and concurrent tasks of one key share the run. For BYPASS
// stages it runs once per task. The task's event says shared "local", and the entry is
// acknowledged after it.
func (t *taskRun) runUncoordinated(ctx context.Context) error {
	p := t.p
	call := func(ctx context.Context) ([]byte, error) {
		p.metrics.modelCalls.WithLabelValues(t.task.Stage).Inc()
		rctx, cancel := context.WithTimeout(ctx, p.stage.RunningTTL)
		defer cancel()
		rctx, used := flight.CollectUsage(rctx)
		rctx, sp := t.startCall(rctx, flight.Decision{Attempts: 1})
		out, err := flight.Guarded(func() ([]byte, error) {
			return p.model.Call(rctx, model.Request{Stage: t.task.Stage, TaskID: t.task.TaskID, Tenant: t.task.Tenant,
				SessionID: t.task.SessionID, Input: t.task.Input, ModelVersion: t.task.ModelVersion,
				PromptVersion: t.task.PromptVersion, Attempt: 1, Consumer: p.name}, nil)
		}, func(pe *guard.PanicError) {
			l := t.logger()
			l.Error().Interface("panic", pe.Value).Str("stack", string(pe.Stack)).Msg("the call panicked; the task fails")
		})
		p.ledger.called(t.task.Tenant, rateLimited(err))
		endCall(rctx, sp, err)
		if u := used(); u != nil {
			p.metrics.tokens.WithLabelValues(t.task.Stage, "prompt").Add(float64(u.PromptTokens))
			p.metrics.tokens.WithLabelValues(t.task.Stage, "completion").Add(float64(u.CompletionTokens))
			p.ledger.spent(t.task.Tenant, u)
		}
		return out, err
	}
	start := time.Now()
	var out []byte
	var err error
	if p.stage.Mode == executor.ModeLocalOnly {
		var lr executor.LocalResult[[]byte]
		lr, err = p.local.Do(ctx, t.key, call)
		out = lr.Value
	} else {
		out, err = call(ctx)
	}
	ev := topics.Event{Status: topics.StatusSucceeded, Shared: topics.SharedLocal, RunMs: time.Since(start).Milliseconds()}
	if err != nil {
		if ctx.Err() != nil {
			stream.Release(t.msg)
			return nil
		}
		me := model.Classify(err)
		ev.Status, ev.ErrorType, ev.ErrorCode, ev.Error = topics.StatusFailed, me.Type, me.Code, me.Error()
	} else {
		ev.SetResult(out, p.stage.MaxInlineResult, "")
	}
	ev.TaskID, ev.Stage, ev.Tenant, ev.RequestKey, ev.Consumer = t.task.TaskID, t.task.Stage, t.task.Tenant, t.key, p.name
	ev.QueuedMs, ev.FinishedAt = t.queued.Milliseconds(), time.Now()
	if err := p.writer.PublishEvents(context.WithoutCancel(ctx), ev); err != nil {
		return fmt.Errorf("handlers: task %s: %w", t.task.TaskID, err)
	}
	p.metrics.tasks.WithLabelValues(t.task.Stage, string(ev.Shared)+"_"+string(ev.Status)).Inc()
	p.ledger.answered(t.task.Tenant, pathLocal, 1, ev.Status, nil)
	t.traceOutcome(string(ev.Shared) + "_" + string(ev.Status))
	p.metrics.endToEnd.WithLabelValues(t.task.Stage).Observe(time.Since(t.received).Seconds() + t.queued.Seconds())
	return nil
}
