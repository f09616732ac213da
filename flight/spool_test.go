package flight_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/filelock"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestRestoreTable has one row per rule of the write-back (complete.lua, restore side).
func TestRestoreTable(t *testing.T) {
	b := setup(t)
	restore := func(key string, token int64) (flight.Settlement, error) {
		return b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Tenant: "acme", Key: key, Token: token,
			Result: []byte(`"restored"`), ResultTTL: b.pol.ResultTTL})
	}
	type want struct {
		err      error         // sentinel, or nil when the result is written (or was already)
		events   int           // events the write-back wrote
		status   flight.Status // after the call
		owner    string        // meta ownerId after the call
		attempts int
		result   string // stored result after the call ("" = none)
	}
	rows := []struct {
		name    string
		arrange func(key string) int64 // returns the token to restore with
		want    want
	}{{
		name: "same token RUNNING/written, parked tasks answered",
		arrange: func(key string) int64 {
			d, _ := b.own(key)
			b.acquire(key, "C", b.task("tc"))
			b.acquire(key, "D", b.task("td"))
			return d.Token
		},
		want: want{events: 2, status: flight.StatusSucceeded, owner: "A", attempts: 1, result: `"restored"`},
	}, {
		name:    "same token PENDING/written",
		arrange: func(key string) int64 { return b.acquire(key, "A", b.task("ta")).Token },
		want:    want{status: flight.StatusSucceeded, owner: "A", attempts: 1, result: `"restored"`},
	}, {
		name: "same token EXPIRED by its own heartbeat/written",
		arrange: func(key string) int64 {
			d, _ := b.own(key)
			b.set(key, "status", "EXPIRED", "errorCode", "running_ttl")
			return d.Token
		},
		want: want{status: flight.StatusSucceeded, owner: "A", attempts: 1, result: `"restored"`},
	}, {
		name: "other token RUNNING/ErrStaleToken, nothing written",
		arrange: func(key string) int64 {
			d, _ := b.own(key)
			return d.Token - 1
		},
		want: want{err: flight.ErrStaleToken, status: flight.StatusRunning, owner: "A", attempts: 1},
	}, {
		name: "same token FAILED/StateError, nothing written",
		arrange: func(key string) int64 {
			d, _ := b.own(key)
			if _, err := b.c.Fail(b.ctx, *d.Owner, flight.Failure{Type: "bad_request", Code: "400"}, 0); err != nil {
				t.Fatal(err)
			}
			return d.Token
		},
		want: want{err: &flight.StateError{}, status: flight.StatusFailed, owner: "A", attempts: 1},
	}, {
		name: "same token CANCELLED/ErrCancelled, nothing written",
		arrange: func(key string) int64 {
			d, _ := b.own(key)
			if _, err := b.c.Cancel(b.ctx, key, "user", cancelParams()); err != nil {
				t.Fatal(err)
			}
			return d.Token
		},
		want: want{err: flight.ErrCancelled, status: flight.StatusCancelled, owner: "A", attempts: 1},
	}, {
		name: "same token SUCCEEDED/accepted again, the stored result stays",
		arrange: func(key string) int64 {
			d, _ := b.own(key)
			if _, err := b.complete(*d.Owner, `"first"`); err != nil {
				t.Fatal(err)
			}
			return d.Token
		},
		want: want{status: flight.StatusSucceeded, owner: "A", attempts: 1, result: `"first"`},
	}}
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			key := "restore-" + strconv.Itoa(i)
			token := row.arrange(key)
			st, err := restore(key, token)
			var se *flight.StateError
			switch {
			case row.want.err == nil && err != nil,
				row.want.err != nil && errors.As(row.want.err, &se) && !errors.As(err, &se),
				row.want.err != nil && !errors.As(row.want.err, &se) && !errors.Is(err, row.want.err):
				t.Fatalf("Restore err = %v, want %v", err, row.want.err)
			}
			if st.Events != row.want.events {
				t.Errorf("events = %d, want %d", st.Events, row.want.events)
			}
			m := b.get(key)
			if m.Status != row.want.status || m.OwnerID != row.want.owner || m.Attempts != row.want.attempts {
				t.Errorf("meta = %s owner %q attempts %d, want %s owner %q attempts %d",
					m.Status, m.OwnerID, m.Attempts, row.want.status, row.want.owner, row.want.attempts)
			}
			res, err := b.c.Result(b.ctx, key)
			if err != nil && !errors.Is(err, flight.ErrNotFound) {
				t.Fatal(err)
			}
			if got := string(res); got != row.want.result {
				t.Errorf("stored result = %q, want %q", got, row.want.result)
			}
			if row.want.err == nil {
				near(t, "meta", m.MetaTTL, b.pol.ResultTTL)
				near(t, "result", m.ResultTTL, b.pol.ResultTTL)
				if m.OwnerToken != token || m.ResultRef != b.ks.Flight(key) || m.Error != "" {
					t.Errorf("meta token %d ref %q error %q, want %d %q none",
						m.OwnerToken, m.ResultRef, m.Error, token, b.ks.Flight(key))
				}
			}
		})
	}

	t.Run("meta absent/written, fence raised", func(t *testing.T) {
		key := "restore-absent"
		// A token from the future (as if the lost Redis's clock ran ahead): only the fence
		// keeps later tokens above it.
		token := (b.now() + 3_600_000) * 1000
		before := b.now()
		st, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Tenant: "acme", Key: key, Token: token,
			OwnerID: "A", Attempts: 2, Result: []byte(`{"score":9}`), ResultTTL: b.pol.ResultTTL})
		if err != nil || !st.Restored {
			t.Fatal(st, err)
		}
		m := b.get(key)
		wantFields := map[string]string{
			"status": "SUCCEEDED", "stage": testStage, "tenant": "acme", "sessionId": "",
			"requestKey": key, "ownerId": "A", "ownerToken": strconv.FormatInt(token, 10), "taskId": "",
			"attempts": "2", "resultRef": b.ks.Flight(key), "retryable": "", "errorType": "",
			"errorCode": "", "error": "",
		}
		for f, want := range wantFields {
			if got := m.Fields[f]; got != want {
				t.Errorf("meta %s = %q, want %q", f, got, want)
			}
		}
		for _, f := range []string{"createdAt", "updatedAt", "heartbeatAt", "startedAt", "restoredAt"} {
			v, err := strconv.ParseInt(m.Fields[f], 10, 64)
			if err != nil || v < before || v > b.now() {
				t.Errorf("meta %s = %q, want Redis now", f, m.Fields[f])
			}
		}
		near(t, "meta", m.MetaTTL, b.pol.ResultTTL)
		near(t, "result", m.ResultTTL, b.pol.ResultTTL)
		fence, err := b.rdb.Get(b.ctx, b.ks.Fence(key)).Int64()
		if err != nil || fence < token {
			t.Errorf("fence = %d (%v), want >= %d", fence, err, token)
		}
		if m.FenceTTL < b.pol.ResultTTL {
			t.Errorf("fence TTL = %v, want at least resultTTL %v", m.FenceTTL, b.pol.ResultTTL)
		}

		d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "B", Task: b.task("tb"), WantResult: true})
		if d.Action != flight.ActionResultHit || string(d.Result) != `{"score":9}` || d.Token != token {
			t.Fatalf("acquire after restore = %+v, want RESULT_HIT with the restored result", d)
		}
		// Once the flight is gone again, the next owner's token still exceeds the restored one.
		b.rdb.Del(b.ctx, b.ks.Flight(key))
		d = b.acquire(key, "B", b.task("tb2"))
		if d.Action != flight.ActionOwner || d.Token <= token {
			t.Fatalf("acquire = %+v, want OWNER with a token above %d", d, token)
		}
	})

	t.Run("meta absent, fence ahead/refused", func(t *testing.T) {
		key := "restore-fence-ahead"
		ahead := (b.now() + 7_200_000) * 1000
		if err := b.rdb.Set(b.ctx, b.ks.Fence(key), ahead, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Key: key, Token: ahead - 5, Result: []byte("x")}); !errors.Is(err, flight.ErrStaleToken) {
			t.Fatalf("a token below the fence: %v", err)
		}
		if got, _ := b.rdb.Get(b.ctx, b.ks.Fence(key)).Int64(); got != ahead {
			t.Errorf("fence = %d, want %d (never lowered)", got, ahead)
		}
	})

	t.Run("invalid key/ErrInvalidKey", func(t *testing.T) {
		if _, err := b.c.Restore(b.ctx, flight.Outcome{Key: "a{b}", Token: 1}); !errors.Is(err, flight.ErrInvalidKey) {
			t.Errorf("err = %v, want ErrInvalidKey", err)
		}
	})
}

