// Package chaos is Flightdeck's fault-injection run (`make chaos`): it starts its own
// redis-server (AOF on), several real consumer processes and an in-process producer, injects
// faults at seeded random times (SIGKILL and SIGSTOP of consumers, Redis restarts and pauses),
// records a History (every enqueue, every model run with its fencing token, every terminal
// event, the flights and stream backlog at the end) and checks it with Check, a pure function.
package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// History is everything a chaos run observed. Check reads nothing else.
type History struct {
	// Enqueues lists every task the producer sent, in order.
	Enqueues []Enqueue `json:"enqueues"`
	// Runs lists every model run, parsed from the consumers' "model call" log lines.
	Runs []ModelRun `json:"runs"`
	// Completions lists every result a consumer had accepted by Redis ("owner completed",
	// "result restored" log lines).
	Completions []Completion `json:"completions"`
	// Events holds every terminal event read from the result streams after the run.
	Events []topics.Event `json:"events"`
	// Flights is the stored flight of every key at the end (read after the drain).
	Flights map[string]Flight `json:"flights"`
	// Backlog is each stage's task stream state at the end.
	Backlog []Backlog `json:"backlog"`
	// ResultTTL is the stages' result TTL: events of a key within it must agree.
	ResultTTL time.Duration `json:"resultTTL"`
	// SnapshotAt is when Flights and Backlog were read.
	SnapshotAt time.Time `json:"snapshotAt"`
	// Faults lists the faults injected.
	Faults []Fault `json:"faults"`
	// Logs counts notable consumer log lines (refused results, fenced-off owners, ...).
	Logs LogStats `json:"logs"`
	// DeadLetters lists the entries of the dead-letter streams at the end.
	DeadLetters []DeadLetter `json:"deadLetters,omitempty"`
	// Exits lists consumer processes that exited without being told to.
	Exits []Exit `json:"exits,omitempty"`
}

// Enqueue is one task sent by the producer.
type Enqueue struct {
	TaskID string    `json:"taskId"`
	Key    string    `json:"key"`
	Stage  string    `json:"stage"`
	At     time.Time `json:"at"`
	// Unsure: the XADD answered an error (Redis was restarting); the task may or may not be
	// on the stream, so it need not get an event.
	Unsure bool `json:"unsure,omitempty"`
}

// ModelRun is one model call: a consumer owned key's flight with Token and ran the model.
type ModelRun struct {
	Key      string    `json:"key"`
	TaskID   string    `json:"taskId"`
	Token    int64     `json:"token"`
	Reason   string    `json:"reason"`
	Attempt  int       `json:"attempt"`
	Consumer string    `json:"consumer"` // stream consumer "<process>/<n>"
	At       time.Time `json:"at"`       // log time (millisecond precision)
}

// Completion is a result Redis accepted from a consumer: complete (or restore) answered OK.
type Completion struct {
	Key      string    `json:"key"`
	TaskID   string    `json:"taskId"`
	Token    int64     `json:"token"`
	Consumer string    `json:"consumer"`
	Restored bool      `json:"restored,omitempty"`
	At       time.Time `json:"at"`
}

// Flight is a flight's stored state at the end of the run.
type Flight struct {
	Found      bool   `json:"found"`
	Status     string `json:"status,omitempty"`
	OwnerToken int64  `json:"ownerToken,omitempty"`
	Parked     int    `json:"parked,omitempty"`
	// ResultStored: the result key exists.
	ResultStored bool `json:"resultStored,omitempty"`
}

// Backlog is one task stream's consumer-group state at the end.
type Backlog struct {
	Stage   string `json:"stage"`
	Pending int64  `json:"pending"` // XPENDING count of the group
	Lag     int64  `json:"lag"`     // entries never delivered to the group (-1: unknown)
}

// Fault is one injected fault.
type Fault struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	For    string    `json:"for,omitempty"` // how long it lasted
	Note   string    `json:"note,omitempty"`
}

// DeadLetter is an entry a consumer moved to a dead-letter stream (ai:tasks:<stage>:dlq).
type DeadLetter struct {
	Stage    string `json:"stage"`
	TaskID   string `json:"taskId,omitempty"` // from the payload, when it is a task
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
	Consumer string `json:"consumer"`
	At       string `json:"at"` // the DLQ entry id (its ms time)
}

// Exit is a consumer process that exited on its own.
type Exit struct {
	Process string    `json:"process"`
	At      time.Time `json:"at"`
	Status  string    `json:"status"`
	Tail    string    `json:"tail,omitempty"`
}

