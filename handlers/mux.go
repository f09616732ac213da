package handlers

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// HandlerFunc runs the model call of one flight, the work a stage exists for. task carries the
// task's input and identity. progress is never nil. It reports that a long call is still
// making progress and feeds the stage's stallTimeout. The function returns the result as any
// JSON value, which every task of the flight's key receives, or an error:
//   - A *model.Error says whether another attempt may succeed. model.Permanent and
//     model.RetryLater build the common ones.
//   - context.Canceled is final. It means the flight was cancelled or this owner lost it.
//   - context.DeadlineExceeded and network timeouts are retryable timeouts.
//   - Any other error is a retryable upstream failure.
//
// Retryable failures are retried by another owner attempt, up to the stage's maxAttempts.
// The function must return when ctx is done, and must not keep task.Input after it returns.
// It runs on as many goroutines at once as the stage's concurrency.
type HandlerFunc func(ctx context.Context, task Request, progress ProgressFunc) (json.RawMessage, error)

// Request is the model.Request a handler is given: Input, Stage, Tenant, SessionID, TaskID,
// RequestKey, ModelVersion, PromptVersion, Params, Attempt and Deadline.
type Request = model.Request

// ProgressFunc is model.ProgressFunc. It reports that a handler's call made progress, such as a
// streamed chunk, which keeps a long call from being taken over as stalled.
type ProgressFunc = model.ProgressFunc

// Permanent fails every task of the key for good with errorCode code, without a retry, as
// model.Permanent does.
func Permanent(code string, err error) error { return model.Permanent(code, err) }

// RetryLater retries the task's key no sooner than d from now, as for a provider's Retry-After.
// It calls model.RetryLater.
func RetryLater(d time.Duration, err error) error { return model.RetryLater(d, err) }

// Usage is what a handler's model call used, as given to ReportUsage.
type Usage = model.Usage

// ReportUsage records, from inside a handler, what its model call used. The stage's limiter is
// charged it and the owner's event carries it. It calls model.ReportUsage.
func ReportUsage(ctx context.Context, u Usage) { model.ReportUsage(ctx, u) }

// Mux routes each stage to the code that runs its tasks, as asynq's ServeMux routes task types.
// HandleFunc registers a function, Handle a model adapter. A Consumer given a Mux as
// Config.Handlers consumes every stage registered in it, besides Config.Stages. Register
// everything before NewConsumer. A Mux is not safe for concurrent registration.
type Mux struct {
	models map[string]model.Model
}

// NewMux returns an empty Mux.
func NewMux() *Mux { return &Mux{models: map[string]model.Model{}} }

// HandleFunc registers fn as the handler of stage. It panics when fn is nil, when stage already
// has a handler, or when stage is not a valid stage name of [a-z0-9-] and at most 64 bytes.
// These are programming errors, found at start.
func (m *Mux) HandleFunc(stage string, fn HandlerFunc) {
	if fn == nil {
		panic(fmt.Sprintf("handlers: Mux.HandleFunc(%q): nil function", stage))
	}
	m.Handle(stage, funcModel{fn: fn})
}

// Handle registers the model adapter mdl as the handler of stage. mdl may be model.NewOpenAI, a
// model.Sim or your own model.Model. It panics as HandleFunc does.
func (m *Mux) Handle(stage string, mdl model.Model) {
	if err := topics.CheckStage(stage); err != nil {
		panic(fmt.Sprintf("handlers: Mux.Handle(%q): %v", stage, err))
	}
	if mdl == nil {
		panic(fmt.Sprintf("handlers: Mux.Handle(%q): nil model", stage))
	}
	if _, dup := m.models[stage]; dup {
		panic(fmt.Sprintf("handlers: Mux.Handle(%q): stage registered twice", stage))
	}
	m.models[stage] = mdl
}

// Stages returns the registered stages, sorted.
func (m *Mux) Stages() []string {
	out := make([]string, 0, len(m.models))
	for s := range m.models {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// handler returns the model registered for stage.
func (m *Mux) handler(stage string) (model.Model, bool) {
	if m == nil {
		return nil, false
	}
	mdl, ok := m.models[stage]
	return mdl, ok
}

// ModelHandler is the StageConfig.Model name of a stage run by a HandleFunc function.
const ModelHandler = "handler"

// funcModel adapts a HandlerFunc to model.Model.
type funcModel struct{ fn HandlerFunc }

// Name returns ModelHandler.
func (funcModel) Name() string { return ModelHandler }

// Call runs the function with a progress callback that is never nil.
func (f funcModel) Call(ctx context.Context, req model.Request, progress model.ProgressFunc) (json.RawMessage, error) {
	if progress == nil {
		progress = func() {}
	}
	out, err := f.fn(ctx, req, progress)
	if err != nil {
		return nil, err
	}
	if !json.Valid(out) {
		return nil, &model.Error{Retryable: false, Type: model.TypeBadOutput, Code: "invalid_json",
			Message: "the handler returned a result that is not JSON"}
	}
	return out, nil
}
