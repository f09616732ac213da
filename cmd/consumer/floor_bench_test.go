package main_test

// The floor of the fleet burst (impl=floor): the least a consumer process can spend per task
// with go-redis when each read batch costs the round trips Flightdeck's does. It is this test
// binary again, in a child mode (repBareEnv=floor), running one loop per process: XREADGROUP
// of as many entries as it has handlers, decode and key each task, one script call that
// takes every key of the batch (GET, SET with a TTL), the simulated model of the consumer's
// benchmark (model.Sim) for each task on a goroutine of its own, and one script call that
// stores each result, writes its event (built in the script, trimming the stream as the
// consumer's first event of a call does) and acknowledges the batch's entries with one XACK.
// It runs at the consumer's default garbage-collector target. It has no fencing, lease,
// heartbeat, join, retry, dead letter, metrics or overlap of one batch's complete with the
// next read: what it costs is what the round trips, the runtime and the client cost on this
// machine, beside which the consumer's figure can be read in the same run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/handlers/model"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Environment of the floor child, beside repStreamEnv, repNameEnv and repSubsEnv.
const (
	repResultsEnv = "FLIGHTDECK_REPORT_RESULTS" // the result stream
	repPrefixEnv  = "FLIGHTDECK_REPORT_PREFIX"  // the run's key prefix, for the floor's keys
	repStageEnv   = "FLIGHTDECK_REPORT_STAGE"   // the stage whose policy floor-scripts runs
)

// floorGCPercent is the consumer's default garbage-collector target (defaultGCPercent in
// gc.go), so that the floor pays for its garbage as the consumer does.
const floorGCPercent = 400

// floorAcquire takes each key of a batch: it sets the key, with the task as its holder, when
// nobody holds it, as an acquire that makes its caller the owner does.
var floorAcquire = redis.NewScript(`local out = {}
for i = 1, #KEYS do
  if not redis.call('GET', KEYS[i]) then redis.call('SET', KEYS[i], ARGV[i], 'PX', 60000) end
  out[i] = 1
end
return out`)

// floorComplete stores each result, writes its event and acknowledges the entries. KEYS holds
// the result stream, the task stream, then the batch's keys; ARGV the group, the result
// stream's MAXLEN, then entry id, task id and result per key.
var floorComplete = redis.NewScript(`local results, stream = KEYS[1], KEYS[2]
local ids = {}
for i = 3, #KEYS do
  local a = 3 * i - 6
  local task, result = ARGV[a + 1], ARGV[a + 2]
  redis.call('SET', KEYS[i], result, 'PX', 60000)
  local p = '{"taskId":"' .. task .. '","shared":"owner","status":"SUCCEEDED","result":' .. result .. '}'
  if i == 3 then
    redis.call('XADD', results, 'MAXLEN', '~', ARGV[2], '*', '_watermill_message_uuid', task, 'payload', p)
  else
    redis.call('XADD', results, '*', '_watermill_message_uuid', task, 'payload', p)
  end
  ids[#ids + 1] = ARGV[a]
end
redis.call('XACK', stream, ARGV[1], unpack(ids))
return #ids`)

// floorLoop is one floor child's connection and streams.
type floorLoop struct {
	rdb                           *redis.Client
	stream, results, name, prefix string
	sim                           *model.Sim
}

// repFloorChild runs the floor loop with $FLIGHTDECK_REPORT_SUBS handlers on
// $FLIGHTDECK_REPORT_STREAM until SIGTERM, with the floor's scripts or, in mode
// "floor-scripts", the consumer's flight calls. It prints READY once its group exists.
func repFloorChild(mode string) int {
	debug.SetGCPercent(floorGCPercent)
	opt, err := redis.ParseURL(os.Getenv("REDIS_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	f := &floorLoop{rdb: redisconn.NewClient(opt), stream: os.Getenv(repStreamEnv), results: os.Getenv(repResultsEnv),
		name: os.Getenv(repNameEnv), prefix: os.Getenv(repPrefixEnv), sim: &model.Sim{}}
	defer func() { _ = f.rdb.Close() }()
	slots, err := strconv.Atoi(os.Getenv(repSubsEnv))
	if err != nil || slots <= 0 {
		slots = 8
	}
	if err := f.rdb.XGroupCreateMkStream(ctx, f.stream, topics.ConsumerGroup, "0").Err(); err != nil &&
		!redis.HasErrorPrefix(err, "BUSYGROUP") {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	run, err := floorMode(ctx, f, mode)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("READY")
	for ctx.Err() == nil {
		res, err := f.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: f.name,
			Streams: []string{f.stream, ">"}, Count: int64(slots), Block: time.Second}).Result()
		if errors.Is(err, redis.Nil) {
			continue
		}
		if err == nil && len(res) > 0 {
			err = run.batch(ctx, res[0].Messages)
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	return 0
}

// batch handles one read batch: decode and key, acquire all, call the model of each,
// complete all.
func (f *floorLoop) batch(ctx context.Context, msgs []redis.XMessage) error {
	tasks := make([]topics.Task, len(msgs))
	keys := make([]string, len(msgs))
	owners := make([]any, len(msgs))
	for i, m := range msgs {
		t, key, err := floorDecode(m)
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		tasks[i], keys[i], owners[i] = t, f.prefix+":floor:"+key, t.TaskID
	}
	if err := floorAcquire.EvalSha(ctx, f.rdb, keys, owners...).Err(); err != nil {
		return fmt.Errorf("floor: acquire: %w", err)
	}
	out := make([]json.RawMessage, len(msgs))
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	for i, t := range tasks {
		wg.Go(func() {
			out[i], errs[i] = f.sim.Call(ctx, model.Request{Stage: t.Stage, TaskID: t.TaskID, Tenant: t.Tenant,
				Input: t.Input, Attempt: 1, Consumer: f.name}, func() {})
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("floor: model: %w", err)
	}
	args := make([]any, 0, 2+3*len(msgs))
	args = append(args, topics.ConsumerGroup, topics.DefaultResultMaxLen)
	for i, m := range msgs {
		args = append(args, m.ID, tasks[i].TaskID, []byte(out[i]))
	}
	if err := floorComplete.EvalSha(ctx, f.rdb, append([]string{f.results, f.stream}, keys...), args...).Err(); err != nil {
		return fmt.Errorf("floor: complete: %w", err)
	}
	return nil
}

// floorDecode decodes the task of entry m and derives its flight key, as a consumer does.
func floorDecode(m redis.XMessage) (topics.Task, string, error) {
	payload, _ := m.Values[topics.FieldPayload].(string)
	t, err := topics.DecodeTask([]byte(payload), topics.Limits{})
	if err != nil {
		return topics.Task{}, "", fmt.Errorf("entry %s: %w", m.ID, err)
	}
	key, err := flight.TaskKey(t)
	if err != nil {
		return topics.Task{}, "", fmt.Errorf("entry %s: %w", m.ID, err)
	}
	return t, key, nil
}

// loadScripts loads the floor's two scripts, so that their EVALSHA calls find them.
func (f *floorLoop) loadScripts(ctx context.Context) error {
	for _, s := range []*redis.Script{floorAcquire, floorComplete} {
		if err := s.Load(ctx, f.rdb).Err(); err != nil {
			return fmt.Errorf("floor: %w", err)
		}
	}
	return nil
}
