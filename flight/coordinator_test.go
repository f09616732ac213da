package flight_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/flighttest"
	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/topics"
)

const testStage = "interview-evaluation"

// bundle is what one test needs: a coordinator on a private key prefix, its Redis, and a task
// stream whose entries consumer "c1" holds, so that answering and parking can be observed.
type bundle struct {
	t    *testing.T
	ctx  context.Context
	rdb  *redis.Client
	ks   topics.Keyspace
	c    *flight.Coordinator
	pol  flight.Policy
	mode string // answer mode: write (in the scripts) or return (written after them)
}

// modes runs f once per answer mode: in the scripts (one Redis node) and after them (Redis
// Cluster's way, forced on one node).
func modes(t *testing.T, f func(t *testing.T, b *bundle)) {
	for _, mode := range []string{"write", "return"} {
		t.Run(mode, func(t *testing.T) { f(t, setupMode(t, mode)) })
	}
}

func setup(t *testing.T) *bundle { return setupMode(t, "write") }

func setupMode(t *testing.T, mode string) *bundle {
	t.Helper()
	r := redistest.New(t)
	ks := topics.Keyspace{Prefix: r.Prefix}
	c, err := flight.NewCoordinator(flight.Config{Client: r.Client, Keyspace: ks, Consumer: "test",
		AnswerAfterScript: mode == "return"})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Client.XGroupCreateMkStream(context.Background(), ks.Tasks(testStage), topics.ConsumerGroup, "$").Err(); err != nil {
		t.Fatal(err)
	}
	return &bundle{t: t, ctx: context.Background(), rdb: r.Client, ks: ks, c: c, mode: mode, pol: flight.Policy{
		Lease: 5 * time.Second, RunningTTL: time.Minute, StallTimeout: 0,
		ResultTTL: 10 * time.Minute, FailureTTL: 2 * time.Minute, MaxAttempts: 3,
	}}
}

// task appends a task entry and has consumer c1 read it, so that it is pending under c1.
func (b *bundle) task(id string) flight.Task {
	b.t.Helper()
	stream := b.ks.Tasks(testStage)
	if err := b.rdb.XAdd(b.ctx, &redis.XAddArgs{Stream: stream, Values: []any{"task", id}}).Err(); err != nil {
		b.t.Fatal(err)
	}
	res, err := b.rdb.XReadGroup(b.ctx, &redis.XReadGroupArgs{Group: topics.ConsumerGroup, Consumer: "c1",
		Streams: []string{stream, ">"}, Count: 1, Block: -1}).Result()
	if err != nil || len(res) != 1 || len(res[0].Messages) != 1 {
		b.t.Fatalf("read task %s: %v %v", id, res, err)
	}
	return flight.Task{ID: id, Stream: stream, Entry: res[0].Messages[0].ID, Queued: 3 * time.Millisecond}
}

// holder names the consumer that holds t's entry ("" when it is acknowledged).
func (b *bundle) holder(t flight.Task) string {
	b.t.Helper()
	p, err := b.rdb.XPendingExt(b.ctx, &redis.XPendingExtArgs{Stream: t.Stream, Group: topics.ConsumerGroup,
		Start: t.Entry, End: t.Entry, Count: 1}).Result()
	if err != nil {
		b.t.Fatal(err)
	}
	if len(p) == 0 {
		return ""
	}
	return p[0].Consumer
}

