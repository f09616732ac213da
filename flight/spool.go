package flight

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/journal"
)

// Outcome is one uncertain outcome: the owner's model answered, but the result could not be
// written to Redis. It is kept in a Spool until Restore writes it back (DESIGN.md section 6).
type Outcome struct {
	// Stage and Tenant are stored in the meta if Restore has to create it.
	Stage, Tenant string
	// Key is the request key of the flight.
	Key string
	// Token is the fencing token the owner held when its model answered: 1..MaxToken.
	Token int64
	// OwnerID and Attempts describe the owner's run, for a meta Restore creates.
	OwnerID  string
	Attempts int
	// Task is the owner's task. Restore answers it with the parked ones and acknowledges its
	// entry. Zero for in-process owners.
	Task Task
	// Joined are the tasks the owner's complete carried as Ownership.Joined. Restore answers
	// them with the owner's task, as that complete would have.
	Joined []Task
	// Result is the model's answer, written back as is.
	Result []byte
	// ResultTTL is the stage's resultTTL. Zero takes Policy's default of 10 min. It counts from
	// the write-back. Must be zero or at least 1 ms.
	ResultTTL time.Duration
	// RunningTTL and FailureTTL are the owner's policy's. With ResultTTL they set how long the
	// written-back fence lives, by Policy.FenceTTL, as long as the owner's own would have. Zero
	// takes Policy's defaults. Each must be zero or at least 1 ms.
	RunningTTL, FailureTTL time.Duration
	// Durability and ReplicationTimeout are the owner's policy's. A replicated outcome is
	// written back only once a replica acknowledged it, else it stays in the spool.
	Durability         Durability
	ReplicationTimeout time.Duration
	// At is when the model answered. It is kept for inspection only.
	At time.Time
}

// Outcome returns the uncertain outcome of o's run that produced result, stamped now. It holds
// o's flight, task, joined tasks and its policy's durations, so the write-back keeps the owner's fence TTL.
func (o Ownership) Outcome(result []byte) Outcome {
	p := o.Policy.WithDefaults()
	return Outcome{Stage: o.Stage, Tenant: o.Tenant, Key: o.Key, Token: o.Token, OwnerID: o.OwnerID,
		Attempts: o.Attempts, Task: o.Task, Joined: o.Joined, Result: result, ResultTTL: p.ResultTTL, RunningTTL: p.RunningTTL,
		FailureTTL: p.FailureTTL, Durability: p.Durability, ReplicationTimeout: p.ReplicationTimeout, At: time.Now()}
}

func (o Outcome) validate() error {
	if err := CheckKey(o.Key); err != nil {
		return err
	}
	if err := CheckToken(o.Token); err != nil {
		return fmt.Errorf("flight: outcome %q: %w", o.Key, err)
	}
	for name, d := range map[string]time.Duration{"resultTTL": o.ResultTTL, "runningTTL": o.RunningTTL,
		"failureTTL": o.FailureTTL, "replicationTimeout": o.ReplicationTimeout} {
		if d != 0 && d < time.Millisecond {
			return fmt.Errorf("flight: outcome %q: %s must be zero or at least 1ms, got %v", o.Key, name, d)
		}
	}
	if o.Durability != "" && o.Durability != DurabilityAsync && o.Durability != DurabilityReplicated {
		return fmt.Errorf("flight: outcome %q: durability %q", o.Key, o.Durability)
	}
	return nil
}

func (o Outcome) clone() Outcome {
	o.Result = bytes.Clone(o.Result)
	o.Joined = slices.Clone(o.Joined)
	return o
}

// spoolVersion is the "v" field of every spool line. Lines of other versions are skipped.
const spoolVersion = 1

// spoolLine is one line of the spool file. Result is base64, encoding/json's []byte form.
type spoolLine struct {
	V            int         `json:"v"`
	Stage        string      `json:"stage"`
	Tenant       string      `json:"tenant"`
	Key          string      `json:"key"`
	Token        int64       `json:"token"`
	OwnerID      string      `json:"ownerId,omitempty"`
	Attempts     int         `json:"attempts,omitempty"`
	TaskID       string      `json:"taskId,omitempty"`
	Stream       string      `json:"stream,omitempty"`
	Entry        string      `json:"entry,omitempty"`
	QueuedMs     int64       `json:"queuedMs,omitempty"`
	Joined       []spoolTask `json:"joined,omitempty"`
	Result       []byte      `json:"result"`
	ResultTTLMs  int64       `json:"resultTTLMs"`
	RunningTTLMs int64       `json:"runningTTLMs,omitempty"`
	FailureTTLMs int64       `json:"failureTTLMs,omitempty"`
	Durability   Durability  `json:"durability,omitempty"`
	ReplicaMs    int64       `json:"replicationTimeoutMs,omitempty"`
	At           time.Time   `json:"at"`
}

