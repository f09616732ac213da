// Package chaos is Flightdeck's fault-injection run, started by `make chaos`.
//
// It starts its own redis-server with AOF on, several real consumer processes and an
// in-process producer, and injects faults at seeded random times. The faults include SIGKILL
// and SIGSTOP of consumers, restarts under the same name, outages of every consumer that
// outlive the flights' TTLs, lost flight records, short pauses under the lease, crashes
// between a script and its answers, crashed cancellers, and Redis restarts and pauses. With
// the PostgreSQL archive on, Redis also loses all its data. The run records a History of
// every enqueue, every model run with its fencing token, every terminal event, and the
// flights and stream backlog at the end. Check, a pure function, checks it.
package chaos

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/faults"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// History is everything a chaos run observed. Check reads nothing else.
type History struct {
	// Enqueues lists every task the producer sent, in order.
	Enqueues []Enqueue `json:"enqueues"`
	// Runs lists every model run, parsed from the consumers' "model call" log lines.
	Runs []ModelRun `json:"runs"`
	// Completions lists every result a consumer had accepted by Redis, from msgCompleted
	// log lines. Restored is set when the flight was written back with it.
	Completions []Completion `json:"completions"`
	// Failures lists the retryable model failures the flights recorded, from msgRetries log
	// lines, and the free failures of owners a limiter made wait, from msgLimiterWait lines.
	// The meta then lives FailureTTL (plus the wait) unless a retry acquires it.
	Failures []RunFailure `json:"failures,omitempty"`
	// Handovers lists owners that gave their running flight up without spending the attempt,
	// as a consumer shutting down does. The next run of the flight has reason handover.
	Handovers []Handover `json:"handovers,omitempty"`
	// Events holds every terminal event read from the result streams after the run.
	Events []topics.Event `json:"events"`
	// Flights is the stored flight of every key at the end, read after the drain.
	Flights map[string]Flight `json:"flights"`
	// Backlog is each stage's task stream state at the end.
	Backlog []Backlog `json:"backlog"`
	// ResultTTL is the stages' result TTL. Events of a key within it must agree.
	ResultTTL time.Duration `json:"resultTTL"`
	// RunningTTL and FailureTTL are the stages' flight policy: a flight nobody acquires
	// loses its record and waiters RunningTTL + FailureTTL after its last acquisition, or
	// FailureTTL after a retryable failure. Zero means unknown, so no records are assumed to
	// have expired.
	RunningTTL time.Duration `json:"runningTTL,omitempty"`
	FailureTTL time.Duration `json:"failureTTL,omitempty"`
	// SnapshotAt is when Flights and Backlog were read.
	SnapshotAt time.Time `json:"snapshotAt"`
	// Faults lists the faults injected.
	Faults []Fault `json:"faults"`
	// Cancels lists the cancels the run issued as producer cancel child processes. Their keys
	// may legitimately end CANCELLED.
	Cancels []Cancel `json:"cancels,omitempty"`
	// Logs counts notable consumer log lines, such as refused results and aborted runs.
	Logs LogStats `json:"logs"`
	// DeadLetters lists the entries of the dead-letter streams at the end.
	DeadLetters []DeadLetter `json:"deadLetters,omitempty"`
	// Exits lists consumer processes that exited without being told to.
	Exits []Exit `json:"exits,omitempty"`
	// InjectedCrashes lists consumer processes that a fault knob made exit on purpose with
	// status 86 after a script, in crash-after-complete faults. They are expected, not crashes.
	InjectedCrashes []Exit `json:"injectedCrashes,omitempty"`
	// DataLosses lists the redis-data-loss faults in order, with what Redis and the archive
	// held at each. Events and DeadLetters then hold, in order, what was read just before
	// each loss and, last, what was read at the end.
	DataLosses []DataLoss `json:"dataLosses,omitempty"`
	// ArchiveAnswers lists the owners that answered their flight from the archive, from
	// msgArchiveAnswer log lines.
	ArchiveAnswers []ArchiveAnswer `json:"archiveAnswers,omitempty"`
	// LookupFailures lists the owners whose archive lookup failed or timed out, from
	// msgLookupFailed log lines. They run the model, as designed.
	LookupFailures []LookupFailure `json:"lookupFailures,omitempty"`
	// HeldAnswers lists the owners that completed their flight with an outcome their process
	// held unwritten, from msgHeldAnswer log lines.
	HeldAnswers []HeldAnswer `json:"heldAnswers,omitempty"`
}

