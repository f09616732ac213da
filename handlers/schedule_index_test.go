package handlers_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// memberHook records the scheduled-set members a client's commands name or read back: ids in
// arguments and replies, and payloads (as their ids).
type memberHook struct {
	mu   sync.Mutex
	seen map[string]bool
	cmds []string
}

func (h *memberHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *memberHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.record(cmd)
		return err
	}
}
func (h *memberHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, c := range cmds {
			h.record(c)
		}
		return err
	}
}

func (h *memberHook) record(cmd redis.Cmder) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.cmds = append(h.cmds, cmd.Name())
	for _, a := range cmd.Args() {
		h.walk(a)
	}
	switch c := cmd.(type) {
	case *redis.Cmd:
		h.walk(c.Val())
	case *redis.MapStringStringCmd:
		for k, v := range c.Val() {
			h.walk(k)
			h.walk(v)
		}
	case *redis.ScanCmd:
		keys, _ := c.Val()
		h.walk(keys)
	case *redis.StringSliceCmd:
		h.walk(c.Val())
	case *redis.ZSliceCmd:
		for _, z := range c.Val() {
			h.walk(z.Member)
		}
	}
}

func (h *memberHook) walk(v any) {
	switch v := v.(type) {
	case string:
		switch {
		case topics.IsScheduledID(v):
			h.seen[v] = true
		case strings.HasPrefix(v, "{") && strings.Contains(v, `"taskId"`):
			h.seen[topics.ScheduledID([]byte(v))] = true
		}
	case []string:
		for _, s := range v {
			h.walk(s)
		}
	case []any:
		for _, s := range v {
			h.walk(s)
		}
	}
}

// take returns the members and commands seen since the last call.
func (h *memberHook) take() (map[string]bool, []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	seen, cmds := h.seen, h.cmds
	h.seen, h.cmds = map[string]bool{}, nil
	return seen, cmds
}

