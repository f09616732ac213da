package handlers

import (
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/rs/zerolog"
)

// wmLogger adapts zerolog to watermill's LoggerAdapter. Watermill's Info lines, one per
// subscribe and per handler start, are logged at debug level. So are its errors once quiet says
// the consumer is shutting down: a subscriber's read loop outlives its closed client by up to
// one read and reports that as an error.
type wmLogger struct {
	l     zerolog.Logger
	quiet *atomic.Bool
}

func (w wmLogger) fields(e *zerolog.Event, f watermill.LogFields) *zerolog.Event {
	for k, v := range f {
		e = e.Interface(k, v)
	}
	return e
}

func (w wmLogger) Error(msg string, err error, f watermill.LogFields) {
	if w.quiet != nil && w.quiet.Load() {
		w.fields(w.l.Debug().Err(err), f).Msg(msg)
		return
	}
	w.fields(w.l.Error().Err(err), f).Msg(msg)
}
func (w wmLogger) Info(msg string, f watermill.LogFields)  { w.fields(w.l.Debug(), f).Msg(msg) }
func (w wmLogger) Debug(msg string, f watermill.LogFields) { w.fields(w.l.Trace(), f).Msg(msg) }
func (w wmLogger) Trace(msg string, f watermill.LogFields) { w.fields(w.l.Trace(), f).Msg(msg) }
func (w wmLogger) With(f watermill.LogFields) watermill.LoggerAdapter {
	return wmLogger{w.l.With().Fields(map[string]any(f)).Logger(), w.quiet}
}
