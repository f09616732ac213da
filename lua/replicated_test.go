package lua_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// TestReplicatedCalls: a replicated call returns how many replicas acknowledged it, through a
// client (lua.Replicating) and through a Batcher. With the replica's link held it answers 0
// after its timeout while a plain call of the same batch returns at once, not waiting for the
// WAIT; concurrent replicated calls share the batch's one WAIT; once the link is released
// they answer 1.
func TestReplicatedCalls(t *testing.T) {
	master := redistest.Start(t, nil)
	_, link := redistest.StartReplica(t, master)
	rdb := master.Client()
	ctx := context.Background()
	if err := rdb.FunctionLoadReplace(ctx, echoLib).Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(rdb.Options())
	h := &countingHook{}
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	b := lua.NewBatcher(c)
	t.Cleanup(func() { _ = b.Close() })
	for name, via := range map[string]lua.ReplicatedCaller{"client": lua.Replicating{Client: rdb}, "batcher": b} {
		if cmd, acked, err := via.FCallReplicated(ctx, time.Second, "echo", []string{"k"}, "x"); cmd.Val() != "x" || acked != 1 || err != nil {
			t.Errorf("%s: %v acked by %d (%v), want x acked by 1", name, cmd.Val(), acked, err)
		}
	}

	link.Hold()
	const timeout = 300 * time.Millisecond
	var wg sync.WaitGroup
	acked := make([]int64, 8)
	start := time.Now()
	before := h.pipelines.Load()
	for i := range acked {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, acked[i], _ = b.FCallReplicated(ctx, timeout, "echo", []string{"k"}, "x")
		}()
	}
	time.Sleep(20 * time.Millisecond) // the replicated calls are out, waiting for the replica
	plainStart := time.Now()
	if v := b.FCall(ctx, "echo", []string{"k"}, "y").Val(); v != "y" {
		t.Errorf("plain call: %v", v)
	}
	if d := time.Since(plainStart); d > timeout/2 {
		t.Errorf("a plain call took %v beside replicated ones waiting for a held replica", d)
	}
	wg.Wait()
	if d := time.Since(start); d < timeout {
		t.Errorf("the replicated calls returned after %v, before their timeout %v", d, timeout)
	}
	for i, n := range acked {
		if n != 0 {
			t.Errorf("call %d acked by %d replicas with the link held", i, n)
		}
	}
	if n := h.pipelines.Load() - before; n > 4 {
		t.Errorf("8 replicated calls and a plain one took %d pipelines, want them to share", n)
	}
	link.Release()
	if _, n, err := b.FCallReplicated(ctx, time.Second, "echo", []string{"k"}, "x"); n != 1 || err != nil {
		t.Errorf("after the release: acked by %d (%v)", n, err)
	}
}

// TestReplicatedCallRefusedWait: a credential that may not run WAIT gets the call's reply, no
// acknowledgement and the refusal itself, not a silent "no replica".
func TestReplicatedCallRefusedWait(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{ACL: []string{"user app on >pw ~* +@all -wait"}})
	ctx := context.Background()
	if err := srv.Client().FunctionLoadReplace(ctx, echoLib).Err(); err != nil {
		t.Fatal(err)
	}
	app := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "app", Password: "pw"})
	t.Cleanup(func() { _ = app.Close() })
	b := lua.NewBatcher(app)
	t.Cleanup(func() { _ = b.Close() })
	for name, via := range map[string]lua.ReplicatedCaller{"client": lua.Replicating{Client: app}, "batcher": b} {
		cmd, n, err := via.FCallReplicated(ctx, 100*time.Millisecond, "echo", []string{"k"}, "x")
		if cmd.Val() != "x" || n != 0 || err == nil || !strings.Contains(err.Error(), "NOPERM") {
			t.Errorf("%s: %v acked by %d, WAIT error %v; want x, 0, NOPERM", name, cmd.Val(), n, err)
		}
	}
}
