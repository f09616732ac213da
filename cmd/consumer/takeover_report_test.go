package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestReportTakeoverUnderBacklog: the takeover of TestReportTakeover (a consumer process owns
// a 20 s task, is SIGKILLed 1.0-1.25 s after its flight went RUNNING, a rescuer process runs)
// while the group holds a backlog of older pending entries that a live consumer keeps touching
// (0, 100 and 1,000 of them, all ahead of the victim's entry in the pending list). Measured:
// kill to the rescuer's RUNNING. The target is the lease (1.5 s) plus 1 s at every backlog.
//
//	BENCH_REPORT=1 go test -run 'TestReportTakeoverUnderBacklog' -v -count 1 ./cmd/consumer/
func TestReportTakeoverUnderBacklog(t *testing.T) {
	repGate(t)
	repUseReleaseBinary(t)
	r := redistest.New(t)
	ctx := context.Background()
	for _, backlog := range []int{0, 100, 1000} {
		var took []time.Duration
		for run := range repRuns() {
			e := newE2EOn(t, r.Client, r.URL, redistest.Prefix())
			stream := e.ks.Tasks("interview-evaluation")
			stopHolder := holdBacklog(t, e.rdb, stream, backlog)
			key, victim, rescuer, killed := repKillOwner(t, e, fmt.Sprintf("slow%d", run), run)
			for {
				m, err := e.coord.Get(ctx, key)
				if err == nil && m.Status == flight.StatusRunning && m.OwnerID == "rescuer" {
					break
				}
				if time.Since(killed) > 15*time.Second {
					t.Fatalf("backlog %d, run %d: no takeover within 15 s", backlog, run)
				}
				time.Sleep(2 * time.Millisecond)
			}
			took = append(took, time.Since(killed))
			stopHolder()
			_ = rescuer.cmd.Process.Kill()
			<-rescuer.done
			<-victim.done
		}
		t.Logf("backlog %4d pending: kill -> new owner RUNNING: %s", backlog, repSummary(took))
	}
}

// repKillOwner starts consumer "victim", makes it the owner of a 20 s task (id, key k),
// starts consumer "rescuer", and SIGKILLs the victim 1.0-1.25 s after its flight went
// RUNNING (a random phase of its heartbeat). It returns the task's key, the two processes and
// the time of the kill.
func repKillOwner(t *testing.T, e *e2e, id string, k int) (key string, victim, rescuer *proc, killed time.Time) {
	t.Helper()
	victim = e.start("victim")
	tk := task(id, "interview-evaluation", k, 20000)
	key = keyOf(t, tk)
	if _, err := e.w.EnqueueTask(context.Background(), tk); err != nil {
		t.Fatal(err)
	}
	e.waitOwned([]string{key}, "victim", 10*time.Second)
	running := time.Now()
	rescuer = e.start("rescuer")
	time.Sleep(time.Until(running.Add(time.Second + rand.N(250*time.Millisecond))))
	if err := victim.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	return key, victim, rescuer, time.Now()
}

// holdBacklog adds n entries to stream (before the test's task) and keeps them pending under
// a live consumer "holder" that touches them every 200 ms, until the returned stop is called.
// Their payloads are invalid on purpose: should anything claim them, it dead-letters them.
func holdBacklog(t *testing.T, rdb redis.UniversalClient, stream string, n int) (stop func()) {
	t.Helper()
	ctx := context.Background()
	if n == 0 {
		return func() {}
	}
	_ = rdb.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "$").Err()
	if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			p.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{topics.FieldUUID, fmt.Sprint("backlog-", i),
				topics.FieldPayload, "held"}})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "holder",
		Streams: []string{stream, ">"}, Count: int64(n), Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != n {
		t.Fatalf("hold %d entries: %v", n, err)
	}
	ids := make([]string, n)
	for i, m := range res[0].Messages {
		ids[i] = m.ID
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
			}
			for i := 0; i < len(ids); i += 100 {
				_ = rdb.XClaimJustID(ctx, &redis.XClaimArgs{Stream: stream, Group: topics.ConsumerGroup,
					Consumer: "holder", Messages: ids[i:min(i+100, len(ids))]}).Err()
			}
		}
	}()
	return func() {
		close(done)
		<-stopped
		_ = rdb.XAck(ctx, stream, topics.ConsumerGroup, ids...).Err()
	}
}
