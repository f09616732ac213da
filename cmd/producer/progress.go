package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// progress draws "\r[=====>    ] 1234/5000 events" on stderr, redrawn at most every 100 ms.
// It counts enqueued tasks with unit "", or with --wait the terminal events received with
// unit "events". Whoever prints other lines on the same terminal calls clear first and draw
// after. It is not safe for concurrent use.
type progress struct {
	out     io.Writer
	total   int
	unit    string
	enabled bool
	drawn   time.Time // when the bar was last drawn
	shown   int       // the count last drawn
	onLine  bool      // the bar is on the current line
}

const barWidth = 30

func newProgress(out io.Writer, total int, unit string, enabled bool) *progress {
	return &progress{out: out, total: total, unit: unit, enabled: enabled}
}

// set redraws the bar for done, unless it was drawn less than 100 ms ago. The last count
// is always drawn.
func (p *progress) set(done int) {
	if !p.enabled || (p.onLine && done < p.total && time.Since(p.drawn) < 100*time.Millisecond) {
		return
	}
	p.draw(done)
}

func (p *progress) draw(done int) {
	if !p.enabled {
		return
	}
	p.drawn, p.shown, p.onLine = time.Now(), done, true
	fill := 0
	if p.total > 0 {
		fill = min(done*barWidth/p.total, barWidth)
	}
	bar := strings.Repeat("=", fill)
	if fill < barWidth {
		bar += ">" + strings.Repeat(" ", barWidth-fill-1)
	}
	unit := ""
	if p.unit != "" {
		unit = " " + p.unit
	}
	fmt.Fprintf(p.out, "\r[%s] %d/%d%s", bar, done, p.total, unit)
}

// clear erases the bar from its line, so that another line can be printed there.
func (p *progress) clear() {
	if p.enabled && p.onLine {
		fmt.Fprint(p.out, "\r\033[K")
		p.onLine = false
	}
}

// end draws the last count and ends the bar's line.
func (p *progress) end(done int) {
	if !p.enabled {
		return
	}
	if !p.onLine || p.shown != done {
		p.draw(done)
	}
	fmt.Fprintln(p.out)
	p.onLine = false
}

// finish ends the bar's line and prints the final count line of an enqueue.
func (p *progress) finish(done int, elapsed time.Duration) {
	p.end(done)
	fmt.Fprintln(p.out, enqueuedLine(done, p.total, elapsed))
}

// enqueuedLine is the final count line of an enqueue.
func enqueuedLine(done, total int, elapsed time.Duration) string {
	perSec := 0.0
	if s := elapsed.Seconds(); s > 0 {
		perSec = float64(done) / s
	}
	return fmt.Sprintf("enqueued %d of %d tasks in %v (%.0f/s)", done, total, elapsed.Round(time.Millisecond), perSec)
}