// LogStats counts notable log lines of all consumers.
type LogStats struct {
	Lines          int `json:"lines"`
	NotJSON        int `json:"notJson"`
	Refused        int `json:"refused"`        // "result refused: another owner holds the flight"
	FencedOff      int `json:"fencedOff"`      // "fenced off: another owner answers this task"
	Restored       int `json:"restored"`       // "the flight was gone when the result arrived; result restored"
	Spooled        int `json:"spooled"`        // "result write failed: uncertain outcome spooled..."
	SpoolWritten   int `json:"spoolWritten"`   // outcomes written back by the spool flush ("uncertain outcomes written back")
	SpoolRefused   int `json:"spoolRefused"`   // spooled outcomes the flush found stale or done
	ExpiredRuns    int `json:"expiredRuns"`    // "flight expired during the run; acquiring again"
	FailedCalls    int `json:"failedCalls"`    // "model call failed"
	Abandoned      int `json:"abandoned"`      // "owner gave the flight up..."
	Errors         int `json:"errors"`         // level error
	Panics         int `json:"panics"`         // non-JSON lines starting a Go panic
	ClaimedDropped int `json:"claimedDropped"` // "entry claimed by another consumer meanwhile..."
}

func (s *LogStats) add(o LogStats) {
	s.Lines += o.Lines
	s.NotJSON += o.NotJSON
	s.Refused += o.Refused
	s.FencedOff += o.FencedOff
	s.Restored += o.Restored
	s.Spooled += o.Spooled
	s.SpoolWritten += o.SpoolWritten
	s.SpoolRefused += o.SpoolRefused
	s.ExpiredRuns += o.ExpiredRuns
	s.FailedCalls += o.FailedCalls
	s.Abandoned += o.Abandoned
	s.Errors += o.Errors
	s.Panics += o.Panics
	s.ClaimedDropped += o.ClaimedDropped
}

// logLine holds the fields of a consumer's JSON log line that the history needs.
type logLine struct {
	Level      string `json:"level"`
	Message    string `json:"message"`
	Time       string `json:"time"`
	RequestKey string `json:"requestKey"`
	TaskID     string `json:"taskId"`
	Token      int64  `json:"token"`
	Reason     string `json:"reason"`
	Attempt    int    `json:"attempt"`
	Consumer   string `json:"consumer"`
	Subscriber string `json:"subscriber"`
	Written    int    `json:"written"`
	Refused    int    `json:"refused"`
}

// Log messages of handlers/processor.go the history reads.
const (
	msgModelCall = "model call"
	msgCompleted = "owner completed"
	msgRestored  = "the flight was gone when the result arrived; result restored"
)

// ParseLog reads one consumer process's JSON log and returns its model runs, its accepted
// completions and counts of notable lines. Lines that are not JSON (a panic, a fatal
// error) are counted, never fatal.
func ParseLog(r io.Reader) ([]ModelRun, []Completion, LogStats, error) {
	var (
		runs     []ModelRun
		comps    []Completion
		restored []string
		st       LogStats
	)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			st.Lines++
			parseLine(bytes.TrimSpace(line), &runs, &comps, &restored, &st)
		}
		if err == io.EOF {
			for _, r := range restored {
				for i := range comps {
					if comps[i].Key+"\x00"+strconv.FormatInt(comps[i].Token, 10) == r {
						comps[i].Restored = true
					}
				}
			}
			return runs, comps, st, nil
		}
		if err != nil {
			return runs, comps, st, err
		}
	}
}

func parseLine(line []byte, runs *[]ModelRun, comps *[]Completion, restored *[]string, st *LogStats) {
	var l logLine
	if line[0] != '{' || json.Unmarshal(line, &l) != nil {
		st.NotJSON++
		if bytes.HasPrefix(line, []byte("panic:")) || bytes.HasPrefix(line, []byte("fatal error:")) {
			st.Panics++
		}
		return
	}
	at, _ := time.Parse(time.RFC3339Nano, l.Time)
	if l.Subscriber != "" {
		l.Consumer = l.Subscriber // the stream consumer "<process>/<n>"
	}
	if l.Level == "error" || l.Level == "fatal" || l.Level == "panic" {
		st.Errors++
	}
	switch {
	case l.Message == msgModelCall:
		*runs = append(*runs, ModelRun{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token, Reason: l.Reason,
			Attempt: l.Attempt, Consumer: l.Consumer, At: at})
	case l.Message == msgCompleted:
		*comps = append(*comps, Completion{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
			Consumer: l.Consumer, At: at})
	case l.Message == msgRestored:
		// A restore is followed by the run's "owner completed" line, which records it; mark it.
		st.Restored++
		*restored = append(*restored, l.RequestKey+"\x00"+strconv.FormatInt(l.Token, 10))
	case strings.HasPrefix(l.Message, "result refused"):
		st.Refused++
	case strings.HasPrefix(l.Message, "fenced off"):
		st.FencedOff++
	case strings.HasPrefix(l.Message, "result write failed"):
		st.Spooled++
	case l.Message == "uncertain outcomes written back":
		// The flush logs counts only, no keys or tokens: such write-backs are checked through
		// the events and the stored flight (rule 3), not as Completions.
		st.SpoolWritten += l.Written
		st.SpoolRefused += l.Refused
	case strings.HasPrefix(l.Message, "flight expired during the run"):
		st.ExpiredRuns++
	case l.Message == "model call failed":
		st.FailedCalls++
	case strings.HasPrefix(l.Message, "owner gave the flight up"):
		st.Abandoned++
	case strings.HasPrefix(l.Message, "entry claimed by another consumer"):
		st.ClaimedDropped++
	}
}