// HeldAnswer is an owner that completed its flight, under its own Token, with the result
// that token HeldToken's run produced in the same process and that Redis had not stored.
type HeldAnswer struct {
	Key       string    `json:"key"`
	TaskID    string    `json:"taskId"`
	Token     int64     `json:"token"`
	HeldToken int64     `json:"heldToken"`
	Consumer  string    `json:"consumer"`
	At        time.Time `json:"at"`
}

// DataLoss is one redis-data-loss fault: Redis was SIGKILLed and started again empty.
type DataLoss struct {
	// At is when CLIENT PAUSE WRITE stopped Redis accepting writes, and what it held then was
	// read and lost with it. Back is when it answered again, empty.
	At   time.Time `json:"at"`
	Back time.Time `json:"back"`
	// Events is how many of History.Events were read up to this loss, this loss's own read
	// included. Events[i] with i >= Events was written after it.
	Events int `json:"events"`
	// Unanswered lists the tasks surely enqueued before At that had no terminal event then,
	// leaving out those of an earlier loss's list. Their stream entries went with Redis, so
	// nobody may ever answer them.
	Unanswered []string `json:"unanswered,omitempty"`
	// Archived is the archive's row of every key the run had sent, read while Redis was
	// paused. Keys without a row are absent.
	Archived map[string]ArchivedRow `json:"archived,omitempty"`
}

// ArchivedRow is a key's row in the archive: the status and owner token of its outcome.
type ArchivedRow struct {
	Status string `json:"status"`
	Token  int64  `json:"token"`
}

// ArchiveAnswer is an owner that ended its flight with the key's archived outcome of token
// ArchivedToken instead of a model call, under its own new Token.
type ArchiveAnswer struct {
	Key           string    `json:"key"`
	TaskID        string    `json:"taskId"`
	Token         int64     `json:"token"`
	ArchivedToken int64     `json:"archivedToken"`
	Status        string    `json:"status"`
	Consumer      string    `json:"consumer"`
	At            time.Time `json:"at"`
}

// LookupFailure is an owner whose archive lookup failed or timed out: it runs the model.
type LookupFailure struct {
	Key      string    `json:"key"`
	TaskID   string    `json:"taskId"`
	Token    int64     `json:"token"`
	Consumer string    `json:"consumer"`
	At       time.Time `json:"at"`
}

// Enqueue is one task sent by the producer.
type Enqueue struct {
	TaskID string    `json:"taskId"`
	Key    string    `json:"key"`
	Stage  string    `json:"stage"`
	At     time.Time `json:"at"`
	// Unsure is set when the XADD answered an error while Redis was restarting. The task may
	// or may not be on the stream, so it need not get an event.
	Unsure bool `json:"unsure,omitempty"`
	// Resends names the task this one sends again. Its stream entry went with Redis in a
	// redis-data-loss fault, and its client sent it again under a new id.
	Resends string `json:"resends,omitempty"`
}

// ModelRun is one model call: a consumer owned key's flight with Token and ran the model.
type ModelRun struct {
	Key      string    `json:"key"`
	TaskID   string    `json:"taskId"`
	Token    int64     `json:"token"`
	Reason   string    `json:"reason"`
	Attempt  int       `json:"attempt"`
	Consumer string    `json:"consumer"` // stream consumer "<process>/<n>"
	At       time.Time `json:"at"`       // log time, to the millisecond
}

// Completion is a result Redis accepted from a consumer: complete or restore answered OK.
type Completion struct {
	Key      string    `json:"key"`
	TaskID   string    `json:"taskId"`
	Token    int64     `json:"token"`
	Consumer string    `json:"consumer"`
	Restored bool      `json:"restored,omitempty"`
	At       time.Time `json:"at"`
}

// RunFailure is a retryable model failure a flight recorded. Its meta is FAILED, retryable,
// for FailureTTL.
type RunFailure struct {
	Key      string    `json:"key"`
	TaskID   string    `json:"taskId"`
	Token    int64     `json:"token"`
	Consumer string    `json:"consumer"`
	At       time.Time `json:"at"`
	// Wait is set for a free failure: an owner that a limiter made wait before its model
	// call (msgLimiterWait) recorded it, retryable at the end of the wait. Its record then
	// lives FailureTTL plus Wait, and its token never ran.
	Wait time.Duration `json:"wait,omitempty"`
}