// spoolTask is a joined task in a spool line.
type spoolTask struct {
	TaskID   string `json:"taskId"`
	Stream   string `json:"stream"`
	Entry    string `json:"entry"`
	QueuedMs int64  `json:"queuedMs,omitempty"`
}

// outcomeCodec is the spool's journal.Codec: an Outcome as a spoolLine.
type outcomeCodec struct{}

func (outcomeCodec) Encode(o Outcome) ([]byte, error) {
	var joined []spoolTask
	for _, t := range o.Joined {
		joined = append(joined, spoolTask{TaskID: t.ID, Stream: t.Stream, Entry: t.Entry, QueuedMs: t.Queued.Milliseconds()})
	}
	return json.Marshal(spoolLine{V: spoolVersion, Stage: o.Stage, Tenant: o.Tenant, Key: o.Key,
		Token: o.Token, OwnerID: o.OwnerID, Attempts: o.Attempts, TaskID: o.Task.ID, Stream: o.Task.Stream,
		Entry: o.Task.Entry, QueuedMs: o.Task.Queued.Milliseconds(), Joined: joined, Result: o.Result,
		ResultTTLMs: o.ResultTTL.Milliseconds(), RunningTTLMs: o.RunningTTL.Milliseconds(),
		FailureTTLMs: o.FailureTTL.Milliseconds(), Durability: o.Durability,
		ReplicaMs: o.ReplicationTimeout.Milliseconds(), At: o.At})
}

func (outcomeCodec) Decode(line []byte) (Outcome, error) {
	var l spoolLine
	if err := json.Unmarshal(line, &l); err != nil {
		return Outcome{}, err
	}
	if l.V != spoolVersion {
		return Outcome{}, fmt.Errorf("flight: spool line version %d", l.V)
	}
	o := Outcome{Stage: l.Stage, Tenant: l.Tenant, Key: l.Key, Token: l.Token, OwnerID: l.OwnerID,
		Attempts: l.Attempts, Task: Task{ID: l.TaskID, Stream: l.Stream, Entry: l.Entry,
			Queued: time.Duration(l.QueuedMs) * time.Millisecond},
		Result: l.Result, ResultTTL: time.Duration(l.ResultTTLMs) * time.Millisecond,
		RunningTTL: time.Duration(l.RunningTTLMs) * time.Millisecond,
		FailureTTL: time.Duration(l.FailureTTLMs) * time.Millisecond, Durability: l.Durability,
		ReplicationTimeout: time.Duration(l.ReplicaMs) * time.Millisecond, At: l.At}
	for _, t := range l.Joined {
		o.Joined = append(o.Joined, Task{ID: t.TaskID, Stream: t.Stream, Entry: t.Entry,
			Queued: time.Duration(t.QueuedMs) * time.Millisecond})
	}
	return o, o.validate()
}

// Spool is an append-only file of uncertain outcomes, one JSON line each, fsynced at every
// Add. A result the model produced while Redis was down thus survives a crash of the process
// until Flush writes it back. It is safe for concurrent use. One Spool owns its file: do not
// open the same path twice at once, in one process or several.
type Spool struct {
	// j is the spool's file.
	j *journal.Journal[Outcome]

	// flushMu serialises Flush calls. It is taken before mu, never after.
	flushMu sync.Mutex

	// mu guards every field below.
	mu sync.Mutex
	// closed is set by Close.
	closed bool
	// pending holds the outcomes in file order. Only Flush removes entries, from a prefix it
	// snapshot, so entries added during a Flush stay behind that prefix.
	pending []Outcome
	// skipped counts the corrupt or truncated lines OpenSpool found.
	skipped int
	// dirty is set while the file holds skipped lines that pending does not. The next Flush
	// rewrites it.
	dirty bool
	// adopted counts outcomes OpenSpoolDir took over from dead processes' spools.
	adopted int
	// spooled counts the pending outcomes of each key that has any, see held.go, so that a
	// task of a key with none asks in constant time.
	spooled map[string]int
	// keys is the held state of each key this process works on or holds an outcome of, see
	// held.go. With pending, it is what Held answers.
	keys map[string]*keyHold
	// answered holds the entries, as "<id> <stream>", of the owner tasks and joined tasks that
	// write-backs answered, with when. An entry stays until the task's own delivery asks
	// WrittenBack or answeredFor has passed.
	answered map[string]time.Time
}

