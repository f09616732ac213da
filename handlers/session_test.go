package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// heavyConsumer starts a consumer of the extraction stage (session-locked) with a short lease.
func (b *bundle) heavyConsumer(name string, m model.Model) {
	b.t.Helper()
	b.consumer(name, func(c *handlers.Config) {
		stages, err := handlers.LoadStages("", []string{"interview-extraction"})
		if err != nil {
			b.t.Fatal(err)
		}
		stages[0].HeartbeatInterval, stages[0].Lease = 100*time.Millisecond, time.Second
		c.Stages, c.Models = stages, map[string]model.Model{"sim": m}
	})
}

// stubborn ignores cancellation: it answers after d whatever happens (a model client that does
// not honour its context), numbering its runs.
type stubborn struct {
	d       time.Duration
	runs    atomic.Int64
	mu      sync.Mutex
	got     [][2]time.Time
	tenants []string
	ids     []string
	hook    func(run int64)
	byRun   map[int64][2]time.Time // run number -> its interval
}

func (s *stubborn) Name() string { return "sim" }
func (s *stubborn) Call(_ context.Context, req model.Request, _ model.ProgressFunc) (json.RawMessage, error) {
	n := s.runs.Add(1)
	start := time.Now()
	if s.hook != nil {
		s.hook(n)
	}
	time.Sleep(s.d)
	s.mu.Lock()
	s.got = append(s.got, [2]time.Time{start, time.Now()})
	s.tenants = append(s.tenants, req.Tenant)
	s.ids = append(s.ids, req.TaskID)
	if s.byRun == nil {
		s.byRun = map[int64][2]time.Time{}
	}
	s.byRun[n] = [2]time.Time{start, time.Now()}
	s.mu.Unlock()
	return json.RawMessage(fmt.Sprintf(`{"run":%d,"task":%q}`, n, req.TaskID)), nil
}

// overlapping reports whether any two of the given runs overlapped.
func (s *stubborn) overlapping(runs ...int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range runs {
		for _, q := range runs[i+1:] {
			a, c := s.byRun[r], s.byRun[q]
			if a[0].Before(c[1]) && c[0].Before(a[1]) {
				return true
			}
		}
	}
	return false
}

// overlaps counts the pairs of runs of one tenant that overlapped.
func (s *stubborn) overlaps(tenant string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, a := range s.got {
		for j := i + 1; j < len(s.got); j++ {
			c := s.got[j]
			if s.tenants[i] == tenant && s.tenants[j] == tenant && a[0].Before(c[1]) && c[0].Before(a[1]) {
				n++
			}
		}
	}
	return n
}

func (s *stubborn) finished() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.got)
}

// TestLostSessionLockCannotComplete: a heavy run whose session lock was taken by another
// holder mid-run does not complete, even when its model returns a value: the task runs again
// once it holds the lock, and its event carries that run's result.
func TestLostSessionLockCannotComplete(t *testing.T) {
	b := setup(t)
	ks := b.ks
	m := &stubborn{d: 1500 * time.Millisecond}
	m.hook = func(run int64) {
		if run != 1 {
			return
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			// The lock is lost: another holder has it for a while.
			b.r.Client.Set(b.ctx, ks.SessionLock("acme", "s-1"), "1|intruder", 2*time.Second)
		}()
	}
	b.heavyConsumer("c1", m)
	b.enqueue(topics.Task{TaskID: "heavy", Stage: "interview-extraction", SessionID: "s-1",
		Input: json.RawMessage(`{"resume":"r"}`)})
	got := b.eventsFor([]string{"interview-extraction"}, []string{"heavy"}, 20*time.Second)
	evs := got["heavy"]
	if len(evs) != 1 || evs[0].Status != topics.StatusSucceeded {
		t.Fatalf("events %+v", evs)
	}
	var res struct{ Run int }
	_ = json.Unmarshal(evs[0].Result, &res)
	if res.Run != 2 || m.runs.Load() != 2 {
		t.Errorf("result of run %d after %d runs; the run that lost its lock must not complete", res.Run, m.runs.Load())
	}
}