// Handover is an owner that gave its running flight up without spending the attempt, or
// tried to and logged msgHandoverFail. Either way its run stopped.
type Handover struct {
	Key      string    `json:"key"`
	Token    int64     `json:"token"`
	Consumer string    `json:"consumer"`
	Why      string    `json:"why,omitempty"`
	Failed   bool      `json:"failed,omitempty"`
	At       time.Time `json:"at"`
}

// Cancel is one `producer cancel` the run issued against a flight.
type Cancel struct {
	Key string    `json:"key"`
	At  time.Time `json:"at"`
	// Crash is set when the canceller ran with FLIGHTDECK_FAULT_CRASH_AFTER=cancel:1. It dies
	// after the cancel script, before answering the parked tasks.
	Crash bool `json:"crash,omitempty"`
	// Exit is the canceller's exit status. 86 means it crashed after the script as told, and
	// 0 means done.
	Exit   int    `json:"exit"`
	Output string `json:"output,omitempty"`
}

// ScriptRan reports whether the cancel script ran, so that the flight may be CANCELLED. It
// did when the canceller finished, or crashed after the script as its knob told it to.
func (c Cancel) ScriptRan() bool { return c.Exit == 0 || c.Exit == faults.CrashExitCode }

// Flight is a flight's stored state at the end of the run.
type Flight struct {
	Found      bool   `json:"found"`
	Status     string `json:"status,omitempty"`
	OwnerToken int64  `json:"ownerToken,omitempty"`
	Parked     int    `json:"parked,omitempty"`
	// ResultStored reports whether the result key exists.
	ResultStored bool `json:"resultStored,omitempty"`
}

// Backlog is one task stream's consumer-group state at the end.
type Backlog struct {
	Stage   string `json:"stage"`
	Pending int64  `json:"pending"` // XPENDING count of the group, parked entries included
	// Parked counts the pending entries held by the parking consumer topics.ParkingConsumer.
	// They are followers nobody answered.
	Parked int64 `json:"parked,omitempty"`
	// Holders counts the pending entries per consumer name.
	Holders map[string]int64 `json:"holders,omitempty"`
	Lag     int64            `json:"lag"` // entries never delivered to the group, -1 for unknown
}

// Fault is one injected fault.
type Fault struct {
	Kind   string    `json:"kind"`
	Target string    `json:"target"`
	At     time.Time `json:"at"`
	For    string    `json:"for,omitempty"` // how long it lasted
	Note   string    `json:"note,omitempty"`
	// Key and Token name the flight a flight fault acted on: its key and the owner token it
	// had then. The flight faults are delete-flight-keys, pause-under-lease and canceller-crash.
	Key   string `json:"key,omitempty"`
	Token int64  `json:"token,omitempty"`
	// LeaseUntil is when the paused owner of a pause-under-lease fault loses its lease at
	// the earliest: its last heartbeat before the pause plus its lease. No other run of Key
	// may start before it.
	LeaseUntil time.Time `json:"leaseUntil,omitempty"`
}

// DeadLetter is an entry a consumer moved to a dead-letter stream ai:tasks:<stage>:dlq.
type DeadLetter struct {
	Stage    string `json:"stage"`
	TaskID   string `json:"taskId,omitempty"` // from the payload, when it is a task
	Reason   string `json:"reason"`
	Detail   string `json:"detail"`
	Consumer string `json:"consumer"`
	At       string `json:"at"` // the DLQ entry id, which is its time in ms
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
	Lines        int `json:"lines"`
	NotJSON      int `json:"notJson"`
	Refused      int `json:"refused"`      // msgRefused lines: another owner, or the run was closed
	Aborted      int `json:"aborted"`      // msgAborted lines: stale token, cancel or expiry
	Restored     int `json:"restored"`     // msgRestored lines
	MetaBack     int `json:"metaBack"`     // msgMetaBack lines, written by the heartbeat
	Spooled      int `json:"spooled"`      // msgSpooled lines: an uncertain outcome spooled
	SpoolWritten int `json:"spoolWritten"` // outcomes written back from spools by the flush loop and at start
	SpoolRefused int `json:"spoolRefused"` // spooled outcomes the write-back found stale or done
	SpoolAdopted int `json:"spoolAdopted"` // outcomes adopted from the spools of stopped processes
	FailedCalls  int `json:"failedCalls"`  // msgFailedCall lines, retryable or for good
	HandedOver   int `json:"handedOver"`   // msgHandedOver lines and failed handovers
	PickedUp     int `json:"pickedUp"`     // entries a consumer restarted under its name picked up again
	Released     int `json:"released"`     // held entries handed over to the other consumers at shutdown
	FaultCrashes int `json:"faultCrashes"` // fault-injection exits, with "fault":"crash_after_script"
	Errors       int `json:"errors"`       // level error
	Panics       int `json:"panics"`       // non-JSON lines starting a Go panic
}

