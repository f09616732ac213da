package flight_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// bundle is what one test needs: a coordinator on a private key prefix and its Redis.
type bundle struct {
	t   *testing.T
	ctx context.Context
	rdb *redis.Client
	ks  topics.Keyspace
	c   *flight.Coordinator
	pol flight.Policy
}

func setup(t *testing.T) *bundle {
	t.Helper()
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	c, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: ks})
	if err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, ctx: context.Background(), rdb: r.Client, ks: ks, c: c, pol: flight.Policy{
		Lease: 5 * time.Second, RunningTTL: time.Minute, StallTimeout: 0,
		ResultTTL: 10 * time.Minute, FailureTTL: 2 * time.Minute, MaxAttempts: 3,
	}}
}

// now is Redis's clock in Unix ms: the scripts' clock.
func (b *bundle) now() int64 {
	b.t.Helper()
	tm, err := b.rdb.Time(b.ctx).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	return tm.UnixMilli()
}

func (b *bundle) acquire(key, owner, task string) flight.Decision {
	b.t.Helper()
	d, err := b.c.Acquire(b.ctx, flight.AcquireParams{Key: key, OwnerID: owner, TaskID: task,
		Stage: "interview-evaluation", Tenant: "acme", SessionID: "s-1", Policy: b.pol})
	if err != nil {
		b.t.Fatalf("acquire %s: %v", key, err)
	}
	return d
}

// own makes owner A own key with task "ta" and starts the flight.
func (b *bundle) own(key string) flight.Decision {
	b.t.Helper()
	d := b.acquire(key, "A", "ta")
	if d.Action != flight.ActionOwner {
		b.t.Fatalf("own %s: got %+v", key, d)
	}
	if err := b.c.Start(b.ctx, key, d.Token, b.pol); err != nil {
		b.t.Fatalf("start: %v", err)
	}
	return d
}

// set overwrites meta fields; a value "now-5s" is written as Redis time minus 5 seconds.
func (b *bundle) set(key string, fields ...string) {
	b.t.Helper()
	now := b.now()
	args := make([]any, 0, len(fields))
	for i, f := range fields {
		if i%2 == 1 && len(f) > 3 && f[:3] == "now" {
			d, err := time.ParseDuration(f[3:])
			if err != nil {
				b.t.Fatal(err)
			}
			f = strconv.FormatInt(now+d.Milliseconds(), 10)
		}
		args = append(args, f)
	}
	if err := b.rdb.HSet(b.ctx, b.ks.Meta(key), args...).Err(); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bundle) get(key string) flight.Meta {
	b.t.Helper()
	m, err := b.c.Get(b.ctx, key)
	if err != nil {
		b.t.Fatalf("get %s: %v", key, err)
	}
	return m
}

// near asserts that ttl is within 2 s below want (TTLs only count down).
func near(t *testing.T, what string, got, want time.Duration) {
	t.Helper()
	if got > want || got < want-2*time.Second {
		t.Errorf("%s TTL = %v, want about %v", what, got, want)
	}
}

