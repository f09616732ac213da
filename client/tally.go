package client

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Summary sums up the terminal events of a set of receipts, as a Tally counts them.
type Summary struct {
	// Tasks is the number of distinct task ids expected.
	Tasks int `json:"tasks"`
	// Events is the number of tasks that got their event. Missing is the number still
	// waiting.
	Events  int `json:"events"`
	Missing int `json:"missing"`
	// DistinctKeys is the number of distinct request keys among the events.
	DistinctKeys int `json:"distinctKeys"`
	// Owner, Hit, Follower, Local and Archive count the events by Event.Shared: model runs,
	// result cache hits, followers of another owner, in-process runs while Redis was away,
	// and answers from the durable archive.
	Owner    int `json:"owner"`
	Hit      int `json:"hit"`
	Follower int `json:"follower"`
	Local    int `json:"local"`
	Archive  int `json:"archive"`
	// Failures counts events whose status is not SUCCEEDED.
	Failures int `json:"failures"`
	// P50Ms and P99Ms are nearest-rank latency percentiles in milliseconds. Latency is the
	// event's arrival time minus the receipt's EnqueuedAt.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	// WallMs is the time from the tally's start to the end passed to Summary.
	WallMs int64 `json:"wallMs"`
}

// Tally matches terminal events to receipts in any order and sums them up in a Summary,
// counting each task's first event only. It is safe for concurrent use.
//
// A caller can start reading results with Subscribe before it enqueues, so that arrival
// times are measured as events come. An event observed before its receipt is registered
// is kept until Expect or Seal. After Seal, events of unknown tasks are dropped.
type Tally struct {
	start time.Time
	done  chan struct{}

	mu       sync.Mutex // guards the fields below
	expected map[string]Receipt
	answered map[string]bool
	early    map[string][]arrival // events seen before their receipt, at most maxEarly per id
	keys     map[string]struct{}
	latency  []time.Duration
	sum      Summary
	sealed   bool
	closed   bool
}

// maxEarly bounds the events kept per unknown task id until its receipt is registered, so
// that a foreign event under the same id cannot crowd out the task's own.
const maxEarly = 4

type arrival struct {
	e  topics.Event
	at time.Time
}

// NewTally returns an empty tally whose wall time starts at start.
func NewTally(start time.Time) *Tally {
	return &Tally{
		start:    start,
		done:     make(chan struct{}),
		expected: make(map[string]Receipt),
		answered: make(map[string]bool),
		early:    make(map[string][]arrival),
		keys:     make(map[string]struct{}),
	}
}

// Expect registers r. When an event matching r was observed already, it is counted now and
// returned with true, so that the caller can report it. A task id registered twice counts
// once, as the first receipt.
func (t *Tally) Expect(r Receipt) (topics.Event, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.expected[r.TaskID]; ok {
		return topics.Event{}, false
	}
	t.expected[r.TaskID] = r
	t.sum.Tasks++
	early := t.early[r.TaskID]
	delete(t.early, r.TaskID)
	for _, a := range early {
		if r.Matches(a.e) {
			t.count(a.e, a.at)
			return a.e, true
		}
	}
	return topics.Event{}, false
}

// Observe records e, which arrived at at. It returns true when e is the first event of an
// expected task and was counted. It returns false for a duplicate, for an event that the
// task's receipt does not match, and for a task not expected yet.
func (t *Tally) Observe(e topics.Event, at time.Time) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.answered[e.TaskID] {
		return false
	}
	r, ok := t.expected[e.TaskID]
	if !ok {
		if a := t.early[e.TaskID]; len(a) < maxEarly && !t.sealed {
			t.early[e.TaskID] = append(a, arrival{e, at})
		}
		return false
	}
	if !r.Matches(e) {
		return false
	}
	t.count(e, at)
	return true
}

// count adds the first event of an expected task. t.mu is held.
func (t *Tally) count(e topics.Event, at time.Time) {
	t.answered[e.TaskID] = true
	t.sum.Events++
	if e.RequestKey != "" {
		t.keys[e.RequestKey] = struct{}{}
	}
	switch e.Shared {
	case topics.SharedOwner:
		t.sum.Owner++
	case topics.SharedHit:
		t.sum.Hit++
	case topics.SharedFollower:
		t.sum.Follower++
	case topics.SharedLocal:
		t.sum.Local++
	case topics.SharedArchive:
		t.sum.Archive++
	}
	if e.Status != topics.StatusSucceeded {
		t.sum.Failures++
	}
	if enq := t.expected[e.TaskID].EnqueuedAt; !enq.IsZero() {
		t.latency = append(t.latency, at.Sub(enq))
	}
	t.maybeClose()
}

// Seal tells the tally that no more receipts come. Done is closed once the tally is sealed
// and every expected task has its event.
func (t *Tally) Seal() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sealed = true
	clear(t.early)
	t.maybeClose()
}

func (t *Tally) maybeClose() {
	if t.sealed && !t.closed && t.sum.Events == t.sum.Tasks {
		t.closed = true
		close(t.done)
	}
}

// Done is closed when the tally is sealed and complete.
func (t *Tally) Done() <-chan struct{} { return t.done }

// Summary returns the counts so far, with the wall time measured up to end.
func (t *Tally) Summary(end time.Time) Summary {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.sum
	s.Missing = s.Tasks - s.Events
	s.DistinctKeys = len(t.keys)
	s.WallMs = end.Sub(t.start).Milliseconds()
	lat := slices.Clone(t.latency)
	slices.Sort(lat)
	s.P50Ms = percentileMs(lat, 0.50)
	s.P99Ms = percentileMs(lat, 0.99)
	return s
}

// Missing returns the receipts of the expected tasks that have no event yet, in enqueue
// order: by EnqueuedAt, then by stream entry.
func (t *Tally) Missing() []Receipt {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Receipt
	for id, r := range t.expected {
		if !t.answered[id] {
			out = append(out, r)
		}
	}
	slices.SortFunc(out, func(a, b Receipt) int {
		if c := a.EnqueuedAt.Compare(b.EnqueuedAt); c != 0 {
			return c
		}
		switch {
		case topics.IDLess(a.StreamID, b.StreamID):
			return -1
		case topics.IDLess(b.StreamID, a.StreamID):
			return 1
		}
		return 0
	})
	return out
}

// percentileMs returns the nearest-rank p-th percentile of sorted in milliseconds, rounded
// to 0.1 ms. It returns 0 when sorted is empty.
func percentileMs(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = min(max(i, 0), len(sorted)-1)
	return math.Round(float64(sorted[i])/float64(time.Millisecond)*10) / 10
}