// TestScheduledIndexedByKey: with 1,000 other tasks in the stage's scheduled set, inspecting
// and cancelling one key's three scheduled tasks read only those three members (counted by a
// go-redis hook on the client's connection); the cancel removes the members, their payloads
// and the key's index, and answers each task CANCELLED; the other tasks stay.
func TestScheduledIndexedByKey(t *testing.T) {
	b := setup(t)
	b.consumer("c1", nil)
	stage := "interview-evaluation"
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	due := time.Now().Add(time.Hour)
	// 1,000 other keys' tasks, kept aside as a consumer keeps them (schedule_add).
	_, err := b.r.Client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range 1000 {
			tk := topics.Task{TaskID: fmt.Sprintf("other-%d", i), Stage: stage, Tenant: "acme",
				Input: json.RawMessage(fmt.Sprint(i)), NotBefore: topics.FormatTime(due)}
			payload, err := tk.Encode()
			if err != nil {
				return err
			}
			key, _ := handlers.TaskKey(tk)
			keys := []string{b.ks.Scheduled(stage), b.ks.ScheduledTasks(stage), b.ks.ScheduledIndex(stage, key)}
			lua.ScheduleAdd.Eval(ctx, p, keys, topics.ScheduledID(payload), due.UnixMilli(), key, tk.TaskID, string(payload))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// The key's own tasks go through the consumer: read, kept aside, indexed.
	var mine []topics.Task
	for i := range 3 {
		tk := topics.Task{TaskID: fmt.Sprintf("mine-%d", i), Stage: stage, Tenant: "acme", RequestKey: "interview-7",
			Input: json.RawMessage(fmt.Sprint(i)), NotBefore: topics.FormatTime(due.Add(time.Duration(i) * time.Minute))}
		b.enqueue(tk)
		mine = append(mine, tk)
	}
	key, _ := handlers.TaskKey(mine[0])
	waitFor(t, 10*time.Second, "the key's 3 tasks scheduled", func() bool {
		return b.r.Client.ZCard(ctx, b.ks.Scheduled(stage)).Val() == 1003
	})

	rdb := redis.NewClient(b.r.Client.Options())
	defer rdb.Close()
	hook := &memberHook{seen: map[string]bool{}}
	rdb.AddHook(hook)
	cl, err := client.New(client.Config{Client: rdb, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	own := map[string]bool{}
	for _, m := range b.r.Client.HKeys(ctx, b.ks.ScheduledIndex(stage, key)).Val() {
		own[m] = true
	}
	if len(own) != 3 {
		t.Fatalf("the key's index holds %d members, want 3", len(own))
	}
	checkRead := func(what string) {
		t.Helper()
		seen, cmds := hook.take()
		for m := range seen {
			if !own[m] {
				t.Errorf("%s read member %s of another key (commands %v)", what, m, cmds)
				break
			}
		}
		if len(seen) > 3 {
			t.Errorf("%s read %d members, want the key's 3 (commands %v)", what, len(seen), cmds)
		}
	}

	sched, err := cl.Scheduled(ctx, key)
	if err != nil || len(sched) != 3 {
		t.Fatalf("Scheduled = %+v, %v; want the key's 3 tasks", sched, err)
	}
	for i, s := range sched {
		if s.TaskID != mine[i].TaskID || s.DueAt.UnixMilli() != due.Add(time.Duration(i)*time.Minute).UnixMilli() {
			t.Errorf("scheduled[%d] = %+v, want %s due at %v", i, s, mine[i].TaskID, due.Add(time.Duration(i)*time.Minute))
		}
	}
	checkRead("Scheduled")

	n, err := cl.CancelScheduled(ctx, key, "interview closed")
	if err != nil || n != 3 {
		t.Fatalf("CancelScheduled = %d, %v; want 3", n, err)
	}
	checkRead("CancelScheduled")
	evs := b.eventsFor([]string{stage}, []string{"mine-0", "mine-1", "mine-2"}, 10*time.Second)
	for _, tk := range mine {
		if e := evs[tk.TaskID]; len(e) != 1 || e[0].Status != topics.StatusCancelled || e[0].Error != "interview closed" ||
			e[0].RequestKey != key || e[0].Tenant != "acme" {
			t.Errorf("%s: events %+v; want one CANCELLED", tk.TaskID, e)
		}
	}
	if n := b.r.Client.Exists(ctx, b.ks.ScheduledIndex(stage, key)).Val(); n != 0 {
		t.Error("the key's index is still there after its tasks were cancelled")
	}
	if z, h := b.r.Client.ZCard(ctx, b.ks.Scheduled(stage)).Val(), b.r.Client.HLen(ctx, b.ks.ScheduledTasks(stage)).Val(); z != 1000 || h != 1000 {
		t.Errorf("after the cancel: %d members, %d payloads; want the other 1000 of each", z, h)
	}
	if again, err := cl.CancelScheduled(ctx, key, "again"); err != nil || again != 0 {
		t.Errorf("a second CancelScheduled = %d, %v; want 0", again, err)
	}
}

// TestScheduledIndexDrainsWhenDue: tasks kept aside go to the indexed scheduled set only, and
// the schedule loop removes a task's payload and its key's index entry as it appends the task
// when due; nothing of the key is left behind.
func TestScheduledIndexDrainsWhenDue(t *testing.T) {
	b := setup(t)
	b.consumer("c1", nil)
	stage := "interview-evaluation"
	at := topics.FormatTime(time.Now().Add(3 * time.Second))
	var key string
	for i := range 2 {
		tk := topics.Task{TaskID: fmt.Sprintf("soon-%d", i), Stage: stage, Tenant: "acme", RequestKey: "soon",
			Input: json.RawMessage(fmt.Sprint(i)), NotBefore: at}
		key, _ = handlers.TaskKey(tk)
		b.enqueue(tk)
	}
	index := b.ks.ScheduledIndex(stage, key)
	waitFor(t, 10*time.Second, "both tasks indexed", func() bool { return b.r.Client.HLen(b.ctx, index).Val() == 2 })
	// Nothing goes where a consumer of a version without the index looks (during a rolling
	// deploy it would append a scheduled id as if it were a payload).
	if n := b.r.Client.Exists(b.ctx, b.ks.ScheduledLegacy(stage), b.ks.ScheduledLegacyMoving(stage)).Val(); n != 0 {
		t.Errorf("a scheduled task was put in the set of a version without the index")
	}
	evs := b.eventsFor([]string{stage}, []string{"soon-0", "soon-1"}, 15*time.Second)
	for _, id := range []string{"soon-0", "soon-1"} {
		if len(evs[id]) == 0 || evs[id][0].Status != topics.StatusSucceeded {
			t.Errorf("%s: %+v", id, evs[id])
		}
	}
	waitFor(t, 5*time.Second, "the scheduled keys emptied", func() bool {
		n := b.r.Client.Exists(b.ctx, index, b.ks.Scheduled(stage), b.ks.ScheduledMoving(stage), b.ks.ScheduledTasks(stage)).Val()
		return n == 0
	})
}

// TestScheduledLegacyMembers: a version without the index kept scheduled tasks in
// ai:scheduled:{<stage>}, the payloads themselves as members. Such a task is still appended
// when due and answered; one due further ahead than the horizon is appended at once and
// refused (not_before_too_far, FAILED event); and inspect and cancel find that set's members
// of their key.
func TestScheduledLegacyMembers(t *testing.T) {
	b := setup(t)
	stage := "interview-evaluation"
	now := time.Now()
	legacy := func(id, key string, due time.Time) topics.Task {
		tk := topics.Task{TaskID: id, Stage: stage, Tenant: "acme", RequestKey: key, Input: json.RawMessage(`"` + id + `"`),
			NotBefore: topics.FormatTime(due)}
		payload, err := json.Marshal(tk)
		if err != nil {
			t.Fatal(err)
		}
		if err := b.r.Client.ZAdd(b.ctx, b.ks.ScheduledLegacy(stage), redis.Z{Score: float64(due.UnixMilli()), Member: string(payload)}).Err(); err != nil {
			t.Fatal(err)
		}
		return tk
	}
	legacy("old-soon", "old-1", now.Add(2*time.Second))
	legacy("old-far", "old-2", time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC))
	later := legacy("old-later", "old-3", now.Add(time.Hour))
	b.consumer("c1", nil)

	evs := b.eventsFor([]string{stage}, []string{"old-soon", "old-far"}, 15*time.Second)
	if e := evs["old-soon"]; len(e) == 0 || e[0].Status != topics.StatusSucceeded {
		t.Errorf("the legacy member due soon: %+v", e)
	}
	if e := evs["old-far"]; len(e) == 0 || e[0].Status != topics.StatusFailed || e[0].ErrorCode != string(topics.ReasonNotBeforeTooFar) {
		t.Errorf("the legacy member due in 9999: %+v; want FAILED not_before_too_far", e)
	}

	cl, err := client.New(client.Config{Client: b.r.Client, Keyspace: b.ks})
	if err != nil {
		t.Fatal(err)
	}
	key, _ := handlers.TaskKey(later)
	sched, err := cl.Scheduled(b.ctx, key)
	if err != nil || len(sched) != 1 || sched[0].TaskID != "old-later" {
		t.Fatalf("Scheduled of a legacy member's key = %+v, %v", sched, err)
	}
	if n, err := cl.CancelScheduled(b.ctx, key, "gone"); err != nil || n != 1 {
		t.Fatalf("CancelScheduled of a legacy member's key = %d, %v", n, err)
	}
	if e := b.eventsFor([]string{stage}, []string{"old-later"}, 10*time.Second)["old-later"]; len(e) != 1 || e[0].Status != topics.StatusCancelled {
		t.Errorf("old-later: %+v; want CANCELLED", e)
	}
	if n := b.r.Client.Exists(b.ctx, b.ks.ScheduledLegacy(stage), b.ks.ScheduledLegacyMoving(stage), b.ks.Scheduled(stage)).Val(); n != 0 {
		t.Errorf("%d scheduled sets left", n)
	}
}

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