// TestAcquireTable has one row per line of the acquire table of DESIGN.md section 3.
func TestAcquireTable(t *testing.T) {
	b := setup(t)
	type want struct {
		action   flight.Action
		reason   flight.Reason
		status   flight.Status
		attempts int
		newToken bool // the token differs from (and exceeds) the arranged owner's
		owner    string
		result   string
		errCode  string
		parked   []string // Decision.Parked
		stored   []string // parked ids stored after the call (sorted)
		metaTTL  time.Duration
	}
	rows := []struct {
		name    string
		arrange func(key string) flight.Decision // returns the arranged owner's decision
		stall   time.Duration                    // the policy's StallTimeout for the row
		want    want
	}{{
		name:    "none/-/OWNER new",
		arrange: func(string) flight.Decision { return flight.Decision{} },
		want: want{action: flight.ActionOwner, reason: flight.ReasonNew, status: flight.StatusPending,
			attempts: 1, newToken: true, owner: "B", metaTTL: time.Minute + 2*time.Minute},
	}, {
		name: "SUCCEEDED/result present/RESULT_HIT",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.acquire(key, "C", "tc") // parked, not yet released
			if _, err := b.c.Complete(b.ctx, key, d.Token, []byte(`{"score":7}`), b.pol); err != nil {
				t.Fatal(err)
			}
			return d
		},
		want: want{action: flight.ActionResultHit, status: flight.StatusSucceeded, attempts: 1, owner: "A",
			result: `{"score":7}`, parked: []string{"tc"}, stored: []string{"tc"}, metaTTL: 10 * time.Minute},
	}, {
		name: "SUCCEEDED/result gone/OWNER result_lost",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			if _, err := b.c.Complete(b.ctx, key, d.Token, []byte(`1`), b.pol); err != nil {
				t.Fatal(err)
			}
			b.rdb.Del(b.ctx, b.ks.Result(key))
			return d
		},
		want: want{action: flight.ActionOwner, reason: flight.ReasonResultLost, status: flight.StatusPending,
			attempts: 1, newToken: true, owner: "B", metaTTL: 3 * time.Minute},
	}, {
		name: "FAILED/retryable, attempts left/OWNER retry",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			if _, err := b.c.Fail(b.ctx, key, d.Token, flight.Failure{Retryable: true, Type: "timeout", Code: "t"}, b.pol); err != nil {
				t.Fatal(err)
			}
			return d
		},
		want: want{action: flight.ActionOwner, reason: flight.ReasonRetry, status: flight.StatusPending,
			attempts: 2, newToken: true, owner: "B", stored: []string{"ta"}, metaTTL: 3 * time.Minute},
	}, {
		name: "FAILED/not retryable/FAILED_FINAL",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			if _, err := b.c.Fail(b.ctx, key, d.Token, flight.Failure{Type: "bad_request", Code: "400"}, b.pol); err != nil {
				t.Fatal(err)
			}
			return d
		},
		want: want{action: flight.ActionFailedFinal, reason: "400", status: flight.StatusFailed, attempts: 1,
			owner: "A", errCode: "400", metaTTL: 2 * time.Minute},
	}, {
		name: "FAILED/attempts exhausted/FAILED_FINAL",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.set(key, "attempts", "3")
			if _, err := b.c.Fail(b.ctx, key, d.Token, flight.Failure{Retryable: true, Type: "upstream", Code: "503"}, b.pol); err != nil {
				t.Fatal(err)
			}
			return d
		},
		want: want{action: flight.ActionFailedFinal, reason: "503", status: flight.StatusFailed, attempts: 3,
			owner: "A", errCode: "503", metaTTL: 2 * time.Minute},
	}, {
		name:    "PENDING/heartbeat fresh/FOLLOWER_WAIT",
		arrange: func(key string) flight.Decision { return b.acquire(key, "A", "ta") },
		want: want{action: flight.ActionFollowerWait, reason: flight.ReasonParked, status: flight.StatusPending,
			attempts: 1, owner: "A", stored: []string{"tb"}, metaTTL: 3 * time.Minute},
	}, {
		name:    "RUNNING/heartbeat fresh/FOLLOWER_WAIT",
		arrange: func(key string) flight.Decision { return b.own(key) },
		want: want{action: flight.ActionFollowerWait, reason: flight.ReasonParked, status: flight.StatusRunning,
			attempts: 1, owner: "A", stored: []string{"tb"}, metaTTL: 3 * time.Minute},
	}, {
		name: "RUNNING/heartbeat older than lease/OWNER takeover",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.acquire(key, "C", "tc")
			b.set(key, "heartbeatAt", "now-6s")
			return d
		},
		want: want{action: flight.ActionOwner, reason: flight.ReasonTakeover, status: flight.StatusPending,
			attempts: 2, newToken: true, owner: "B", stored: []string{"ta", "tc"}, metaTTL: 3 * time.Minute},
	}, {
		name: "PENDING/heartbeat older than lease/OWNER takeover",
		arrange: func(key string) flight.Decision {
			d := b.acquire(key, "A", "ta")
			b.set(key, "heartbeatAt", "now-6s")
			return d
		},
		want: want{action: flight.ActionOwner, reason: flight.ReasonTakeover, status: flight.StatusPending,
			attempts: 2, newToken: true, owner: "B", stored: []string{"ta"}, metaTTL: 3 * time.Minute},
	}, {
		name: "RUNNING/now past expireAt, attempts left/OWNER expired",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.set(key, "expireAt", "now-1ms")
			return d
		},
		want: want{action: flight.ActionOwner, reason: flight.ReasonExpired, status: flight.StatusPending,
			attempts: 2, newToken: true, owner: "B", stored: []string{"ta"}, metaTTL: 3 * time.Minute},
	}, {
		name: "RUNNING/progress older than stallTimeout, attempts left/OWNER expired",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.set(key, "progressAt", "now-31s")
			return d
		},
		stall: 30 * time.Second,
		want: want{action: flight.ActionOwner, reason: flight.ReasonExpired, status: flight.StatusPending,
			attempts: 2, newToken: true, owner: "B", stored: []string{"ta"}, metaTTL: 3 * time.Minute},
	}, {
		name: "RUNNING/expired, attempts exhausted/EXPIRED",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.acquire(key, "C", "tc")
			b.set(key, "expireAt", "now-1ms", "attempts", "3")
			return d
		},
		want: want{action: flight.ActionExpired, reason: "running_ttl", status: flight.StatusExpired, attempts: 3,
			owner: "A", errCode: "running_ttl", parked: []string{"ta", "tc"}, stored: []string{"ta", "tc"},
			metaTTL: 2 * time.Minute},
	}, {
		name: "RUNNING/lease lost, attempts exhausted/EXPIRED",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.set(key, "heartbeatAt", "now-6s", "attempts", "3")
			return d
		},
		want: want{action: flight.ActionExpired, reason: "lease_lost", status: flight.StatusExpired, attempts: 3,
			owner: "A", errCode: "lease_lost", parked: []string{"ta"}, stored: []string{"ta"}, metaTTL: 2 * time.Minute},
	}, {
		name: "EXPIRED/attempts left/OWNER expired",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.set(key, "expireAt", "now-1ms")
			if err := b.c.Heartbeat(b.ctx, key, d.Token, "", b.pol); !errors.Is(err, flight.ErrExpired) {
				t.Fatalf("heartbeat: %v", err)
			}
			return d
		},
		want: want{action: flight.ActionOwner, reason: flight.ReasonExpired, status: flight.StatusPending,
			attempts: 2, newToken: true, owner: "B", stored: []string{"ta"}, metaTTL: 3 * time.Minute},
	}, {
		name: "EXPIRED/attempts exhausted/EXPIRED",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.set(key, "expireAt", "now-1ms", "attempts", "3")
			if err := b.c.Heartbeat(b.ctx, key, d.Token, "", b.pol); !errors.Is(err, flight.ErrExpired) {
				t.Fatalf("heartbeat: %v", err)
			}
			return d
		},
		want: want{action: flight.ActionExpired, reason: "running_ttl", status: flight.StatusExpired, attempts: 3,
			owner: "A", errCode: "running_ttl", metaTTL: 2 * time.Minute},
	}, {
		name: "CANCELLED/until its TTL ends/CANCELLED",
		arrange: func(key string) flight.Decision {
			d := b.own(key)
			b.acquire(key, "C", "tc")
			if _, err := b.c.Cancel(b.ctx, key, "user left", b.pol); err != nil {
				t.Fatal(err)
			}
			return d
		},
		want: want{action: flight.ActionCancelled, reason: "cancelled", status: flight.StatusCancelled, attempts: 1,
			owner: "A", errCode: "cancelled", parked: []string{"tc"}, stored: []string{"tc"}, metaTTL: 2 * time.Minute},
	}}
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			key := fmt.Sprintf("row-%d", i)
			b.pol.StallTimeout = row.stall
			before := row.arrange(key)
			got := b.acquire(key, "B", "tb")
			w := row.want
			if got.Action != w.action || got.Reason != w.reason || got.Status != w.status ||
				got.Attempts != w.attempts || got.OwnerID != w.owner || string(got.Result) != w.result ||
				got.ErrorCode != w.errCode {
				t.Errorf("decision = %+v, want %+v", got, w)
			}
			if w.newToken && got.Token <= before.Token {
				t.Errorf("token %d, want > %d", got.Token, before.Token)
			}
			if !w.newToken && got.Token != before.Token {
				t.Errorf("token %d, want unchanged %d", got.Token, before.Token)
			}
			if diff := cmp.Diff(w.parked, got.Parked, sortStrings); diff != "" {
				t.Errorf("Decision.Parked (-want +got):\n%s", diff)
			}
			m := b.get(key)
			if diff := cmp.Diff(w.stored, m.Parked, sortStrings); diff != "" {
				t.Errorf("stored parked ids (-want +got):\n%s", diff)
			}
			if m.Status != w.status || m.OwnerToken != got.Token || m.Attempts != w.attempts {
				t.Errorf("stored status=%s token=%d attempts=%d, want %s %d %d", m.Status, m.OwnerToken, m.Attempts, w.status, got.Token, w.attempts)
			}
			near(t, "meta", m.MetaTTL, w.metaTTL)
			if len(m.Parked) > 0 {
				ttl := b.rdb.PTTL(b.ctx, b.ks.Waiters(key)).Val()
				near(t, "waiters", ttl, w.metaTTL)
			}
			if w.action == flight.ActionOwner {
				now := b.now()
				want := map[string]string{"status": "PENDING", "ownerId": "B", "taskId": "tb",
					"stage": "interview-evaluation", "tenant": "acme", "sessionId": "s-1", "requestKey": key,
					"errorType": "", "errorCode": "", "resultRef": ""}
				for f, v := range want {
					if m.Fields[f] != v {
						t.Errorf("field %s = %q, want %q", f, m.Fields[f], v)
					}
				}
				if d := now - m.HeartbeatAt.UnixMilli(); d < 0 || d > 2000 {
					t.Errorf("heartbeatAt %v is not Redis now", m.HeartbeatAt)
				}
				if d := m.ExpireAt.UnixMilli() - (m.HeartbeatAt.UnixMilli() + time.Minute.Milliseconds()); d != 0 {
					t.Errorf("expireAt - heartbeatAt = runningTTL%+dms", d)
				}
				if m.FenceTTL <= m.MetaTTL {
					t.Errorf("fence TTL %v does not outlive meta TTL %v", m.FenceTTL, m.MetaTTL)
				}
			}
		})
	}
}

