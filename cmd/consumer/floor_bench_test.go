package main_test

// The floor of the fleet burst (impl=floor): the least a consumer process can spend per task
// with go-redis when each read batch costs the round trips Flightdeck's does. It is this test
// binary again, in a child mode (repBareEnv=floor), running one loop per process: XREADGROUP
// of as many entries as it has handlers, decode and key each task, one script call that
// takes every key of the batch (GET, SET with a TTL), the model call of each task on its own
// goroutine, and one script call that stores each result, writes its event and acknowledges
// its entry. It has no fencing, lease, heartbeat, join, retry, dead letter, metrics or
// overlap of one batch's complete with the next read: what it costs is what the round trips,
// the runtime and the client cost on this machine, beside which the consumer's figure can be
// read in the same run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// repResultsEnv names the floor child's result stream.
const repResultsEnv = "FLIGHTDECK_REPORT_RESULTS"

// floorAcquire takes each key of a batch that nobody holds, as an acquire that makes its
// caller the owner does.
var floorAcquire = redis.NewScript(`local out = {}
for i = 1, #KEYS do
  if not redis.call('GET', KEYS[i]) then redis.call('SET', KEYS[i], ARGV[i], 'PX', 60000) end
  out[i] = 1
end
return out`)

// floorComplete stores each result, writes its event and acknowledges its entry: ARGV holds
// the result stream, the task stream and the group, then entry id, event and result per key.
var floorComplete = redis.NewScript(`for i = 1, #KEYS do
  redis.call('SET', KEYS[i], ARGV[3 + 3*i], 'PX', 60000)
  redis.call('XADD', ARGV[1], '*', 'event', ARGV[2 + 3*i])
  redis.call('XACK', ARGV[2], ARGV[3], ARGV[1 + 3*i])
end
return #KEYS`)

// repFloorChild runs the floor loop with $FLIGHTDECK_REPORT_SUBS handlers on
// $FLIGHTDECK_REPORT_STREAM until SIGTERM. It prints READY once its group exists.
func repFloorChild() int {
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	rdb := redisconn.NewClient(opt)
	defer func() { _ = rdb.Close() }()
	stream, results, name := os.Getenv(repStreamEnv), os.Getenv(repResultsEnv), os.Getenv(repNameEnv)
	handlers, err := strconv.Atoi(os.Getenv(repSubsEnv))
	if err != nil || handlers <= 0 {
		handlers = 8
	}
	if err := rdb.XGroupCreateMkStream(ctx, stream, topics.ConsumerGroup, "0").Err(); err != nil &&
		!redis.HasErrorPrefix(err, "BUSYGROUP") {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for _, s := range []*redis.Script{floorAcquire, floorComplete} {
		if err := s.Load(ctx, rdb).Err(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println("READY")
	for ctx.Err() == nil {
		res, err := rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: name,
			Streams: []string{stream, ">"}, Count: int64(handlers), Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err == nil && len(res) > 0 {
			err = floorBatch(ctx, rdb, stream, results, res[0].Messages)
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// floorBatch handles one read batch: decode and key, acquire all, call the model of each,
// complete all.
func floorBatch(ctx context.Context, rdb *redis.Client, stream, results string, msgs []redis.XMessage) error {
	tasks := make([]topics.Task, len(msgs))
	keys := make([]string, len(msgs))
	owners := make([]any, len(msgs))
	for i, m := range msgs {
		payload, _ := m.Values[topics.FieldPayload].(string)
		t, err := topics.DecodeTask([]byte(payload), topics.Limits{})
		if err != nil {
			return fmt.Errorf("floor: entry %s: %w", m.ID, err)
		}
		key, err := flight.TaskKey(t)
		if err != nil {
			return fmt.Errorf("floor: entry %s: %w", m.ID, err)
		}
		tasks[i], keys[i], owners[i] = t, "floor:"+key, t.TaskID
	}
	if err := floorAcquire.EvalSha(ctx, rdb, keys, owners...).Err(); err != nil {
		return fmt.Errorf("floor: acquire: %w", err)
	}
	out := make([][]byte, len(msgs))
	var wg sync.WaitGroup
	for i := range msgs {
		wg.Go(func() { out[i] = []byte(`{"score":7,"rationale":"floor"}`) })
	}
	wg.Wait()
	args := make([]any, 0, 3+3*len(msgs))
	args = append(args, results, stream, topics.ConsumerGroup)
	for i, m := range msgs {
		ev, err := json.Marshal(map[string]any{"taskId": tasks[i].TaskID, "status": "SUCCEEDED",
			"result": json.RawMessage(out[i])})
		if err != nil {
			return err
		}
		args = append(args, m.ID, ev, out[i])
	}
	if err := floorComplete.EvalSha(ctx, rdb, keys, args...).Err(); err != nil {
		return fmt.Errorf("floor: complete: %w", err)
	}
	return nil
}