func (s *LogStats) add(o LogStats) {
	s.Lines += o.Lines
	s.NotJSON += o.NotJSON
	s.Refused += o.Refused
	s.Aborted += o.Aborted
	s.Restored += o.Restored
	s.MetaBack += o.MetaBack
	s.Spooled += o.Spooled
	s.SpoolWritten += o.SpoolWritten
	s.SpoolRefused += o.SpoolRefused
	s.SpoolAdopted += o.SpoolAdopted
	s.FailedCalls += o.FailedCalls
	s.HandedOver += o.HandedOver
	s.PickedUp += o.PickedUp
	s.Released += o.Released
	s.FaultCrashes += o.FaultCrashes
	s.Errors += o.Errors
	s.Panics += o.Panics
}

// logLine holds the fields of a consumer's JSON log line that the history needs.
type logLine struct {
	Level      string  `json:"level"`
	Message    string  `json:"message"`
	Time       string  `json:"time"`
	RequestKey string  `json:"requestKey"`
	TaskID     string  `json:"taskId"`
	Token      int64   `json:"token"`
	Reason     string  `json:"reason"`
	Attempt    int     `json:"attempt"`
	Consumer   string  `json:"consumer"`
	Why        string  `json:"why"`
	Fault      string  `json:"fault"`
	Written    int     `json:"written"`
	Refused    int     `json:"refused"`
	Entries    int     `json:"entries"`
	Outcomes   int     `json:"outcomes"`
	Status     string  `json:"status"`
	Archived   int64   `json:"archivedToken"`
	Held       int64   `json:"heldToken"`
	WaitMs     float64 `json:"wait"` // zerolog's Dur: ms, with a fraction
}

// Log messages of handlers/owner.go, handlers/consumer.go and stream/ the history reads.
const (
	msgModelCall     = "model call"
	msgCompleted     = "owner completed"
	msgRestored      = "the flight was gone when the result arrived; written back"
	msgMetaBack      = "the flight's meta was gone; written back by its owner"
	msgRetries       = "model call failed; the flight retries"
	msgLimiterWait   = "limiter: the call waits"
	msgFailedCall    = "model call failed" // prefix of msgRetries and "... for good"
	msgAborted       = "run aborted by the flight"
	msgHandedOver    = "flight handed over; the attempt is not spent"
	msgHandoverFail  = "handing the flight over failed"
	msgRefused       = "result refused"
	msgSpooled       = "result write failed"
	msgSpoolBack     = "uncertain outcomes written back"
	msgSpoolAtStart  = "spooled outcomes written back at start"
	msgSpoolAdopted  = "adopted the spooled outcomes of stopped processes"
	msgPickedUp      = "picked up this consumer's own pending entries"
	msgReleased      = "held entries handed over to the other consumers"
	msgArchiveAnswer = "answered from the archive; no model call"
	msgLookupFailed  = "archive lookup failed; running the model"
	msgHeldAnswer    = "answered from the outcome this process holds; no model call"
	faultCrashMarker = "crash_after_script"
)

// ParsedLog is what one consumer process's log tells the history.
type ParsedLog struct {
	Runs           []ModelRun
	Completions    []Completion
	Failures       []RunFailure
	Handovers      []Handover
	ArchiveAnswers []ArchiveAnswer
	LookupFailures []LookupFailure
	HeldAnswers    []HeldAnswer
	Stats          LogStats
}