// TestSessionLockHolderIsPerRun: two tasks of one tenant and session that carry the same task
// id (a producer's retry with a changed input) never run at once; the same session id in
// another tenant is another session and does not wait.
func TestSessionLockHolderIsPerRun(t *testing.T) {
	b := setup(t)
	m := &stubborn{d: 800 * time.Millisecond}
	b.heavyConsumer("c1", m)
	for i, tenant := range []string{"acme", "acme", "beta"} {
		b.enqueue(topics.Task{TaskID: "same-id", Tenant: tenant, Stage: "interview-extraction", SessionID: "s-1",
			Input: json.RawMessage(fmt.Sprintf(`{"resume":"r%d"}`, i))})
	}
	// Three events, one per task (a run whose session lock lapsed under load does not
	// complete: its task runs again, so wait for the events, not for a number of runs).
	var evs []topics.Event
	for deadline := time.Now().Add(60 * time.Second); ; {
		evs = b.eventsFor([]string{"interview-extraction"}, []string{"same-id"}, time.Second)["same-id"]
		if len(evs) >= 3 || time.Now().After(deadline) {
			break
		}
	}
	var acme []int64
	for _, ev := range evs {
		var res struct{ Run int64 }
		_ = json.Unmarshal(ev.Result, &res)
		if ev.Tenant == "acme" {
			acme = append(acme, res.Run)
		}
	}
	if len(evs) != 3 || len(acme) != 2 {
		t.Fatalf("%d events (%d of acme) for the three tasks, want 3 (2)", len(evs), len(acme))
	}
	if m.overlapping(acme...) {
		t.Errorf("acme's two completed runs of one session (runs %v) overlapped", acme)
	}
}

// TestBusySessionDoesNotStallTheStage: tasks waiting for a busy session's lock hold no
// handler (they wait delayed, not polling), so a burst of long tasks in one session (more
// than the stage's 4 handlers) does not hold up a task of another session of the same tenant.
func TestBusySessionDoesNotStallTheStage(t *testing.T) {
	b := setup(t)
	m := &stubborn{d: time.Second}
	b.heavyConsumer("c1", m)
	for i := range 6 {
		b.enqueue(topics.Task{TaskID: fmt.Sprintf("busy-%d", i), Tenant: "acme", Stage: "interview-extraction",
			SessionID: "s-busy", Input: json.RawMessage(fmt.Sprintf(`{"resume":"busy%d"}`, i))})
	}
	time.Sleep(300 * time.Millisecond) // the burst is read and waiting for its lock
	b.enqueue(topics.Task{TaskID: "other", Tenant: "acme", Stage: "interview-extraction",
		SessionID: "s-other", Input: json.RawMessage(`{"resume":"other"}`)})
	got := b.eventsFor([]string{"interview-extraction"}, []string{"other"}, 15*time.Second)
	if len(got["other"]) == 0 {
		t.Fatal("no event for the task of the other session")
	}
	// The busy session's runs go one at a time, 1 s each. The other session's run must start
	// before the second of them ends (it is enqueued while the first runs): a stage whose
	// handlers were held by the waiting tasks would start it only after several of them.
	m.mu.Lock()
	defer m.mu.Unlock()
	var other time.Time
	var busyEnds []time.Time
	for i, id := range m.ids {
		if id == "other" {
			other = m.got[i][0]
		} else {
			busyEnds = append(busyEnds, m.got[i][1])
		}
	}
	slices.SortFunc(busyEnds, time.Time.Compare)
	if len(busyEnds) > 1 && !other.Before(busyEnds[1]) {
		t.Errorf("the other session's task started after %d of the busy session's runs had ended", len(busyEnds))
	}
}
