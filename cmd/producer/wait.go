package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// waiter prints the first terminal event of each enqueued task as it arrives. loop reads the
// events from a subscription opened before the first enqueue. A client.Tally matches them to
// receipts, whichever comes first.
type waiter struct {
	a       *app
	tally   *client.Tally
	cancel  context.CancelFunc // ends the subscription
	printer *eventPrinter

	mu      sync.Mutex // serializes counting and printing, guards the fields below
	stopped bool       // set by stop: nothing is counted or printed afterwards
	events  int        // the events printed
	bar     *progress  // events received / tasks, on stderr
}

func newWaiter(a *app, t *client.Tally, cancel context.CancelFunc, printer *eventPrinter, bar *progress) *waiter {
	return &waiter{a: a, tally: t, cancel: cancel, printer: printer, bar: bar}
}

// loop reads the subscription until it is closed or the waiter is stopped.
func (w *waiter) loop(ch <-chan topics.StreamEvent) {
	for se := range ch {
		if se.Err != nil {
			fmt.Fprintf(w.a.stderr, "producer: skipping malformed entry %s of %s: %v\n", se.ID, se.Stream, se.Err)
			continue
		}
		w.mu.Lock()
		if w.stopped {
			w.mu.Unlock()
			return
		}
		if w.tally.Observe(se.Event, time.Now()) {
			w.print(se.Event)
		}
		w.mu.Unlock()
	}
}

// expect registers a receipt. An event that came before it is printed now.
func (w *waiter) expect(r client.Receipt) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if e, ok := w.tally.Expect(r); ok && !w.stopped {
		w.print(e)
	}
}

// print writes one event line and moves the bar on. w.mu is held.
func (w *waiter) print(e topics.Event) {
	w.bar.clear()
	if err := w.printer.event(e); err != nil {
		fmt.Fprintf(w.a.stderr, "producer: %v\n", err)
	}
	w.events++
	w.bar.draw(w.events)
}

// say prints a line on stderr beside the bar.
func (w *waiter) say(line string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.bar.clear()
	fmt.Fprintln(w.a.stderr, line)
	w.bar.draw(w.events)
}

// stop ends the subscription. Once it returns, nothing more is counted or printed, so the
// tally's summary matches the printed events. It does not wait for the subscription's
// current XREAD to return.
func (w *waiter) stop() {
	w.cancel()
	w.mu.Lock()
	w.stopped = true
	w.bar.end(w.events)
	w.mu.Unlock()
}

// printTable writes the summary as a human-readable table.
func printTable(out io.Writer, s client.Summary) {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	rows := []struct {
		name  string
		value any
	}{
		{"tasks", s.Tasks}, {"events", s.Events}, {"missing", s.Missing},
		{"distinct keys", s.DistinctKeys}, {"owner runs", s.Owner}, {"hits", s.Hit},
		{"followers", s.Follower}, {"local", s.Local}, {"from archive", s.Archive}, {"failures", s.Failures},
		{"latency p50", fmt.Sprintf("%.1f ms", s.P50Ms)}, {"latency p99", fmt.Sprintf("%.1f ms", s.P99Ms)},
		{"wall time", (time.Duration(s.WallMs) * time.Millisecond).String()},
	}
	fmt.Fprintln(tw, strings.Repeat("-", 28))
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%v\n", r.name, r.value)
	}
	_ = tw.Flush()
}