// answeredFor is how long the spool remembers the tasks a write-back answered. A task held
// without a handler for the write-back comes back within its stage's heartbeat interval.
const answeredFor = time.Minute

// OpenSpool opens the spool file at path. When missing, it creates the file with mode 0600
// and its directories with 0700. A symbolic link, or a file of another user or that others
// may write, is refused with filelock.ErrUnsafe. It loads the outcomes a previous process
// left there. Corrupt or truncated lines, as from a crash in the middle of a write, are
// skipped and counted in Skipped, never an error. They leave the file at the next Flush. The
// caller closes the spool.
func OpenSpool(path string) (*Spool, error) {
	j, err := journal.Open[Outcome](path, outcomeCodec{})
	if err != nil {
		return nil, fmt.Errorf("flight: open spool: %w", err)
	}
	return loadSpool(j)
}

// loadSpool returns the spool of j, holding the outcomes j's file holds.
func loadSpool(j *journal.Journal[Outcome]) (*Spool, error) {
	b, err := j.Read(0)
	if err != nil {
		return nil, fmt.Errorf("flight: open spool: %w", err)
	}
	s := &Spool{j: j, skipped: b.Skipped, dirty: b.Skipped > 0}
	s.setPendingLocked(b.Records)
	return s, nil
}

// Path is the spool file's path.
func (s *Spool) Path() string { return s.j.Path() }

// Add appends o to the spool and fsyncs the file before it returns. On error nothing was
// added. o.Result is copied.
func (s *Spool) Add(o Outcome) error {
	if err := o.validate(); err != nil {
		return err
	}
	o = o.clone()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("flight: spool add %q: %w", o.Key, os.ErrClosed)
	}
	if err := s.j.Append(o); err != nil {
		return fmt.Errorf("flight: spool add %q: %w", o.Key, err)
	}
	s.pending = append(s.pending, o)
	s.countLocked(o.Key)
	return nil
}

// Len is the number of pending outcomes.
func (s *Spool) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// Pending returns a copy of the pending outcomes, oldest first.
func (s *Spool) Pending() []Outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Outcome, len(s.pending))
	for i, o := range s.pending {
		out[i] = o.clone()
	}
	return out
}

// Skipped is the number of corrupt or truncated lines OpenSpool skipped.
func (s *Spool) Skipped() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.skipped
}

// FlushReport is the result of one Flush.
type FlushReport struct {
	// Written counts outcomes Restore wrote back.
	Written int
	// Refused counts outcomes Restore refused with ErrStaleToken, ErrCancelled, ErrExpired or
	// *StateError. Another outcome stands, and these leave the spool as settled.
	Refused int
	// Kept counts outcomes that stay in the spool for a later Flush, because Redis is still
	// down or ctx is done. Outcomes added while the Flush ran are not counted. They stay too.
	Kept int
	// Answered counts the terminal events the write-backs wrote for owners' and parked tasks.
	Answered int
}

// Flush writes every pending outcome back with c.Restore, oldest first, one call each under
// ctx. Give the client or ctx a deadline: against a dead Redis every call waits for it.
// Written and refused outcomes leave the spool, and the tasks their write-backs answered are
// remembered for WrittenBack. One refused because another token owns the flight stays
// visible to Held while a caller of its key is active. One whose run was closed does not, see
// held.go. Outcomes hit by any other error stay, and so do the rest once ctx is done or Redis
// fails to answer. The file is then rewritten atomically with what stays, by temp file, fsync
// and rename. The error joins every outcome's error and a failed rewrite. The report is valid
// either way. Concurrent Flush calls run one by one. Add may run meanwhile.
func (s *Spool) Flush(ctx context.Context, c *Coordinator) (FlushReport, error) {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()

	rep := FlushReport{}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return rep, fmt.Errorf("flight: spool flush: %w", os.ErrClosed)
	}
	snap := slices.Clone(s.pending)
	s.mu.Unlock()

	var (
		kept, refused []Outcome
		answered      []Task
		errs          []error
	)