// ParseLog reads one consumer process's JSON log and returns what it tells the history:
// model runs, accepted completions, retryable failures, handovers, archive answers, held
// answers, failed archive lookups and counts of notable lines. Lines that are not JSON, such
// as a panic, a fatal error or go-redis's own lines, are counted, never fatal.
func ParseLog(r io.Reader) (ParsedLog, error) {
	var (
		p        ParsedLog
		restored []string
	)
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, err := br.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			p.Stats.Lines++
			p.parseLine(bytes.TrimSpace(line), &restored)
		}
		if err == io.EOF {
			for _, r := range restored {
				for i := range p.Completions {
					if p.Completions[i].Key+"\x00"+strconv.FormatInt(p.Completions[i].Token, 10) == r {
						p.Completions[i].Restored = true
					}
				}
			}
			return p, nil
		}
		if err != nil {
			return p, fmt.Errorf("chaos: read log: %w", err)
		}
	}
}

func (p *ParsedLog) parseLine(line []byte, restored *[]string) {
	st := &p.Stats
	var l logLine
	if line[0] != '{' || json.Unmarshal(line, &l) != nil {
		st.NotJSON++
		if bytes.HasPrefix(line, []byte("panic:")) || bytes.HasPrefix(line, []byte("fatal error:")) {
			st.Panics++
		}
		return
	}
	at, _ := time.Parse(time.RFC3339Nano, l.Time)
	if l.Fault == faultCrashMarker {
		st.FaultCrashes++ // an error line on purpose, not counted in Errors
		return
	}
	if l.Level == "error" || l.Level == "fatal" || l.Level == "panic" {
		st.Errors++
	}
	switch {
	case l.Message == msgModelCall:
		p.Runs = append(p.Runs, ModelRun{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token, Reason: l.Reason,
			Attempt: l.Attempt, Consumer: l.Consumer, At: at})
	case l.Message == msgCompleted:
		p.Completions = append(p.Completions, Completion{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
			Consumer: l.Consumer, At: at})
	case l.Message == msgRestored:
		// A write-back is followed by the run's "owner completed" line, which records it. Mark it.
		st.Restored++
		*restored = append(*restored, l.RequestKey+"\x00"+strconv.FormatInt(l.Token, 10))
	case l.Message == msgMetaBack:
		st.MetaBack++
	case strings.HasPrefix(l.Message, msgFailedCall):
		st.FailedCalls++
		if l.Message == msgRetries {
			p.Failures = append(p.Failures, RunFailure{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
				Consumer: l.Consumer, At: at})
		}
	case l.Message == msgLimiterWait && l.Token != 0 && l.WaitMs > 0:
		p.Failures = append(p.Failures, RunFailure{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
			Consumer: l.Consumer, At: at, Wait: time.Duration(l.WaitMs * float64(time.Millisecond))})
	case strings.HasPrefix(l.Message, msgAborted):
		st.Aborted++
	case l.Message == msgHandedOver || strings.HasPrefix(l.Message, msgHandoverFail):
		st.HandedOver++
		p.Handovers = append(p.Handovers, Handover{Key: l.RequestKey, Token: l.Token, Consumer: l.Consumer,
			Why: l.Why, Failed: l.Message != msgHandedOver, At: at})
	case strings.HasPrefix(l.Message, msgRefused):
		st.Refused++
	case strings.HasPrefix(l.Message, msgSpooled):
		st.Spooled++
	case l.Message == msgSpoolBack || l.Message == msgSpoolAtStart:
		// The write-back logs counts only, no keys or tokens. Rule 3 checks such write-backs
		// through the events and the stored flight, not as Completions.
		st.SpoolWritten += l.Written
		st.SpoolRefused += l.Refused
	case strings.HasPrefix(l.Message, msgSpoolAdopted):
		st.SpoolAdopted += l.Outcomes
	case l.Message == msgPickedUp:
		st.PickedUp += l.Entries
	case l.Message == msgReleased:
		st.Released += l.Entries
	case l.Message == msgArchiveAnswer:
		p.ArchiveAnswers = append(p.ArchiveAnswers, ArchiveAnswer{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
			ArchivedToken: l.Archived, Status: l.Status, Consumer: l.Consumer, At: at})
	case l.Message == msgHeldAnswer:
		p.HeldAnswers = append(p.HeldAnswers, HeldAnswer{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
			HeldToken: l.Held, Consumer: l.Consumer, At: at})
	case l.Message == msgLookupFailed:
		p.LookupFailures = append(p.LookupFailures, LookupFailure{Key: l.RequestKey, TaskID: l.TaskID, Token: l.Token,
			Consumer: l.Consumer, At: at})
	}
}