// tokenBase makes test tokens look like real ones (microseconds of their issue time): a
// write-back of a token older than the fence's lifetime is refused when no fence is left.
var tokenBase = time.Now().UnixMicro()

// spoolOutcome is the i-th test outcome; token is an offset from tokenBase.
func spoolOutcome(i int, token int64) flight.Outcome {
	return flight.Outcome{
		Stage: "interview-evaluation", Tenant: "acme", Key: "spool-" + strconv.Itoa(i), Token: tokenBase + token,
		Result: []byte(fmt.Sprintf(`{"n":%d}`, i)), ResultTTL: 10 * time.Minute, RunningTTL: time.Hour,
		FailureTTL: 2 * time.Minute,
		At:         time.Date(2026, 1, 2, 3, 4, 5, 6000, time.UTC),
	}
}

func openSpool(t *testing.T, path string) *flight.Spool {
	t.Helper()
	sp, err := flight.OpenSpool(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sp.Close() })
	return sp
}

func TestSpoolReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "a", "b", "outcomes.jsonl")
	sp := openSpool(t, path)
	var want []flight.Outcome
	for i := range 3 {
		o := spoolOutcome(i, int64(100+i))
		if err := sp.Add(o); err != nil {
			t.Fatal(err)
		}
		want = append(want, o)
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sp.Add(spoolOutcome(9, 1)); !errors.Is(err, os.ErrClosed) {
		t.Errorf("Add after Close: err = %v, want os.ErrClosed", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("file mode = %v, want 0600", fi.Mode().Perm())
	}

	sp2 := openSpool(t, path)
	if sp2.Len() != 3 || sp2.Skipped() != 0 {
		t.Fatalf("reopened: Len %d Skipped %d, want 3 0", sp2.Len(), sp2.Skipped())
	}
	if diff := cmp.Diff(want, sp2.Pending()); diff != "" {
		t.Errorf("Pending (-want +got):\n%s", diff)
	}
}

func TestSpoolRejectsBadOutcomes(t *testing.T) {
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	for name, o := range map[string]flight.Outcome{
		"empty key":     {Token: 1},
		"braces":        {Key: "a{b}", Token: 1},
		"zero token":    {Key: "k"},
		"sub-ms TTL":    {Key: "k", Token: 1, ResultTTL: time.Microsecond},
		"negative TTL":  {Key: "k", Token: 1, ResultTTL: -time.Second},
		"negative tok.": {Key: "k", Token: -3},
	} {
		if err := sp.Add(o); err == nil {
			t.Errorf("%s: Add accepted %+v", name, o)
		}
	}
	if sp.Len() != 0 {
		t.Errorf("Len = %d, want 0", sp.Len())
	}
}

func TestSpoolSkipsCorruptLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.jsonl")
	sp := openSpool(t, path)
	for i := range 3 {
		if err := sp.Add(spoolOutcome(i, int64(100+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := sp.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of the last write: the line is cut short, without its newline.
	if err := os.WriteFile(path, data[:len(data)-15], 0o600); err != nil {
		t.Fatal(err)
	}

	sp2 := openSpool(t, path)
	if sp2.Len() != 2 || sp2.Skipped() != 1 {
		t.Fatalf("Len %d Skipped %d, want 2 1", sp2.Len(), sp2.Skipped())
	}
	// The next line must not glue onto the torn one.
	if err := sp2.Add(spoolOutcome(3, 103)); err != nil {
		t.Fatal(err)
	}
	if err := sp2.Close(); err != nil {
		t.Fatal(err)
	}
	// Garbage in the middle is skipped too.
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString("not json\n{\"v\":1,\"key\":\"\",\"token\":1}\n"); err != nil {
		t.Fatal(err)
	}
	_ = f.Close()
	sp3 := openSpool(t, path)
	if sp3.Add(spoolOutcome(4, 104)) != nil {
		t.Fatal("add")
	}
	var keys []string
	for _, o := range sp3.Pending() {
		keys = append(keys, o.Key)
	}
	if diff := cmp.Diff([]string{"spool-0", "spool-1", "spool-3", "spool-4"}, keys); diff != "" {
		t.Errorf("pending keys (-want +got):\n%s", diff)
	}
	if sp3.Skipped() != 3 {
		t.Errorf("Skipped = %d, want 3", sp3.Skipped())
	}
}

// spoolRedis is a private Redis that a test can stop, with a coordinator whose client honours
// context deadlines and dials once per attempt, so that calls against a stopped Redis fail fast.
type spoolRedis struct {
	srv *redistest.Server
	rdb *redis.Client
	c   *flight.Coordinator
}

func newSpoolRedis(t *testing.T) *spoolRedis {
	t.Helper()
	srv := redistest.Start(t, nil)
	rdb := redisconn.NewClient(&redis.Options{Addr: srv.Addr(), DialerRetries: 1})
	t.Cleanup(func() { _ = rdb.Close() })
	c, err := flight.NewCoordinator(flight.Config{Client: rdb, Keyspace: topics.Keyspace{Prefix: redistest.Prefix()}})
	if err != nil {
		t.Fatal(err)
	}
	return &spoolRedis{srv: srv, rdb: rdb, c: c}
}

func TestSpoolFlushKeepsOutcomesWhileRedisIsDown(t *testing.T) {
	r := newSpoolRedis(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	sp := openSpool(t, path)
	for i := range 3 {
		if err := sp.Add(spoolOutcome(i, int64(100+i))); err != nil {
			t.Fatal(err)
		}
	}

	r.srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	rep, err := sp.Flush(ctx, r.c)
	t.Logf("flush against a stopped Redis took %v: %v", time.Since(start), err)
	if err == nil {
		t.Fatal("Flush with Redis down: no error")
	}
	if errors.Is(err, flight.ErrStaleToken) {
		t.Errorf("err = %v, want connection errors only", err)
	}
	if j, ok := err.(interface{ Unwrap() []error }); !ok || len(j.Unwrap()) != 1 {
		t.Errorf("err = %v, want the first connection error only (the rest are not tried)", err)
	}
	if diff := cmp.Diff(flight.FlushReport{Kept: 3}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if sp.Len() != 3 {
		t.Fatalf("Len = %d after a failed flush, want 3", sp.Len())
	}
	if n := openReadOnlyLen(t, path); n != 3 {
		t.Fatalf("file holds %d outcomes, want 3", n)
	}

	r.srv.Restart()
	rep, err = sp.Flush(context.Background(), r.c)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(flight.FlushReport{Written: 3}, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if sp.Len() != 0 {
		t.Errorf("Len = %d, want 0", sp.Len())
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Errorf("file after flush: %v, %v; want empty", fi.Size(), err)
	}
	for i := range 3 {
		o := spoolOutcome(i, 0)
		got, err := r.c.Result(context.Background(), o.Key)
		if err != nil || string(got) != string(o.Result) {
			t.Errorf("Result(%s) = %q, %v; want %q", o.Key, got, err, o.Result)
		}
	}
	// The spool still appends after its file was replaced.
	if err := sp.Add(spoolOutcome(7, 7)); err != nil {
		t.Fatal(err)
	}
	if n := openReadOnlyLen(t, path); n != 1 {
		t.Errorf("file holds %d outcomes after a new Add, want 1", n)
	}
}

// openReadOnlyLen counts the outcomes a fresh OpenSpool loads from path, the way the next
// process would. It copies the file first so that two Spools never share it.
func openReadOnlyLen(t *testing.T, path string) int {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(t.TempDir(), "copy.jsonl")
	if err := os.WriteFile(cp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	sp := openSpool(t, cp)
	return sp.Len()
}

func TestSpoolFlushSettlesRefusedAndAnswersParked(t *testing.T) {
	b := setup(t)
	sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
	// written, with a parked follower and the owner's own task
	d, ta := b.own("k-parked")
	tc := b.task("tc")
	b.acquire("k-parked", "C", tc)
	// refused: another owner's result is there
	d2, _ := b.own("k-done")
	if _, err := b.complete(*d2.Owner, `"theirs"`); err != nil {
		t.Fatal(err)
	}
	// refused: a newer owner took over
	d3, _ := b.own("k-stale")
	for _, o := range []flight.Outcome{
		{Key: "k-parked", Token: d.Token, Task: ta, Result: []byte(`"mine"`)},
		{Key: "k-done", Token: d2.Token - 1, Result: []byte(`"mine"`)},
		{Key: "k-stale", Token: d3.Token - 1, Result: []byte(`"mine"`)},
	} {
		o.Stage = testStage
		if err := sp.Add(o); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil {
		t.Fatal(err)
	}
	want := flight.FlushReport{Written: 1, Refused: 2, Answered: 2}
	if diff := cmp.Diff(want, rep); diff != "" {
		t.Errorf("report (-want +got):\n%s", diff)
	}
	if sp.Len() != 0 {
		t.Errorf("Len = %d, want 0", sp.Len())
	}
	for _, tk := range []flight.Task{ta, tc} {
		if h := b.holder(tk); h != "" {
			t.Errorf("%s still pending under %q after the write-back", tk.ID, h)
		}
	}
	if got, _ := b.c.Result(b.ctx, "k-done"); string(got) != `"theirs"` {
		t.Errorf("k-done result = %q, want theirs", got)
	}
	if m := b.get("k-stale"); m.Status != flight.StatusRunning {
		t.Errorf("k-stale status = %s, want RUNNING", m.Status)
	}
}

// TestSpoolConcurrentAddAndFlush adds from many goroutines while Flush runs; no outcome is lost.
func TestSpoolConcurrentAddAndFlush(t *testing.T) {
	b := setup(t)
	path := filepath.Join(t.TempDir(), "s.jsonl")
	sp := openSpool(t, path)
	const n = 40
	var wg sync.WaitGroup
	written := 0
	var mu sync.Mutex
	for i := range n {
		wg.Go(func() {
			if err := sp.Add(spoolOutcome(i, int64(1000+i))); err != nil {
				t.Error(err)
			}
		})
		if i%10 == 0 {
			wg.Go(func() {
				rep, err := sp.Flush(b.ctx, b.c)
				if err != nil {
					t.Error(err)
				}
				mu.Lock()
				written += rep.Written
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	rep, err := sp.Flush(b.ctx, b.c)
	if err != nil {
		t.Fatal(err)
	}
	written += rep.Written
	if written != n || sp.Len() != 0 {
		t.Errorf("written %d, Len %d; want %d, 0", written, sp.Len(), n)
	}
	if k := openReadOnlyLen(t, path); k != 0 {
		t.Errorf("file holds %d outcomes, want 0", k)
	}
	for i := range n {
		if _, err := b.c.Result(b.ctx, spoolOutcome(i, 0).Key); err != nil {
			t.Errorf("outcome %d: %v", i, err)
		}
	}
}

// TestSpoolUncertainOutcomeStory is DESIGN.md section 6's last row end to end: the model
// answered, Redis died before the result was written, and came back empty.
func TestSpoolUncertainOutcomeStory(t *testing.T) {
	r := newSpoolRedis(t)
	ctx := context.Background()
	pol := flight.Policy{ResultTTL: 10 * time.Minute}
	sp := openSpool(t, filepath.Join(t.TempDir(), "spool", "outcomes.jsonl"))
	const key = "story"
	acq := flight.AcquireParams{Key: key, OwnerID: "A", Task: flight.Task{ID: "ta"}, Stage: "interview-evaluation",
		Tenant: "acme", Policy: pol, Start: true, WantResult: true}

	d, err := r.c.Acquire(ctx, acq)
	if err != nil || d.Action != flight.ActionOwner {
		t.Fatalf("acquire = %+v, %v", d, err)
	}
	result := []byte(`{"score":8,"summary":"solid"}`) // the model answered

	r.srv.Stop()
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	_, err = r.c.Complete(cctx, *d.Owner, result, 0)
	cancel()
	if err == nil || errors.Is(err, flight.ErrStaleToken) {
		t.Fatalf("Complete with Redis down: err = %v, want a connection error", err)
	}
	if err := sp.Add(flight.Outcome{Stage: acq.Stage, Tenant: acq.Tenant, Key: key, Token: d.Token,
		Result: result, ResultTTL: pol.ResultTTL, At: time.Now()}); err != nil {
		t.Fatal(err)
	}

	r.srv.Restart() // without persistence: the flight's meta is gone
	if _, err := r.c.Get(ctx, key); !errors.Is(err, flight.ErrNotFound) {
		t.Fatalf("Get after restart: %v, want ErrNotFound", err)
	}
	rep, err := sp.Flush(ctx, r.c)
	if err != nil || rep.Written != 1 || sp.Len() != 0 {
		t.Fatalf("Flush = %+v, %v; Len %d", rep, err, sp.Len())
	}

	acq.OwnerID, acq.Task = "B", flight.Task{ID: "tb"}
	d2, err := r.c.Acquire(ctx, acq)
	if err != nil {
		t.Fatal(err)
	}
	if d2.Action != flight.ActionResultHit || string(d2.Result) != string(result) || d2.Token != d.Token {
		t.Errorf("acquire after flush = %+v, want RESULT_HIT with the spooled result", d2)
	}
}

// TestSpoolDir: a spool in a directory is held by one process at a time, and the spools that
// dead processes left there are adopted by the next one to open the directory, whatever its
// name, so a restart never strands an uncertain outcome.
func TestSpoolDir(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "spool")
	a, err := flight.OpenSpoolDir(dir, "host-1")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := a.Add(spoolOutcome(i, int64(i))); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := flight.OpenSpoolDir(dir, "host-1"); !errors.Is(err, flight.ErrSpoolInUse) {
		t.Errorf("a second holder of the same name: %v, want ErrSpoolInUse", err)
	}
	live, err := flight.OpenSpoolDir(dir, "host-2")
	if err != nil {
		t.Fatal(err)
	}
	if live.Len() != 0 || live.Adopted() != 0 {
		t.Errorf("the spool of a live process was adopted: %d", live.Len())
	}
	if err := live.Add(spoolOutcome(7, 7)); err != nil {
		t.Fatal(err)
	}
	// host-1 dies with three outcomes spooled (Close keeps a spool's files while it holds any).
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	next, err := flight.OpenSpoolDir(dir, "host-3")
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if next.Len() != 3 || next.Adopted() != 3 {
		t.Errorf("adopted %d (Len %d), want host-1's 3 (not live host-2's)", next.Adopted(), next.Len())
	}
	if _, err := os.Stat(filepath.Join(dir, "spool-host-1.jsonl")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the adopted file is still there: %v", err)
	}
	// The adopted outcomes are durable in the adopter's own file.
	if n := openReadOnlyLen(t, filepath.Join(dir, "spool-host-3.jsonl")); n != 3 {
		t.Errorf("adopter's file holds %d outcomes, want 3", n)
	}
	if err := live.Close(); err != nil {
		t.Fatal(err)
	}
	// A clean process that spooled nothing leaves nothing behind.
	empty, err := flight.OpenSpoolDir(dir, "host-4")
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Close()
	if empty.Adopted() != 1 {
		t.Errorf("host-2's outcome not adopted after it stopped: %d", empty.Adopted())
	}
	if def := flight.DefaultSpoolDir(func(k string) string {
		return map[string]string{"HOME": "/home/u"}[k]
	}); def != "/home/u/.local/state/flightdeck/spool" {
		t.Errorf("default dir %q", def)
	}
	if def := flight.DefaultSpoolDir(func(k string) string {
		return map[string]string{"HOME": "/home/u", "FLIGHTDECK_SPOOL_DIR": "/var/lib/fd"}[k]
	}); def != "/var/lib/fd" {
		t.Errorf("dir from the environment %q", def)
	}
}

// TestOwnershipOutcome: the uncertain outcome of a run carries its owner's policy durations,
// so that its write-back keeps the owner's fence TTL (TestPinnedFenceTTL, "written back").
func TestOwnershipOutcome(t *testing.T) {
	pol := flight.Policy{RunningTTL: time.Hour, FailureTTL: 30 * time.Minute, ResultTTL: 5 * time.Minute}
	o := flight.Ownership{Key: "k", Token: 7, Attempts: 2, OwnerID: "c1", Stage: "s", Tenant: "acme",
		Task: flight.Task{ID: "t1"}, Policy: pol}
	oc := o.Outcome([]byte(`1`))
	if oc.RunningTTL != time.Hour || oc.FailureTTL != 30*time.Minute || oc.ResultTTL != 5*time.Minute ||
		oc.Key != "k" || oc.Token != 7 || oc.Attempts != 2 || oc.OwnerID != "c1" || oc.Task.ID != "t1" ||
		oc.Stage != "s" || oc.Tenant != "acme" || string(oc.Result) != "1" || oc.At.IsZero() {
		t.Errorf("outcome %+v", oc)
	}
}

// TestSpoolTrust: a spool is written back to Redis as this process's own outcomes, so nothing
// another user could have written is adopted: no shared fallback directory, no directory
// others may write, no symbolic links, and no token the scripts could not fence.
func TestSpoolTrust(t *testing.T) {
	t.Run("NoFallbackDirectory", func(t *testing.T) {
		if def := flight.DefaultSpoolDir(func(string) string { return "" }); def != "" {
			t.Fatalf("with HOME and XDG_STATE_HOME unset: %q, want none", def)
		}
		if _, err := flight.OpenSpoolDir("", "c1"); !errors.Is(err, flight.ErrNoSpoolDir) {
			t.Fatalf("no directory: %v, want ErrNoSpoolDir", err)
		}
	})
	t.Run("OneDirectoryPerDeployment", func(t *testing.T) {
		for prefix, want := range map[string]string{"acme": "/s/acme", "": "/s/ai", "ai": "/s/ai",
			"a/b": "/s/a_b", "..": "/s/_..", "t1:ai": "/s/t1_ai"} {
			if got := flight.DeploymentSpoolDir("/s", prefix, ""); got != want {
				t.Errorf("DeploymentSpoolDir(%q) = %q, want %q", prefix, got, want)
			}
		}
		// The Redis a deployment serves is part of its directory: the same prefix on two
		// servers gets two directories, the same pair one.
		seen := map[string]string{}
		for _, id := range []string{"10.0.0.1:6379/0", "10.0.0.2:6379/0", "10.0.0.1:6379/1", "10.0.0.1_6379/0",
			"sentinel/mymaster/0", "cluster/10.0.0.1:7000,10.0.0.2:7000"} {
			dir := flight.DeploymentSpoolDir("/s", "ai", id)
			if prev, dup := seen[dir]; dup {
				t.Errorf("%q and %q share the directory %s", prev, id, dir)
			}
			seen[dir] = id
			if filepath.Dir(dir) != "/s" || !strings.HasPrefix(filepath.Base(dir), "ai@") || dir != flight.DeploymentSpoolDir("/s", "ai", id) {
				t.Errorf("DeploymentSpoolDir(ai, %q) = %q", id, dir)
			}
		}
	})
	t.Run("DirectoryOthersMayWrite", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spool")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o777); err != nil {
			t.Fatal(err)
		}
		planted := spoolOutcome(1, 1)
		line, _ := json.Marshal(map[string]any{"v": 1, "stage": planted.Stage, "tenant": "beta", "key": planted.Key,
			"token": planted.Token, "result": []byte(`{"forged":true}`), "resultTTLMs": 60000})
		if err := os.WriteFile(filepath.Join(dir, "spool-dead.jsonl"), append(line, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := flight.OpenSpoolDir(dir, "c1")
		if !errors.Is(err, filelock.ErrUnsafe) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "0777") {
			t.Fatalf("a spool directory others may write: %v, want ErrUnsafe naming it and its mode", err)
		}
	})
	t.Run("SymlinkedFiles", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "spool")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		elsewhere := filepath.Join(t.TempDir(), "victim")
		if err := os.Symlink(elsewhere, filepath.Join(dir, "spool-c1.jsonl")); err != nil {
			t.Fatal(err)
		}
		if _, err := flight.OpenSpoolDir(dir, "c1"); !errors.Is(err, filelock.ErrUnsafe) {
			t.Fatalf("a symlinked spool file: %v, want ErrUnsafe", err)
		}
		if _, err := os.Lstat(elsewhere); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the link's target was created: %v", err)
		}
	})
	t.Run("TokenAboveTwoToThe53", func(t *testing.T) {
		o := spoolOutcome(2, 0)
		o.Token = flight.MaxToken + 1
		sp := openSpool(t, filepath.Join(t.TempDir(), "s.jsonl"))
		if err := sp.Add(o); !errors.Is(err, flight.ErrInvalidToken) {
			t.Fatalf("Add with token 2^53+1: %v, want ErrInvalidToken", err)
		}
		// A line that carries one is skipped when the spool is read.
		path := filepath.Join(t.TempDir(), "planted.jsonl")
		line, _ := json.Marshal(map[string]any{"v": 1, "stage": o.Stage, "tenant": o.Tenant, "key": o.Key,
			"token": int64(9e18), "result": []byte(`1`), "resultTTLMs": 60000})
		if err := os.WriteFile(path, append(line, '\n'), 0o600); err != nil {
			t.Fatal(err)
		}
		if sp := openSpool(t, path); sp.Len() != 0 || sp.Skipped() != 1 {
			t.Fatalf("a line with token 9e18: Len %d Skipped %d, want it skipped", sp.Len(), sp.Skipped())
		}
	})
}
