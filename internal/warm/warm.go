// Package warm runs functions on long-lived goroutines whose stacks have grown already.
//
// A watermill router starts a goroutine per message, and a flight run goes deep enough that
// a fresh goroutine's stack is grown, and copied, two or three times for every task. A Pool
// runs that work on a goroutine kept from earlier runs instead.
package warm

import (
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/guard"
)

// Pool runs functions on reused goroutines. Create it with New. Close lets its idle
// goroutines go.
type Pool struct {
	jobs chan job
	idle time.Duration
	stop chan struct{}
	once sync.Once
}

type job struct {
	f    func() error
	done chan outcome
}

type outcome struct {
	err   error
	panic *guard.PanicError
}

// New returns a pool whose goroutines end after idle without work.
func New(idle time.Duration) *Pool {
	return &Pool{jobs: make(chan job), idle: idle, stop: make(chan struct{})}
}

// Close ends the idle goroutines, and each busy one once its function returned. Do still
// works after Close, on a goroutine of its own.
func (p *Pool) Close() {
	p.once.Do(func() { close(p.stop) })
}

// Do runs f on a pool goroutine, a new one when none is free, and returns its error. A panic
// of f is raised again in the caller as a *guard.PanicError.
func (p *Pool) Do(f func() error) error {
	j := job{f: f, done: make(chan outcome, 1)}
	select {
	case p.jobs <- j:
	default:
		go p.worker(j)
	}
	o := <-j.done
	if o.panic != nil {
		panic(o.panic)
	}
	return o.err
}

func (p *Pool) worker(j job) {
	timer := time.NewTimer(p.idle)
	defer timer.Stop()
	for {
		j.done <- run(j)
		timer.Reset(p.idle)
		select {
		case j = <-p.jobs:
		case <-timer.C:
			return
		case <-p.stop:
			return
		}
	}
}

// run runs j's function. A runtime.Goexit in it ends this goroutine, and the caller gets it
// as a panic.
func run(j job) outcome {
	p, err := guard.Run(j.f, func(p *guard.PanicError) { j.done <- outcome{panic: p} })
	return outcome{err: err, panic: p}
}
