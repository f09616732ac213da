package handlers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
	"github.com/flightdeck-ai/flightdeck/stream"
)

// A handler's run of one message that returns an error is tried again, and a message whose
// runs keep failing for reasons of its own is dead-lettered: the rules watermill's Retry,
// PoisonQueue and Recoverer middleware gave a router. The stream subscriber runs serve itself
// (stream.Subscriber.Serve), on goroutines it keeps, so that a task crosses no router, channel
// or goroutine of its own between the read and its handler.
const (
	// handlerRetries is how many times a failed run is tried again before the message is
	// dead-lettered or handed out again.
	handlerRetries = 3
	// handlerRetryWait is the wait before the first retry. It doubles each time, up to
	// handlerRetryMax, with 30% jitter.
	handlerRetryWait = 200 * time.Millisecond
	handlerRetryMax  = 2 * time.Second
)

// serve runs the stage's handler on msg. A run that fails is tried again up to handlerRetries
// times, unless the consumer is stopping. Then a failure of the task itself dead-letters it as
// handler_failed, with a FAILED event when the task names itself, and acknowledges it. A
// failure because Redis was away returns the error, and the subscriber hands the message out
// again later: it is never dead-lettered for that. A panic in the handler's own code counts
// as a failure of the task; one in the call it runs fails the flight (flight.Guarded).
func (p *processor) serve(msg *message.Message) error {
	var err error
	wait := handlerRetryWait
	for attempt := 0; ; attempt++ {
		err = p.serveOnce(msg, attempt > 0)
		if err == nil || leavesPending(err) || attempt == handlerRetries {
			break
		}
		p.log.Warn().Err(err).Int("retry", attempt+1).Str("entry", msg.Metadata.Get(stream.MetaEntry)).
			Msg("handling the task failed; trying again")
		jitter := time.Duration(float64(wait) * (rand.Float64()*0.6 - 0.3))
		if !sleep(p.life.stop, wait+jitter) {
			break
		}
		wait = min(2*wait, handlerRetryMax)
	}
	if err == nil || leavesPending(err) || redisUnavailable(err) {
		return err
	}
	return p.deadLetter(context.WithoutCancel(p.life.stop), p.log, msg, "handler_failed", err.Error(), nil)
}

// serveOnce is one run of the handler on msg. retried says the handler ran for msg before.
func (p *processor) serveOnce(msg *message.Message, retried bool) (err error) {
	stream.Unsettle(msg)
	if p.life.draining.Load() {
		stream.Release(msg)
		return nil
	}
	if pe, _ := guard.Run(func() error { err = p.handle(msg, retried); return nil }, nil); pe != nil {
		p.log.Error().Str("panic", fmt.Sprint(pe.Value)).Str("stack", string(pe.Stack)).
			Str("entry", msg.Metadata.Get(stream.MetaEntry)).Msg("the handler panicked")
		return fmt.Errorf("handlers: %w: %v", errHandlerPanicked, pe.Value)
	}
	return err
}

// errHandlerPanicked is the error of a handler run that panicked.
var errHandlerPanicked = errors.New("handler panicked")
