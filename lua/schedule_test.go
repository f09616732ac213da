package lua_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestScheduleScriptsKeepTheIndex: the scheduled-set scripts keep a member, its payload and
// its key's index entry together. A task scheduled again while the loop appends it (the same
// payload back in the set) keeps its payload and index entry when the loop's done call runs;
// a cancel does not take a task from the moving set, and leaves its payload for the loop;
// once nothing holds the id, nothing of it is left.
func TestScheduleScriptsKeepTheIndex(t *testing.T) {
	r := redistest.New(t)
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: r.Prefix}
	const stage, key = "later", "ai:later:v1:acme:rk:k"
	set, moving, tasks, index := ks.Scheduled(stage), ks.ScheduledMoving(stage), ks.ScheduledTasks(stage), ks.ScheduledIndex(stage, key)
	legacy, legacyMoving := ks.ScheduledLegacy(stage), ks.ScheduledLegacyMoving(stage)
	payload := `{"taskId":"t1","stage":"later","tenant":"acme","input":1}`
	id := topics.ScheduledID([]byte(payload))
	add := func(due time.Time) {
		t.Helper()
		if err := lua.ScheduleAdd.Run(ctx, r.Client, []string{set, tasks, index}, id, due.UnixMilli(), key, "t1", payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
	takeDue := func(stuckMs int) []string {
		t.Helper()
		out, err := lua.ScheduleDue.Run(ctx, r.Client, []string{set, moving, tasks, legacy, legacyMoving}, 100, stuckMs, 0).StringSlice()
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	done := func() {
		t.Helper()
		if err := lua.ScheduleDone.Run(ctx, r.Client, []string{set, moving, tasks, legacyMoving, index}, id, 1).Err(); err != nil {
			t.Fatal(err)
		}
	}
	state := func() (inSet, inMoving bool, payloads, indexed int64) {
		return r.Client.ZScore(ctx, set, id).Err() == nil, r.Client.ZScore(ctx, moving, id).Err() == nil,
			r.Client.HLen(ctx, tasks).Val(), r.Client.HLen(ctx, index).Val()
	}

	add(time.Now().Add(-time.Second))
	if out := takeDue(30000); len(out) != 3 || out[0] != id || out[1] != payload || out[2] != key {
		t.Fatalf("schedule_due = %q; want the id, its payload and its key", out)
	}
	// Its taker died before done: once stuck, it is put back and taken again, payload and all.
	if out := takeDue(0); len(out) != 3 || out[0] != id || out[1] != payload {
		t.Fatalf("schedule_due of a stuck id = %q; want it taken again with its payload", out)
	}
	add(time.Now().Add(time.Hour)) // scheduled again while it is being appended
	done()
	if inSet, inMoving, p, i := state(); !inSet || inMoving || p != 1 || i != 1 {
		t.Fatalf("after a reschedule and done: in set %v, moving %v, %d payloads, %d indexed; want it kept", inSet, inMoving, p, i)
	}

	// A cancel while the loop appends it: the moving copy stays, with its payload.
	if err := r.Client.ZAdd(ctx, set, redisZ(time.Now().Add(-time.Second), id)).Err(); err != nil {
		t.Fatal(err)
	}
	takeDue(30000)
	res, err := lua.ScheduleCancel.Run(ctx, r.Client, []string{set, moving, tasks, index, legacy}).Slice()
	if err != nil || len(res) != 1 {
		t.Fatalf("schedule_cancel while moving = %v, %v; want nothing removed", res, err)
	}
	if inSet, inMoving, p, i := state(); inSet || !inMoving || p != 1 || i != 1 {
		t.Fatalf("after a cancel while moving: in set %v, moving %v, %d payloads, %d indexed", inSet, inMoving, p, i)
	}
	done()
	if n := r.Client.Exists(ctx, set, moving, tasks, index).Val(); n != 0 {
		t.Errorf("%d scheduled keys left once the task was appended", n)
	}

	// A cancel of a waiting task returns its payload and leaves nothing.
	add(time.Now().Add(time.Hour))
	res, err = lua.ScheduleCancel.Run(ctx, r.Client, []string{set, moving, tasks, index, legacy}).Slice()
	if err != nil || len(res) != 2 || res[0] != int64(0) || res[1] != payload {
		t.Fatalf("schedule_cancel = %v, %v; want no legacy member and the payload", res, err)
	}
	if n := r.Client.Exists(ctx, set, moving, tasks, index).Val(); n != 0 {
		t.Errorf("%d scheduled keys left after the cancel", n)
	}
}

func redisZ(due time.Time, member string) redis.Z {
	return redis.Z{Score: float64(due.UnixMilli()), Member: member}
}

// TestScheduleScriptsOnCluster: on Redis Cluster, a stage's scheduled set, moving set, payloads
// and the index of every request key share the stage's hash tag, so the loop's calls, which
// name the indexes of several keys at once, and a key's cancel run in one slot.
func TestScheduleScriptsOnCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3)
	rdb := c.Client()
	ctx := context.Background()
	ks := topics.Keyspace{Prefix: redistest.Prefix()}
	const stage = "later"
	set, moving, tasks := ks.Scheduled(stage), ks.ScheduledMoving(stage), ks.ScheduledTasks(stage)
	legacy, legacyMoving := ks.ScheduledLegacy(stage), ks.ScheduledLegacyMoving(stage)
	keys := []string{set, moving, tasks, legacyMoving}
	var args []any
	for i, key := range []string{"ai:later:v1:acme:rk:a", "ai:later:v1:acme:rk:b", "ai:later:v1:beta:rk:c"} {
		payload := `{"taskId":"t` + key[len(key)-1:] + `","stage":"later","tenant":"acme","input":1}`
		id := topics.ScheduledID([]byte(payload))
		err := lua.ScheduleAdd.Run(ctx, rdb, []string{set, tasks, ks.ScheduledIndex(stage, key)}, id,
			time.Now().Add(-time.Second).UnixMilli(), key, "t", payload).Err()
		if err != nil {
			t.Fatalf("schedule_add on a cluster: %v", err)
		}
		keys = append(keys, ks.ScheduledIndex(stage, key))
		args = append(args, id, i+1)
	}
	// And a payload member of a version without the index.
	if err := rdb.ZAdd(ctx, legacy, redisZ(time.Now().Add(-time.Second), `{"taskId":"old"}`)).Err(); err != nil {
		t.Fatal(err)
	}
	args = append(args, `{"taskId":"old"}`, 0)
	out, err := lua.ScheduleDue.Run(ctx, rdb, []string{set, moving, tasks, legacy, legacyMoving}, 100, 30000, 0).StringSlice()
	if err != nil || len(out) != 12 {
		t.Fatalf("schedule_due on a cluster = %q, %v", out, err)
	}
	if err := lua.ScheduleDone.Run(ctx, rdb, keys, args...).Err(); err != nil {
		t.Fatalf("schedule_done with three keys' indexes on a cluster: %v", err)
	}
	if err := lua.ScheduleCancel.Run(ctx, rdb, []string{set, moving, tasks, keys[4], legacy}).Err(); err != nil {
		t.Fatalf("schedule_cancel on a cluster: %v", err)
	}
	for _, k := range append(keys, legacy) {
		if n := rdb.Exists(ctx, k).Val(); n != 0 {
			t.Errorf("%s left after the tasks were appended", k)
		}
	}
}