loop:
	for i, o := range snap {
		if err := ctx.Err(); err != nil {
			kept = append(kept, snap[i:]...)
			errs = append(errs, fmt.Errorf("flight: spool flush: %d outcomes not tried: %w", len(snap)-i, err))
			break
		}
		st, err := c.Restore(ctx, o)
		rep.Answered += st.Events
		switch v := Judge(err); {
		case v == VerdictTaken:
			rep.Written++
			answered = append(answered, answeredBy(o, st)...)
		case v.Closed():
			// Its run was closed: the result may never be stored, and nobody takes it. The
			// owner's task and its joined ones got that outcome.
			rep.Refused++
			answered = append(answered, answeredBy(o, st)...)
		case v.Refused():
			rep.Refused++
			refused = append(refused, o)
			if st.Events > 0 {
				// Answered from the flight's outcome. An entry no longer pending counts as
				// answered with nothing written. After a Redis data loss it may not have been, and
				// those tasks acquire.
				answered = append(answered, answeredBy(o, st)...)
			}
		case v == VerdictUnavailable:
			// Redis is still away. Keep this and the rest for the next flush instead of paying a
			// connection timeout per outcome.
			kept = append(kept, snap[i:]...)
			errs = append(errs, err)
			break loop
		default:
			kept = append(kept, o)
			errs = append(errs, err)
		}
	}
	rep.Kept = len(kept)

	s.mu.Lock()
	defer s.mu.Unlock()
	s.answeredLocked(answered)
	if rep.Written+rep.Refused == 0 && !s.dirty {
		return rep, errors.Join(errs...)
	}
	// Only Flush removes entries, so s.pending still starts with snap.
	next := append(kept, s.pending[len(snap):]...)
	s.setPendingLocked(next)
	for _, o := range refused {
		s.orphanLocked(o)
	}
	if s.closed { // closed meanwhile, so the next OpenSpool and Flush settle the file
		errs = append(errs, fmt.Errorf("flight: spool flush: %w", os.ErrClosed))
		return rep, errors.Join(errs...)
	}
	if err := s.j.Rewrite(next); err != nil {
		// The old file still holds every line, so nothing is lost. Settled ones come back after
		// a restart and are refused then.
		errs = append(errs, fmt.Errorf("flight: spool flush: %w", err))
	} else {
		s.dirty = false
	}
	return rep, errors.Join(errs...)
}

// answeredBy returns the tasks of o that its write-back answered, as st says: the owner's
// task, and its joined tasks.
func answeredBy(o Outcome, st Settlement) []Task {
	var out []Task
	if st.Answered {
		out = append(out, o.Task)
	}
	if st.JoinedAnswered {
		out = append(out, o.Joined...)
	}
	return out
}

// answeredLocked remembers the tasks that write-backs answered, and forgets those remembered
// longer than answeredFor.
func (s *Spool) answeredLocked(answered []Task) {
	now := time.Now()
	for ref, at := range s.answered {
		if now.Sub(at) > answeredFor {
			delete(s.answered, ref)
		}
	}
	for _, t := range answered {
		if ref := t.ref(); ref != "" {
			if s.answered == nil {
				s.answered = map[string]time.Time{}
			}
			s.answered[ref] = now
		}
	}
}

// WrittenBack reports whether the write-back of a spooled outcome answered t within the last
// minute, and forgets it. t is the outcome's owner task or one of its joined tasks. A task held
// without a handler for its outcome's write-back asks it when it comes back: it is then
// settled, and acquiring the flight would answer it a second time.
func (s *Spool) WrittenBack(t Task) bool {
	ref := t.ref()
	s.mu.Lock()
	defer s.mu.Unlock()
	at, ok := s.answered[ref]
	if !ok {
		return false
	}
	delete(s.answered, ref)
	return time.Since(at) <= answeredFor
}

// Close closes the spool file. Pending outcomes stay in the file for the next OpenSpool, or
// OpenSpoolDir of any process. Len and Pending keep answering. Add and Flush fail. A spool
// opened by OpenSpoolDir releases its lock, and removes its files when nothing is pending.
// Closing twice is a no-op.
func (s *Spool) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if err := s.j.Close(len(s.pending) == 0 && !s.dirty); err != nil {
		return fmt.Errorf("flight: spool close: %w", err)
	}
	return nil
}
