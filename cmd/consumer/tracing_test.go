package main_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/openaitest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/otlptest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// tracedFleet is a fleet of stock consumers that export their spans to an OTLP receiver in
// this test, each consumer with one handler, on a stage that calls an OpenAI-compatible server
// taking latency per call, and a client whose producer spans are recorded here.
type tracedFleet struct {
	*e2e
	recv *otlptest.Receiver
	c    *client.Client
	exp  *tracetest.InMemoryExporter
	env  []string
	cfg  string
	ps   map[string]*proc
}

func newTracedFleet(t *testing.T, latency time.Duration, names ...string) *tracedFleet {
	return newTracedFleetOn(t, openaitest.Config{Latency: latency, CompletionTokens: 30}, names...)
}

// newTracedFleetOn is newTracedFleet with the OpenAI-compatible server's configuration.
func newTracedFleetOn(t *testing.T, provider openaitest.Config, names ...string) *tracedFleet {
	srv := openaitest.Start(t, provider)
	f := &tracedFleet{e2e: newE2E(t), recv: otlptest.Start(t), exp: tracetest.NewInMemoryExporter(), ps: map[string]*proc{}}
	f.stages = limitedStage
	f.cfg = f.stageConfig("stages:\n  " + limitedStage + ":\n    model: openai\n    concurrency: 1\n    lease: 1500ms\n    heartbeatInterval: 250ms\n")
	f.env = []string{"REDIS_URL=" + f.url, "OPENAI_BASE_URL=" + srv.BaseURL(), "OPENAI_MODEL=test-model",
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + f.recv.URL, "OTEL_BSP_SCHEDULE_DELAY=50"}
	for _, n := range names {
		f.start(n)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(f.exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	c, err := client.New(client.Config{Client: f.rdb, Keyspace: f.ks, TracerProvider: tp})
	if err != nil {
		t.Fatal(err)
	}
	f.c = c
	return f
}

// start starts a consumer named name whose spans carry the service name name.
func (f *tracedFleet) start(name string) {
	f.ps[name] = f.startWith(name, append(append([]string(nil), f.env...), "OTEL_SERVICE_NAME="+name), true, "--config", f.cfg)
}

// enqueueTraced enqueues a task of key through the tracing client and returns its producer
// span's trace and span ids.
func enqueueTraced(t *testing.T, c *client.Client, exp *tracetest.InMemoryExporter, id, key string) (traceID, spanID string) {
	t.Helper()
	if _, err := c.Enqueue(context.Background(), topics.Task{TaskID: id, Stage: limitedStage, Tenant: "acme",
		Input: json.RawMessage(`{"prompt":"` + key + `"}`)}); err != nil {
		t.Fatal(err)
	}
	spans := exp.GetSpans()
	last := spans[len(spans)-1]
	return last.SpanContext.TraceID().String(), last.SpanContext.SpanID().String()
}

// waitSpans waits until keep matches at least n received spans, and returns them.
func waitSpans(t *testing.T, recv *otlptest.Receiver, n int, what string, keep func(otlptest.Span) bool) []otlptest.Span {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := recv.Spans(keep)
		if len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d spans: %s; all spans:\n%+v", len(got), n, what, recv.Spans(nil))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestTracingLinksDuplicatesToTheOwnersCall: a task's producer span is the parent of its
// owner's task span in the consumer, under which run the acquire, the model call (with the
// GenAI attributes and the provider's usage) and the complete. Nine duplicates enqueued while
// the call runs go to two other consumers (the owner's one handler is busy), each in its own
// trace, and each of their task spans links to the owner's model-call span. The owner's
// call is held until all nine parked, so that however slowly the other consumers start, the
// owner's handler is still busy when the duplicates arrive.
func TestTracingLinksDuplicatesToTheOwnersCall(t *testing.T) {
	held := make(chan struct{})
	var release sync.Once
	t.Cleanup(func() { release.Do(func() { close(held) }) })
	f := newTracedFleetOn(t, openaitest.Config{CompletionTokens: 30, Hook: func(n int, _ http.ResponseWriter, _ *http.Request) bool {
		if n == 1 {
			<-held
		}
		return false
	}}, "owner-c")
	e, recv, c, exp := f.e2e, f.recv, f.c, f.exp
	ownerTrace, producer := enqueueTraced(t, c, exp, "t0", "same")
	key := keyOf(t, topics.Task{TaskID: "t0", Stage: limitedStage, Tenant: "acme", Input: json.RawMessage(`{"prompt":"same"}`)})
	e.waitOwned([]string{key}, "owner-c", 10*time.Second)
	f.start("dup-a")
	f.start("dup-b")
	dupTraces := map[string]string{}
	want := map[string]bool{"t0": true}
	for i := 1; i <= 9; i++ {
		id := "t" + strconv.Itoa(i)
		tr, _ := enqueueTraced(t, c, exp, id, "same")
		dupTraces[tr] = id
		want[id] = true
	}
	for deadline := time.Now().Add(30 * time.Second); e.rdb.HLen(e.ctx, e.ks.Waiters(key)).Val() < 9; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d of 9 duplicates parked on the owner's flight", e.rdb.HLen(e.ctx, e.ks.Waiters(key)).Val())
		}
	}
	release.Do(func() { close(held) })
	got := e.collect([]string{limitedStage}, want, 30*time.Second)
	e.allSucceeded(got, want)

	// The owner's trace: producer -> task -> acquire, model call, complete.
	task := waitSpans(t, recv, 1, "the owner's task span", func(s otlptest.Span) bool {
		return s.TraceID == ownerTrace && s.Name == "process "+limitedStage && s.ParentID == producer
	})[0]
	if task.Service != "owner-c" || task.Attributes["flightdeck.outcome"] != "owner_SUCCEEDED" || task.Attributes["flightdeck.task.id"] != "t0" {
		t.Errorf("owner's task span %+v", task)
	}
	children := func(name string) otlptest.Span {
		return waitSpans(t, recv, 1, name+" under the owner's task", func(s otlptest.Span) bool {
			return s.TraceID == ownerTrace && s.ParentID == task.SpanID && s.Name == name
		})[0]
	}
	call := children("chat test-model")
	children("flight acquire")
	children("flight complete")
	if call.Attributes["gen_ai.request.model"] != "test-model" || call.Attributes["gen_ai.usage.output_tokens"] != "30" ||
		call.Attributes["gen_ai.usage.input_tokens"] == "" || call.Attributes["gen_ai.operation.name"] != "chat" {
		t.Errorf("model-call span %+v: want the GenAI attributes and the provider's usage", call)
	}

	// Every duplicate: its own trace, its task span linking to the owner's call.
	dups := waitSpans(t, recv, 9, "the duplicates' task spans linking to the owner's call", func(s otlptest.Span) bool {
		if _, ok := dupTraces[s.TraceID]; !ok || s.Name != "process "+limitedStage {
			return false
		}
		for _, l := range s.Links {
			if l.SpanID == call.SpanID && l.TraceID == ownerTrace {
				return true
			}
		}
		return false
	})
	services := map[string]int{}
	for _, s := range dups {
		services[s.Service]++
	}
	if services["owner-c"] != 0 || len(services) == 0 {
		t.Errorf("duplicates' spans by consumer %v: want them on the other consumers", services)
	}
	t.Logf("duplicates by consumer: %v", services)
}

// TestTracingShowsATakeoverAsTwoAttempts: the owner of a task is killed during its model call;
// another consumer takes the flight over after the lease. The task's one trace holds both
// attempts: the first owner's acquire (attempt 1, new) and the second's (attempt 2, takeover)
// with its model call.
func TestTracingShowsATakeoverAsTwoAttempts(t *testing.T) {
	f := newTracedFleet(t, 3*time.Second, "first")
	e, recv, c, exp, ps := f.e2e, f.recv, f.c, f.exp, f.ps
	tr, _ := enqueueTraced(t, c, exp, "k0", "killed")
	key := keyOf(t, topics.Task{TaskID: "k0", Stage: limitedStage, Tenant: "acme", Input: json.RawMessage(`{"prompt":"killed"}`)})
	e.waitOwned([]string{key}, "first", 10*time.Second)
	waitSpans(t, recv, 1, "the first owner's acquire, exported", func(s otlptest.Span) bool {
		return s.TraceID == tr && s.Name == "flight acquire" && s.Service == "first"
	})
	_ = ps["first"].cmd.Process.Signal(syscall.SIGKILL)
	<-ps["first"].done
	f.start("second")
	got := e.collect([]string{limitedStage}, map[string]bool{"k0": true}, 30*time.Second)
	e.allSucceeded(got, map[string]bool{"k0": true})
	acquires := waitSpans(t, recv, 2, "two attempts' acquires in the task's trace", func(s otlptest.Span) bool {
		return s.TraceID == tr && s.Name == "flight acquire" && s.Attributes["flightdeck.action"] == "OWNER"
	})
	attempts := map[string]string{}
	for _, s := range acquires {
		attempts[s.Service] = s.Attributes["flightdeck.attempt"] + " " + s.Attributes["flightdeck.reason"]
	}
	if attempts["first"] != "1 new" || attempts["second"] != "2 takeover" {
		t.Errorf("attempts in the trace: %v, want first: 1 new, second: 2 takeover", attempts)
	}
	waitSpans(t, recv, 1, "the second attempt's model call", func(s otlptest.Span) bool {
		return s.TraceID == tr && s.Name == "chat test-model" && s.Service == "second" && s.Attributes["flightdeck.attempt"] == "2"
	})
}
