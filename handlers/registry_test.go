package handlers_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestStageRegistry: a consumer registers its stages at start, refreshes lastSeen on its
// liveness beats, and the entries stay after it stopped.
func TestStageRegistry(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	stop := b.consumer("reg-1", func(c *handlers.Config) {
		c.Stages[1].Partitions = 3
		c.Stages[1].Mode = "DISTRIBUTED_ONLY"
	})
	read := func() map[string]topics.StageInfo {
		t.Helper()
		st, now, err := broker.ReadStages(ctx, b.r.Client, b.ks)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]topics.StageInfo{}
		for _, s := range st {
			if s.LastSeen > now || now-s.LastSeen > 5000 {
				t.Errorf("stage %s lastSeen %d, Redis time %d", s.Name, s.LastSeen, now)
			}
			out[s.Name] = s
		}
		return out
	}
	first := read()
	want := map[string]topics.StageInfo{
		"interview-evaluation": {Name: "interview-evaluation", Partitions: 1, Mode: "HYBRID", Model: "sim", Consumer: "reg-1"},
		"interview-followup":   {Name: "interview-followup", Partitions: 3, Mode: "DISTRIBUTED_ONLY", Model: "sim", Consumer: "reg-1"},
	}
	if len(first) != len(want) {
		t.Fatalf("registry = %+v, want %+v", first, want)
	}
	for name, w := range want {
		got := first[name]
		w.LastSeen = got.LastSeen
		if got != w {
			t.Errorf("stage %s = %+v, want %+v", name, got, w)
		}
	}
	// The liveness beats (every 200 ms) move lastSeen on.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		again := read()
		if again["interview-evaluation"].LastSeen > first["interview-evaluation"].LastSeen {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lastSeen did not advance on the liveness beats in 10 s: %d, then %d",
				first["interview-evaluation"].LastSeen, again["interview-evaluation"].LastSeen)
		}
	}
	stop()
	if after := read(); len(after) != 2 {
		t.Errorf("registry after the consumer stopped = %+v, want both stages kept", after)
	}
}

// TestNameInUse: a consumer started under the name of a live one is refused with
// ErrNameInUse (and the live one runs on); a name whose process stopped gracefully is free at
// once; a name whose process died without stopping (a recent beat that never advances) is
// free once the liveness timeout has passed since that beat.
func TestNameInUse(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	stop := b.consumer("dup", nil)

	// Refused (not waited for until the deadline of run: the live beat advances).
	err := b.run("dup", 10*time.Second)
	if !errors.Is(err, handlers.ErrNameInUse) {
		t.Fatalf("second consumer named dup: %v, want ErrNameInUse", err)
	}
	if beat := b.r.Client.HGet(ctx, b.ks.Consumers(topics.ConsumerGroup), "dup").Val(); beat == "" {
		t.Error("the refused consumer removed the live one's liveness entry")
	}

	// A graceful stop frees the name at once: it removes the process's liveness field, so the
	// next start finds no beat to watch.
	stop()
	if n := b.r.Client.HExists(ctx, b.ks.Consumers(topics.ConsumerGroup), "dup").Val(); n {
		t.Error("a graceful stop left its liveness field")
	}
	stop = b.consumer("dup", nil)
	stop()

	// A dead process: its last beat is recent and never advances. The name is free only once
	// the liveness timeout (3 beats of 200 ms) has passed since that beat, by Redis's clock.
	beat := b.r.Client.Time(ctx).Val().UnixMilli()
	b.r.Client.HSet(ctx, b.ks.Consumers(topics.ConsumerGroup), "dead", beat)
	stop = b.consumer("dead", nil)
	if now := b.r.Client.Time(ctx).Val().UnixMilli(); now-beat < 600 {
		t.Errorf("started under a dead process's name %d ms after its last beat; want at least the liveness timeout (600 ms)", now-beat)
	}
	stop()
}

// run runs a consumer named name until it returns or timeout passes, and returns its error.
func (b *bundle) run(name string, timeout time.Duration) error {
	b.t.Helper()
	stages, err := handlers.LoadStages("", []string{"interview-evaluation"})
	if err != nil {
		b.t.Fatal(err)
	}
	log := zerolog.Nop()
	c, err := handlers.NewConsumer(handlers.Config{NewClient: redisconn.Factory(b.r.Client.Options()),
		Keyspace: b.ks, Name: name, Stages: stages, Logger: &log, LivenessInterval: 200 * time.Millisecond, SpoolDir: b.t.TempDir()})
	if err != nil {
		b.t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, timeout)
	defer cancel()
	return c.Run(ctx)
}

// logSink is a goroutine-safe log writer a test reads back.
type logSink struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *logSink) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }

func (s *logSink) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestOtherModelOnAStageIsNamed: a consumer that serves a stage with a handler, beside a
// consumer that serves it with the simulated model, splits the stage's tasks with it; each
// says so once in a warning naming the other consumer and its model. Consumers of one model
// say nothing.
func TestOtherModelOnAStageIsNamed(t *testing.T) {
	b := setup(t)
	logs := map[string]*logSink{}
	start := func(name string, handler bool) {
		sink := &logSink{}
		logs[name] = sink
		b.consumer(name, func(c *handlers.Config) {
			log := zerolog.New(sink).Level(zerolog.WarnLevel)
			c.Logger = &log
			if handler {
				mux := handlers.NewMux()
				mux.HandleFunc("interview-evaluation", func(context.Context, handlers.Request, handlers.ProgressFunc) (json.RawMessage, error) {
					return json.RawMessage(`1`), nil
				})
				c.Handlers = mux
			}
		})
	}
	start("sim-1", false)
	start("sim-2", false)
	start("custom", true)
	const msg = "another consumer serves this stage with another model"
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) && !(strings.Contains(logs["custom"].String(), msg) && strings.Contains(logs["sim-1"].String()+logs["sim-2"].String(), msg)) {
		time.Sleep(50 * time.Millisecond)
	}
	if got := logs["custom"].String(); strings.Count(got, msg) == 0 || !strings.Contains(got, `"otherModel":"sim"`) {
		t.Errorf("the custom consumer did not name the sim consumers: %s", got)
	}
	if got := logs["sim-1"].String() + logs["sim-2"].String(); !strings.Contains(got, `"otherModel":"handler"`) || !strings.Contains(got, `"otherConsumer":"custom"`) {
		t.Errorf("the sim consumers did not name the custom one: %s", got)
	}
	time.Sleep(time.Second) // five more beats: the warning is not repeated
	if n := strings.Count(logs["custom"].String(), msg); n > 2 {
		t.Errorf("the custom consumer warned %d times, want once per other consumer", n)
	}
	for _, name := range []string{"sim-1", "sim-2"} {
		if strings.Contains(logs[name].String(), `"otherConsumer":"sim-`) {
			t.Errorf("%s warned about a consumer of its own model: %s", name, logs[name].String())
		}
	}
}