var sortStrings = cmp.Transformer("sort", func(in []string) []string {
	out := append([]string(nil), in...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
})

// TestOwnerCallTable has one row per line of the owner-call table of DESIGN.md section 3,
// plus the refusals of each call.
func TestOwnerCallTable(t *testing.T) {
	b := setup(t)
	type arranged struct {
		key   string
		token int64
	}
	pending := func(key string) arranged { d := b.acquire(key, "A", "ta"); return arranged{key, d.Token} }
	running := func(key string) arranged { d := b.own(key); return arranged{key, d.Token} }
	stale := func(key string) arranged { d := b.own(key); return arranged{key, d.Token - 1} }
	rows := []struct {
		name       string
		arrange    func(key string) arranged
		call       func(a arranged) error
		wantErr    error
		wantStatus flight.Status
		check      func(t *testing.T, a arranged, m flight.Meta)
	}{{
		name: "start/PENDING/RUNNING", arrange: pending,
		call:       func(a arranged) error { return b.c.Start(b.ctx, a.key, a.token, b.pol) },
		wantStatus: flight.StatusRunning,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			if got := m.ExpireAt.Sub(m.HeartbeatAt); got != time.Minute {
				t.Errorf("expireAt - heartbeatAt = %v, want runningTTL", got)
			}
			near(t, "meta", m.MetaTTL, 3*time.Minute)
		},
	}, {
		name: "start/stale token/refused", arrange: func(key string) arranged { a := pending(key); a.token--; return a },
		call:    func(a arranged) error { return b.c.Start(b.ctx, a.key, a.token, b.pol) },
		wantErr: flight.ErrStaleToken, wantStatus: flight.StatusPending,
	}, {
		name: "heartbeat/RUNNING/RUNNING with progress", arrange: func(key string) arranged {
			a := running(key)
			b.set(key, "heartbeatAt", "now-3s", "progressAt", "now-3s")
			return a
		},
		call:       func(a arranged) error { return b.c.Heartbeat(b.ctx, a.key, a.token, "17", b.pol) },
		wantStatus: flight.StatusRunning,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			now := b.now()
			if now-m.HeartbeatAt.UnixMilli() > 1000 || now-m.ProgressAt.UnixMilli() > 1000 || m.Progress != "17" {
				t.Errorf("heartbeatAt %v progressAt %v progress %q not renewed", m.HeartbeatAt, m.ProgressAt, m.Progress)
			}
		},
	}, {
		name: "heartbeat/RUNNING, same progress/progressAt kept", arrange: func(key string) arranged {
			a := running(key)
			b.set(key, "progress", "17", "progressAt", "now-3s")
			return a
		},
		call:       func(a arranged) error { return b.c.Heartbeat(b.ctx, a.key, a.token, "17", b.pol) },
		wantStatus: flight.StatusRunning,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			if age := b.now() - m.ProgressAt.UnixMilli(); age < 2900 {
				t.Errorf("progressAt moved without progress (age %dms)", age)
			}
		},
	}, {
		name: "heartbeat/PENDING/PENDING", arrange: pending,
		call:       func(a arranged) error { return b.c.Heartbeat(b.ctx, a.key, a.token, "", b.pol) },
		wantStatus: flight.StatusPending,
	}, {
		name: "heartbeat/runningTTL spent/EXPIRED", arrange: func(key string) arranged {
			a := running(key)
			b.set(key, "expireAt", "now-1ms")
			return a
		},
		call:    func(a arranged) error { return b.c.Heartbeat(b.ctx, a.key, a.token, "", b.pol) },
		wantErr: flight.ErrExpired, wantStatus: flight.StatusExpired,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			if m.ErrorCode != "running_ttl" {
				t.Errorf("errorCode %q", m.ErrorCode)
			}
			near(t, "meta", m.MetaTTL, 2*time.Minute)
		},
	}, {
		name: "heartbeat/progress stalled/EXPIRED", arrange: func(key string) arranged {
			a := running(key)
			b.set(key, "progressAt", "now-31s")
			return a
		},
		call: func(a arranged) error {
			p := b.pol
			p.StallTimeout = 30 * time.Second
			return b.c.Heartbeat(b.ctx, a.key, a.token, "", p)
		},
		wantErr: flight.ErrExpired, wantStatus: flight.StatusExpired,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			if m.ErrorCode != "stalled" {
				t.Errorf("errorCode %q", m.ErrorCode)
			}
		},
	}, {
		name: "heartbeat/CANCELLED/answers cancelled", arrange: func(key string) arranged {
			a := running(key)
			if _, err := b.c.Cancel(b.ctx, key, "stop", b.pol); err != nil {
				t.Fatal(err)
			}
			return a
		},
		call:    func(a arranged) error { return b.c.Heartbeat(b.ctx, a.key, a.token, "", b.pol) },
		wantErr: flight.ErrCancelled, wantStatus: flight.StatusCancelled,
	}, {
		name: "heartbeat/stale token/refused", arrange: stale,
		call:    func(a arranged) error { return b.c.Heartbeat(b.ctx, a.key, a.token, "", b.pol) },
		wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
	}, {
		name: "complete/RUNNING/SUCCEEDED", arrange: running,
		call: func(a arranged) error {
			_, err := b.c.Complete(b.ctx, a.key, a.token, []byte(`{"ok":true}`), b.pol)
			return err
		},
		wantStatus: flight.StatusSucceeded,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			res, err := b.c.Result(b.ctx, a.key)
			if err != nil || string(res) != `{"ok":true}` {
				t.Errorf("result %q, %v", res, err)
			}
			if m.ResultRef != b.ks.Result(a.key) {
				t.Errorf("resultRef %q", m.ResultRef)
			}
			near(t, "meta", m.MetaTTL, 10*time.Minute)
			near(t, "result", m.ResultTTL, 10*time.Minute)
		},
	}, {
		name: "complete/PENDING/refused", arrange: pending,
		call: func(a arranged) error {
			_, err := b.c.Complete(b.ctx, a.key, a.token, []byte(`1`), b.pol)
			return err
		},
		wantErr: &flight.StateError{Op: "complete", Status: flight.StatusPending}, wantStatus: flight.StatusPending,
	}, {
		name: "complete/stale token/refused", arrange: stale,
		call: func(a arranged) error {
			_, err := b.c.Complete(b.ctx, a.key, a.token, []byte(`1`), b.pol)
			return err
		},
		wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			if _, err := b.c.Result(b.ctx, a.key); !errors.Is(err, flight.ErrNotFound) {
				t.Errorf("a stale complete wrote a result: %v", err)
			}
		},
	}, {
		name: "fail/RUNNING/FAILED", arrange: running,
		call: func(a arranged) error {
			_, err := b.c.Fail(b.ctx, a.key, a.token, flight.Failure{Retryable: true, Type: "rate_limited", Code: "429", Message: "slow down"}, b.pol)
			return err
		},
		wantStatus: flight.StatusFailed,
		check: func(t *testing.T, a arranged, m flight.Meta) {
			if !m.Retryable || m.ErrorType != "rate_limited" || m.ErrorCode != "429" || m.Error != "slow down" {
				t.Errorf("stored failure %+v", m)
			}
			near(t, "meta", m.MetaTTL, 2*time.Minute)
		},
	}, {
		name: "fail/PENDING/FAILED", arrange: pending,
		call: func(a arranged) error {
			_, err := b.c.Fail(b.ctx, a.key, a.token, flight.Failure{Type: "bad_request", Code: "400"}, b.pol)
			return err
		},
		wantStatus: flight.StatusFailed,
	}, {
		name: "fail/stale token/refused", arrange: stale,
		call: func(a arranged) error {
			_, err := b.c.Fail(b.ctx, a.key, a.token, flight.Failure{Type: "x"}, b.pol)
			return err
		},
		wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
	}, {
		name: "cancel/PENDING/CANCELLED", arrange: pending,
		call: func(a arranged) error {
			_, err := b.c.Cancel(b.ctx, a.key, "user", b.pol)
			return err
		},
		wantStatus: flight.StatusCancelled,
		check:      func(t *testing.T, a arranged, m flight.Meta) { near(t, "meta", m.MetaTTL, 2*time.Minute) },
	}, {
		name: "cancel/RUNNING/CANCELLED", arrange: running,
		call: func(a arranged) error {
			_, err := b.c.Cancel(b.ctx, a.key, "user", b.pol)
			return err
		},
		wantStatus: flight.StatusCancelled,
	}, {
		name: "cancel/SUCCEEDED/refused", arrange: func(key string) arranged {
			a := running(key)
			if _, err := b.c.Complete(b.ctx, key, a.token, []byte(`1`), b.pol); err != nil {
				t.Fatal(err)
			}
			return a
		},
		call: func(a arranged) error {
			_, err := b.c.Cancel(b.ctx, a.key, "late", b.pol)
			return err
		},
		wantErr: &flight.StateError{Op: "cancel", Status: flight.StatusSucceeded}, wantStatus: flight.StatusSucceeded,
	}}
	for i, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			a := row.arrange(fmt.Sprintf("owner-%d", i))
			err := row.call(a)
			switch we := row.wantErr.(type) {
			case nil:
				if err != nil {
					t.Fatalf("err = %v", err)
				}
			case *flight.StateError:
				var se *flight.StateError
				if !errors.As(err, &se) || *se != *we {
					t.Fatalf("err = %v, want %v", err, we)
				}
			default:
				if !errors.Is(err, we) {
					t.Fatalf("err = %v, want %v", err, we)
				}
			}
			m := b.get(a.key)
			if m.Status != row.wantStatus {
				t.Errorf("status %s, want %s", m.Status, row.wantStatus)
			}
			if row.check != nil {
				row.check(t, a, m)
			}
		})
	}
}
