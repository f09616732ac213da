package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Output formats of the events that enqueue --wait, load --wait and tail print.
const (
	formatJSON  = "json"
	formatTable = "table"
)

// formatFlag registers --format for the events. Its default "" lets eventFormat pick by the output.
func formatFlag(fs *flag.FlagSet) *string {
	return fs.String("format", "", "output `format` of the events: table or json (default: table when stdout is a terminal, json otherwise)")
}

// listFormatFlag registers --format for a listing such as stages or dlq ls, a table by default.
func listFormatFlag(fs *flag.FlagSet) *string {
	return fs.String("format", formatTable, "output `format`: table or json")
}

// checkFormat refuses a --format other than table or json.
func checkFormat(f string) error {
	if f != formatTable && f != formatJSON {
		return usagef("--format %q: want table or json", f)
	}
	return nil
}

// eventFormat checks --format. An empty f is table when stdout is a terminal and json
// otherwise, so that pipes and files get JSON lines.
func (a *app) eventFormat(f string) (string, error) {
	if f != "" {
		return f, checkFormat(f)
	}
	if isTerminal(a.stdout) {
		return formatTable, nil
	}
	return formatJSON, nil
}

// Widths of the table's columns. Longer ids and keys are shortened in the middle, longer
// results and errors at the end.
const (
	colTask   = 36
	colStage  = 22
	colStatus = 9
	colShared = 8
	colMs     = 7
	colKey    = 30
	colResult = 60
)

// eventPrinter writes events one per line as JSON, or as rows of aligned columns under a
// header written before the first row. Rows have fixed widths, so that the columns stay
// aligned while events stream in.
type eventPrinter struct {
	out    io.Writer
	table  bool
	headed bool
}

func newEventPrinter(out io.Writer, format string) *eventPrinter {
	return &eventPrinter{out: out, table: format == formatTable}
}

// event prints one terminal event.
func (p *eventPrinter) event(e topics.Event) error {
	if !p.table {
		return writeJSON(p.out, e)
	}
	return p.row(e.TaskID, e.Stage, string(e.Status), string(e.Shared), strconv.FormatInt(e.QueuedMs+e.RunMs, 10),
		e.RequestKey, outcome(e))
}

// missing prints the receipt of a task whose event did not come: {"missing":{receipt}} or a
// MISSING row.
func (p *eventPrinter) missing(r client.Receipt) error {
	if !p.table {
		return writeJSON(p.out, map[string]client.Receipt{"missing": r})
	}
	return p.row(r.TaskID, r.Stage, "MISSING", "-", "-", r.RequestKey, "no event before the timeout")
}

func (p *eventPrinter) row(task, stage, status, shared, ms, key, outcome string) error {
	var b strings.Builder
	if !p.headed {
		p.headed = true
		writeRow(&b, "TASK", "STAGE", "STATUS", "SHARED", "MS", "KEY", "RESULT OR ERROR")
	}
	writeRow(&b, shortMiddle(task, colTask), shortMiddle(stage, colStage), status, shared, ms,
		shortMiddle(key, colKey), shortEnd(outcome, colResult))
	if _, err := io.WriteString(p.out, b.String()); err != nil {
		return fmt.Errorf("write output: %w", err)
	}
	return nil
}

// writeRow writes one table row: every column padded to its width, MS aligned right.
func writeRow(b *strings.Builder, task, stage, status, shared, ms, key, outcome string) {
	for _, c := range []struct {
		s string
		w int
	}{{task, colTask}, {stage, colStage}, {status, colStatus}, {shared, colShared}} {
		b.WriteString(pad(c.s, c.w))
		b.WriteString("  ")
	}
	b.WriteString(strings.Repeat(" ", max(colMs-utf8.RuneCountInString(ms), 0)) + ms + "  ")
	b.WriteString(pad(key, colKey) + "  " + outcome)
	b.WriteString("\n")
}

// pad fills s with spaces up to w runes.
func pad(s string, w int) string {
	return s + strings.Repeat(" ", max(w-utf8.RuneCountInString(s), 0))
}

// outcome is an event's error or result on one line: compact JSON, or where it is stored.
func outcome(e topics.Event) string {
	if e.Status != topics.StatusSucceeded {
		msg := e.Error
		if e.ErrorCode != "" {
			msg = e.ErrorCode + ": " + msg
		}
		return oneLine(strings.TrimSuffix(msg, ": "))
	}
	if len(e.Result) > 0 {
		var b bytes.Buffer
		if json.Compact(&b, e.Result) == nil {
			return b.String()
		}
		return oneLine(string(e.Result))
	}
	if e.ResultRef != "" {
		return "(stored in " + e.ResultRef + ")"
	}
	return ""
}

// oneLine replaces line breaks and tabs with spaces.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

// shortEnd cuts s to n runes, the last one "…".
func shortEnd(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}

// shortMiddle cuts s to n runes by replacing its middle with "…". It keeps the head, such as
// a key's prefix and stage, and the tail, the part that tells keys apart.
func shortMiddle(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	tail := (n - 1) / 2
	head := n - 1 - tail
	return string(r[:head]) + "…" + string(r[len(r)-tail:])
}

// cell is s on one line, cut to n runes, for a tabwriter table.
func cell(s string, n int) string { return shortEnd(oneLine(s), n) }

// orDash is s, or "-" when s is empty.
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