// events returns every event on the stage's result stream, by task id.
func (b *bundle) events() map[string][]topics.Event {
	b.t.Helper()
	msgs, err := b.rdb.XRange(b.ctx, b.ks.Results(testStage), "-", "+").Result()
	if err != nil {
		b.t.Fatal(err)
	}
	out := map[string][]topics.Event{}
	for _, m := range msgs {
		p, _ := m.Values[topics.FieldPayload].(string)
		ev, err := topics.DecodeEvent([]byte(p))
		if err != nil {
			b.t.Fatalf("event %s: %v: %s", m.ID, err, p)
		}
		if id, _ := m.Values[topics.FieldUUID].(string); id == "" {
			b.t.Errorf("event %s has no uuid", m.ID)
		}
		out[ev.TaskID] = append(out[ev.TaskID], ev)
	}
	return out
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

func (b *bundle) acquireWith(p flight.AcquireParams) flight.Decision {
	b.t.Helper()
	if p.Stage == "" {
		p.Stage = testStage
	}
	if p.Tenant == "" {
		p.Tenant = "acme"
	}
	if p.SessionID == "" {
		p.SessionID = "s-1"
	}
	if p.Policy == (flight.Policy{}) {
		p.Policy = b.pol
	}
	d, err := b.c.Acquire(b.ctx, p)
	if err != nil {
		b.t.Fatalf("acquire %s: %v", p.Key, err)
	}
	return d
}

func (b *bundle) acquire(key, owner string, task flight.Task) flight.Decision {
	b.t.Helper()
	return b.acquireWith(flight.AcquireParams{Key: key, OwnerID: owner, Task: task})
}

// own makes owner A own key with a new task "ta" and starts the flight.
func (b *bundle) own(key string) (flight.Decision, flight.Task) {
	b.t.Helper()
	ta := b.task("ta")
	d := b.acquireWith(flight.AcquireParams{Key: key, OwnerID: "A", Task: ta, Start: true})
	if d.Action != flight.ActionOwner || d.Status != flight.StatusRunning {
		b.t.Fatalf("own %s: got %+v", key, d)
	}
	return d, ta
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
	kv := make([]string, len(args))
	for i, a := range args {
		kv[i] = a.(string)
	}
	if err := flighttest.Set(b.ctx, b.rdb, b.ks.Flight(key), kv...); err != nil {
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

func sorted(in []string) []string {
	out := append([]string(nil), in...)
	sort.Strings(out)
	if len(out) == 0 {
		return nil
	}
	return out
}

// answered is one expected event: the task it answers and how.
type answered struct {
	task   string
	shared topics.Shared
	status topics.Status
}

// checkAnswers asserts that exactly the listed tasks got one event each, as listed, and that
// their entries are acknowledged.
func (b *bundle) checkAnswers(t *testing.T, want []answered, tasks map[string]flight.Task) {
	t.Helper()
	evs := b.events()
	got := map[string]answered{}
	for id, list := range evs {
		if len(list) != 1 {
			t.Errorf("task %s got %d events", id, len(list))
		}
		got[id] = answered{id, list[0].Shared, list[0].Status}
	}
	wantMap := map[string]answered{}
	for _, w := range want {
		wantMap[w.task] = w
		if tk, ok := tasks[w.task]; ok {
			if h := b.holder(tk); h != "" {
				t.Errorf("task %s answered but its entry is still pending under %q", w.task, h)
			}
		}
	}
	if diff := cmp.Diff(wantMap, got, cmp.AllowUnexported(answered{})); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}

// TestAcquireTable has one row per line of the acquire table of DESIGN.md section 3. Each row
// arranges a flight with owner task "ta" and, where it says so, a parked task "tc", then task
// "tb" of owner B acquires. Both answer modes run every row.
func TestAcquireTable(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		type want struct {
			action   flight.Action
			reason   flight.Reason
			status   flight.Status
			attempts int
			newToken bool // the token differs from (and exceeds) the arranged owner's
			owner    string
			errCode  string
			answered []answered // events written by the call (and entries acknowledged)
			parked   []string   // task ids parked after the call
			tbHolder string     // who holds tb's entry after the call ("" acknowledged)
			metaTTL  time.Duration
		}
		hit := func(task string) answered { return answered{task, topics.SharedHit, topics.StatusSucceeded} }
		fol := func(task string, st topics.Status) answered { return answered{task, topics.SharedFollower, st} }
		// ownerAnswer: the owner's task, answered when another caller ends its attempt for good.
		ownerAnswer := func(task string, st topics.Status) answered { return answered{task, topics.SharedOwner, st} }
		type arranged struct {
			d  flight.Decision
			tc flight.Task
		}
		rows := []struct {
			name    string
			arrange func(key string) arranged
			stall   time.Duration
			want    want
		}{{
			name:    "none/-/OWNER new",
			arrange: func(string) arranged { return arranged{} },
			want: want{action: flight.ActionOwner, reason: flight.ReasonNew, status: flight.StatusPending,
				attempts: 1, newToken: true, owner: "B", tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "SUCCEEDED/result present/RESULT_HIT",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				if _, err := b.c.Complete(b.ctx, *d.Owner, []byte(`{"score":7}`), time.Millisecond); err != nil {
					t.Fatal(err)
				}
				b.rdb.Del(b.ctx, b.ks.Results(testStage))
				return arranged{d: d}
			},
			want: want{action: flight.ActionResultHit, status: flight.StatusSucceeded, attempts: 1, owner: "A",
				answered: []answered{hit("tb")}, metaTTL: 10 * time.Minute},
		}, {
			name: "SUCCEEDED/record gone/OWNER new",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				if _, err := b.c.Complete(b.ctx, *d.Owner, []byte(`1`), 0); err != nil {
					t.Fatal(err)
				}
				b.rdb.Del(b.ctx, b.ks.Flight(key), b.ks.Results(testStage))
				return arranged{d: d}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonNew, status: flight.StatusPending,
				attempts: 1, newToken: true, owner: "B", tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "FAILED/retryable, attempts left/OWNER retry",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				if _, err := b.c.Fail(b.ctx, *d.Owner, flight.Failure{Retryable: true, Type: "timeout", Code: "t"}, 0); err != nil {
					t.Fatal(err)
				}
				return arranged{d: d}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonRetry, status: flight.StatusPending,
				attempts: 2, newToken: true, owner: "B", parked: []string{"ta"}, tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "FAILED/not retryable/FAILED_FINAL",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				if _, err := b.c.Fail(b.ctx, *d.Owner, flight.Failure{Type: "bad_request", Code: "400"}, 0); err != nil {
					t.Fatal(err)
				}
				b.rdb.Del(b.ctx, b.ks.Results(testStage))
				return arranged{d: d}
			},
			want: want{action: flight.ActionFailedFinal, reason: "400", status: flight.StatusFailed, attempts: 1,
				owner: "A", errCode: "400", answered: []answered{fol("tb", topics.StatusFailed)}, metaTTL: 2 * time.Minute},
		}, {
			name: "FAILED/attempts exhausted (pinned maxAttempts)/FAILED_FINAL",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				b.set(key, "attempts", "3")
				o := *d.Owner
				o.Attempts = 3
				if _, err := b.c.Fail(b.ctx, o, flight.Failure{Retryable: true, Type: "upstream", Code: "503"}, 0); err != nil {
					t.Fatal(err)
				}
				b.rdb.Del(b.ctx, b.ks.Results(testStage))
				return arranged{d: d}
			},
			want: want{action: flight.ActionFailedFinal, reason: "503", status: flight.StatusFailed, attempts: 3,
				owner: "A", errCode: "503", answered: []answered{fol("tb", topics.StatusFailed)}, metaTTL: 2 * time.Minute},
		}, {
			name: "PENDING/heartbeat fresh/FOLLOWER_WAIT parked",
			arrange: func(key string) arranged {
				return arranged{d: b.acquire(key, "A", b.task("ta"))}
			},
			want: want{action: flight.ActionFollowerWait, reason: flight.ReasonParked, status: flight.StatusPending,
				attempts: 1, owner: "A", parked: []string{"tb"}, tbHolder: topics.ParkingConsumer, metaTTL: 3 * time.Minute},
		}, {
			name:    "RUNNING/heartbeat fresh/FOLLOWER_WAIT parked",
			arrange: func(key string) arranged { d, _ := b.own(key); return arranged{d: d} },
			want: want{action: flight.ActionFollowerWait, reason: flight.ReasonParked, status: flight.StatusRunning,
				attempts: 1, owner: "A", parked: []string{"tb"}, tbHolder: topics.ParkingConsumer, metaTTL: 3 * time.Minute},
		}, {
			name: "RUNNING/heartbeat older than the pinned lease/OWNER takeover",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				tc := b.task("tc")
				b.acquire(key, "C", tc)
				b.set(key, "heartbeatAt", "now-6s")
				return arranged{d: d, tc: tc}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonTakeover, status: flight.StatusPending,
				attempts: 2, newToken: true, owner: "B", parked: []string{"ta", "tc"}, tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "RUNNING/handed over/OWNER handover, attempt not spent",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				if err := b.c.Handover(b.ctx, *d.Owner); err != nil {
					t.Fatal(err)
				}
				return arranged{d: d}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonHandover, status: flight.StatusPending,
				attempts: 1, newToken: true, owner: "B", parked: []string{"ta"}, tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "RUNNING/now past expireAt, attempts left/OWNER expired",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				b.set(key, "expireAt", "now-1ms")
				return arranged{d: d}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonExpired, status: flight.StatusPending,
				attempts: 2, newToken: true, owner: "B", parked: []string{"ta"}, tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "RUNNING/progress older than the pinned stallTimeout/OWNER expired",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				b.set(key, "progressAt", "now-31s", "policy", "5000 60000 30000 600000 120000 3")
				return arranged{d: d}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonExpired, status: flight.StatusPending,
				attempts: 2, newToken: true, owner: "B", parked: []string{"ta"}, tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "RUNNING/expired, attempts exhausted/EXPIRED",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				tc := b.task("tc")
				b.acquire(key, "C", tc)
				b.set(key, "expireAt", "now-1ms", "attempts", "3")
				return arranged{d: d, tc: tc}
			},
			want: want{action: flight.ActionExpired, reason: "running_ttl", status: flight.StatusExpired, attempts: 3,
				owner: "A", errCode: "running_ttl", answered: []answered{ownerAnswer("ta", topics.StatusExpired),
					fol("tb", topics.StatusExpired), fol("tc", topics.StatusExpired)}, metaTTL: 2 * time.Minute},
		}, {
			name: "RUNNING/lease lost, attempts exhausted/EXPIRED",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				b.set(key, "heartbeatAt", "now-6s", "attempts", "3")
				return arranged{d: d}
			},
			want: want{action: flight.ActionExpired, reason: "lease_lost", status: flight.StatusExpired, attempts: 3,
				owner: "A", errCode: "lease_lost", answered: []answered{ownerAnswer("ta", topics.StatusExpired),
					fol("tb", topics.StatusExpired)}, metaTTL: 2 * time.Minute},
		}, {
			name: "EXPIRED/attempts left/OWNER expired",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				b.set(key, "expireAt", "now-1ms")
				if _, err := b.c.Heartbeat(b.ctx, *d.Owner, ""); !errors.Is(err, flight.ErrExpired) {
					t.Fatalf("heartbeat: %v", err)
				}
				return arranged{d: d}
			},
			want: want{action: flight.ActionOwner, reason: flight.ReasonExpired, status: flight.StatusPending,
				attempts: 2, newToken: true, owner: "B", parked: []string{"ta"}, tbHolder: "c1", metaTTL: 3 * time.Minute},
		}, {
			name: "EXPIRED/attempts exhausted/EXPIRED",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				b.set(key, "expireAt", "now-1ms", "attempts", "3")
				if _, err := b.c.Heartbeat(b.ctx, *d.Owner, ""); !errors.Is(err, flight.ErrExpired) {
					t.Fatalf("heartbeat: %v", err)
				}
				return arranged{d: d}
			},
			want: want{action: flight.ActionExpired, reason: "running_ttl", status: flight.StatusExpired, attempts: 3,
				owner: "A", errCode: "running_ttl", answered: []answered{fol("tb", topics.StatusExpired)}, metaTTL: 2 * time.Minute},
		}, {
			name: "CANCELLED/until its TTL ends/CANCELLED",
			arrange: func(key string) arranged {
				d, _ := b.own(key)
				tc := b.task("tc")
				b.acquire(key, "C", tc)
				if _, err := b.c.Cancel(b.ctx, key, "user left", flight.CancelParams{Stage: testStage, TTL: 2 * time.Minute}); err != nil {
					t.Fatal(err)
				}
				b.rdb.Del(b.ctx, b.ks.Results(testStage))
				return arranged{d: d, tc: tc}
			},
			want: want{action: flight.ActionCancelled, reason: "cancelled", status: flight.StatusCancelled, attempts: 1,
				owner: "A", errCode: "cancelled", answered: []answered{fol("tb", topics.StatusCancelled)}, metaTTL: 2 * time.Minute},
		}}
		for i, row := range rows {
			t.Run(row.name, func(t *testing.T) {
				key := fmt.Sprintf("row-%d", i)
				b.rdb.Del(b.ctx, b.ks.Results(testStage))
				before := row.arrange(key)
				tb := b.task("tb")
				tasks := map[string]flight.Task{"tb": tb}
				if before.tc.ID != "" {
					tasks["tc"] = before.tc
				}
				got := b.acquire(key, "B", tb)
				w := row.want
				if got.Action != w.action || got.Reason != w.reason || got.Status != w.status ||
					got.Attempts != w.attempts || got.OwnerID != w.owner || got.ErrorCode != w.errCode {
					t.Errorf("decision = %+v, want %+v", got, w)
				}
				if w.newToken && got.Token <= before.d.Token {
					t.Errorf("token %d, want > %d", got.Token, before.d.Token)
				}
				if !w.newToken && got.Token != before.d.Token {
					t.Errorf("token %d, want unchanged %d", got.Token, before.d.Token)
				}
				if (w.action == flight.ActionOwner) != (got.Owner != nil) {
					t.Errorf("Owner handle %+v for action %s", got.Owner, got.Action)
				}
				b.checkAnswers(t, w.answered, tasks)
				if got.Answered != len(w.answered) {
					t.Errorf("Answered = %d, want %d", got.Answered, len(w.answered))
				}
				if w.answered == nil {
					if h := b.holder(tb); h != w.tbHolder {
						t.Errorf("tb's entry is held by %q, want %q", h, w.tbHolder)
					}
				}
				m := b.get(key)
				if diff := cmp.Diff(sorted(w.parked), sorted(m.Parked)); diff != "" {
					t.Errorf("parked task ids (-want +got):\n%s", diff)
				}
				if m.Status != w.status || m.OwnerToken != got.Token || m.Attempts != w.attempts {
					t.Errorf("stored status=%s token=%d attempts=%d, want %s %d %d", m.Status, m.OwnerToken, m.Attempts, w.status, got.Token, w.attempts)
				}
				near(t, "meta", m.MetaTTL, w.metaTTL)
				if len(m.Parked) > 0 {
					near(t, "waiters", b.rdb.PTTL(b.ctx, b.ks.Waiters(key)).Val(), w.metaTTL)
				}
				if w.action == flight.ActionOwner {
					now := b.now()
					want := map[string]string{"status": "PENDING", "ownerId": "B", "taskId": "tb",
						"entry": tb.Entry + " " + tb.Stream, "stage": testStage, "tenant": "acme", "sessionId": "s-1",
						"requestKey": key, "errorType": "", "errorCode": "", "resultRef": "",
						"policy": "5000 60000 0 600000 120000 3"}
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
					if m.Fence != "" && m.FenceTTL <= 0 {
						t.Errorf("fence %q without a TTL", m.Fence)
					}
				}
			})
		}
	})
}

// TestAcquireStartsOwners: with Start the owner is RUNNING at once, with the attempt's clock
// started (acquire and start in one call).
func TestAcquireStartsOwners(t *testing.T) {
	b := setup(t)
	d, _ := b.own("k")
	m := b.get("k")
	if m.Status != flight.StatusRunning || m.ExpireAt.Sub(m.HeartbeatAt) != time.Minute || !d.ExpireAt.Equal(m.ExpireAt) {
		t.Errorf("meta %s expireAt %v heartbeatAt %v, decision expireAt %v", m.Status, m.ExpireAt, m.HeartbeatAt, d.ExpireAt)
	}
	near(t, "meta", m.MetaTTL, 3*time.Minute)
}
