package flight_test

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

func (b *bundle) complete(o flight.Ownership, v string) (flight.Settlement, error) {
	b.t.Helper()
	return b.c.Complete(b.ctx, o, []byte(v), 40*time.Millisecond)
}

func cancelParams() flight.CancelParams {
	return flight.CancelParams{Stage: testStage, TTL: 2 * time.Minute}
}

// TestOwnerCallTable has one row per line of the owner-call table of DESIGN.md section 3, plus
// the refusals of each call, in both answer modes.
func TestOwnerCallTable(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		type arranged struct {
			o  flight.Ownership
			ta flight.Task
		}
		pending := func(key string) arranged {
			ta := b.task("ta")
			d := b.acquire(key, "A", ta)
			return arranged{*d.Owner, ta}
		}
		running := func(key string) arranged { d, ta := b.own(key); return arranged{*d.Owner, ta} }
		stale := func(key string) arranged { a := running(key); a.o.Token--; return a }
		rows := []struct {
			name       string
			arrange    func(key string) arranged
			call       func(a arranged) error
			wantErr    error
			wantStatus flight.Status
			check      func(t *testing.T, a arranged, m flight.Meta)
		}{{
			name: "start/PENDING/RUNNING", arrange: pending,
			call:       func(a arranged) error { return b.c.Start(b.ctx, a.o) },
			wantStatus: flight.StatusRunning,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if got := m.ExpireAt.Sub(m.HeartbeatAt); got != time.Minute {
					t.Errorf("expireAt - heartbeatAt = %v, want the pinned runningTTL", got)
				}
				near(t, "meta", m.MetaTTL, 3*time.Minute)
			},
		}, {
			name: "start/stale token/refused", arrange: func(key string) arranged { a := pending(key); a.o.Token--; return a },
			call:    func(a arranged) error { return b.c.Start(b.ctx, a.o) },
			wantErr: flight.ErrStaleToken, wantStatus: flight.StatusPending,
		}, {
			name: "heartbeat/RUNNING/RUNNING with progress", arrange: func(key string) arranged {
				a := running(key)
				b.set(key, "heartbeatAt", "now-3s", "progressAt", "now-3s")
				return a
			},
			call:       func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, "17"); return err },
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
			call:       func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, "17"); return err },
			wantStatus: flight.StatusRunning,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if age := b.now() - m.ProgressAt.UnixMilli(); age < 2900 {
					t.Errorf("progressAt moved without progress (age %dms)", age)
				}
			},
		}, {
			name: "heartbeat/PENDING/PENDING", arrange: pending,
			call:       func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, ""); return err },
			wantStatus: flight.StatusPending,
		}, {
			name: "heartbeat/runningTTL spent/EXPIRED", arrange: func(key string) arranged {
				a := running(key)
				b.set(key, "expireAt", "now-1ms")
				return a
			},
			call:    func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, ""); return err },
			wantErr: flight.ErrExpired, wantStatus: flight.StatusExpired,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if m.ErrorCode != "running_ttl" {
					t.Errorf("errorCode %q", m.ErrorCode)
				}
				near(t, "meta", m.MetaTTL, 2*time.Minute)
			},
		}, {
			name: "heartbeat/progress stalled (pinned stallTimeout)/EXPIRED", arrange: func(key string) arranged {
				a := running(key)
				b.set(key, "progressAt", "now-31s", "policy", "5000 60000 30000 600000 120000 3")
				return a
			},
			call:    func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, ""); return err },
			wantErr: flight.ErrExpired, wantStatus: flight.StatusExpired,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if m.ErrorCode != "stalled" {
					t.Errorf("errorCode %q", m.ErrorCode)
				}
			},
		}, {
			name: "heartbeat/CANCELLED/answers cancelled", arrange: func(key string) arranged {
				a := running(key)
				if _, err := b.c.Cancel(b.ctx, key, "stop", cancelParams()); err != nil {
					t.Fatal(err)
				}
				return a
			},
			call:    func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, ""); return err },
			wantErr: flight.ErrCancelled, wantStatus: flight.StatusCancelled,
		}, {
			name: "heartbeat/stale token/refused", arrange: stale,
			call:    func(a arranged) error { _, err := b.c.Heartbeat(b.ctx, a.o, ""); return err },
			wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
		}, {
			name: "complete/RUNNING/SUCCEEDED, owner answered", arrange: running,
			call: func(a arranged) error {
				st, err := b.complete(a.o, `{"ok": true}`)
				if err == nil && (!st.Answered || st.Events != 1) {
					return fmt.Errorf("settlement %+v", st)
				}
				return err
			},
			wantStatus: flight.StatusSucceeded,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				res, err := b.c.Result(b.ctx, a.o.Key)
				if err != nil || string(res) != `{"ok":true}` {
					t.Errorf("result %q, %v (want it stored compact)", res, err)
				}
				if m.ResultRef != b.ks.Flight(a.o.Key) {
					t.Errorf("resultRef %q", m.ResultRef)
				}
				near(t, "meta", m.MetaTTL, 10*time.Minute)
				near(t, "result", m.ResultTTL, 10*time.Minute)
				if m.Fence != "" {
					t.Errorf("fence %q: a flight that had one token needs none, its record fences it", m.Fence)
				}
				ev := b.events()["ta"]
				if len(ev) != 1 || ev[0].Shared != topics.SharedOwner || string(ev[0].Result) != `{"ok":true}` ||
					ev[0].RunMs != 40 || ev[0].QueuedMs != 3 || ev[0].Consumer != "test" || ev[0].Tenant != "acme" ||
					ev[0].RequestKey != a.o.Key || ev[0].OwnerToken != a.o.Token || ev[0].ResultRef != m.ResultRef {
					t.Errorf("owner event %+v", ev)
				}
				if h := b.holder(a.ta); h != "" {
					t.Errorf("owner entry still pending under %q", h)
				}
			},
		}, {
			name: "complete/PENDING/SUCCEEDED", arrange: pending,
			call:       func(a arranged) error { _, err := b.complete(a.o, `1`); return err },
			wantStatus: flight.StatusSucceeded,
		}, {
			name: "complete/stale token/refused, task parked on the owner", arrange: stale,
			call: func(a arranged) error {
				st, err := b.complete(a.o, `1`)
				if !st.Parked {
					t.Errorf("settlement %+v, want parked", st)
				}
				return err
			},
			wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if _, err := b.c.Result(b.ctx, a.o.Key); !errors.Is(err, flight.ErrNotFound) {
					t.Errorf("a stale complete wrote a result: %v", err)
				}
			},
		}, {
			name: "fail/RUNNING/FAILED", arrange: running,
			call: func(a arranged) error {
				st, err := b.c.Fail(b.ctx, a.o, flight.Failure{Retryable: true, Type: "rate_limited", Code: "429", Message: "slow down"}, 0)
				if st.Final || st.Answered {
					t.Errorf("settlement %+v: a retryable failure with attempts left is not final", st)
				}
				return err
			},
			wantStatus: flight.StatusFailed,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if !m.Retryable || m.ErrorType != "rate_limited" || m.ErrorCode != "429" || m.Error != "slow down" {
					t.Errorf("stored failure %+v", m)
				}
				near(t, "meta", m.MetaTTL, 2*time.Minute)
				if h := b.holder(a.ta); h != "c1" {
					t.Errorf("a retryable failure gave the owner's entry away: %q", h)
				}
			},
		}, {
			name: "fail/PENDING/FAILED, final answers the owner", arrange: pending,
			call: func(a arranged) error {
				st, err := b.c.Fail(b.ctx, a.o, flight.Failure{Type: "bad_request", Code: "400"}, 0)
				if !st.Final || !st.Answered {
					t.Errorf("settlement %+v", st)
				}
				return err
			},
			wantStatus: flight.StatusFailed,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if ev := b.events()["ta"]; len(ev) != 1 || ev[0].Status != topics.StatusFailed || ev[0].ErrorCode != "400" {
					t.Errorf("owner event %+v", ev)
				}
			},
		}, {
			name: "fail/stale token/refused", arrange: stale,
			call: func(a arranged) error {
				_, err := b.c.Fail(b.ctx, a.o, flight.Failure{Type: "x"}, 0)
				return err
			},
			wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
		}, {
			name: "handover/RUNNING/marked, lease lapsed", arrange: running,
			call:       func(a arranged) error { return b.c.Handover(b.ctx, a.o) },
			wantStatus: flight.StatusRunning,
			check: func(t *testing.T, a arranged, m flight.Meta) {
				if m.Fields["handover"] != "1" || !m.HeartbeatAt.IsZero() {
					t.Errorf("handover %q heartbeatAt %v", m.Fields["handover"], m.HeartbeatAt)
				}
			},
		}, {
			name: "handover/stale token/refused", arrange: stale,
			call:    func(a arranged) error { return b.c.Handover(b.ctx, a.o) },
			wantErr: flight.ErrStaleToken, wantStatus: flight.StatusRunning,
		}, {
			name: "cancel/PENDING/CANCELLED", arrange: pending,
			call: func(a arranged) error {
				_, err := b.c.Cancel(b.ctx, a.o.Key, "user", cancelParams())
				return err
			},
			wantStatus: flight.StatusCancelled,
			check:      func(t *testing.T, a arranged, m flight.Meta) { near(t, "meta", m.MetaTTL, 2*time.Minute) },
		}, {
			name: "cancel/RUNNING/CANCELLED", arrange: running,
			call: func(a arranged) error {
				_, err := b.c.Cancel(b.ctx, a.o.Key, "user", cancelParams())
				return err
			},
			wantStatus: flight.StatusCancelled,
		}, {
			name: "cancel/SUCCEEDED/refused", arrange: func(key string) arranged {
				a := running(key)
				if _, err := b.complete(a.o, `1`); err != nil {
					t.Fatal(err)
				}
				return a
			},
			call: func(a arranged) error {
				_, err := b.c.Cancel(b.ctx, a.o.Key, "late", cancelParams())
				return err
			},
			wantErr: &flight.StateError{Op: "cancel", Status: flight.StatusSucceeded}, wantStatus: flight.StatusSucceeded,
		}}
		for i, row := range rows {
			t.Run(row.name, func(t *testing.T) {
				b.rdb.Del(b.ctx, b.ks.Results(testStage))
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
				m := b.get(a.o.Key)
				if m.Status != row.wantStatus {
					t.Errorf("status %s, want %s", m.Status, row.wantStatus)
				}
				if row.check != nil {
					row.check(t, a, m)
				}
			})
		}
	})
}

// TestCompleteAnswersParked: complete answers every parked task and acknowledges its entry,
// in the same script on one node and right after it on a cluster.
func TestCompleteAnswersParked(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		d, ta := b.own("k")
		tasks := map[string]flight.Task{"ta": ta}
		for _, id := range []string{"t1", "t2", "t3"} {
			tk := b.task(id)
			tasks[id] = tk
			if got := b.acquire("k", "B", tk); got.Reason != flight.ReasonParked {
				t.Fatalf("%s: %+v", id, got)
			}
		}
		st, err := b.complete(*d.Owner, `{"v":1}`)
		if err != nil || !st.Answered || st.Events != 4 || len(st.Waited) != 3 {
			t.Fatalf("complete: %+v %v", st, err)
		}
		b.checkAnswers(t, []answered{{"ta", topics.SharedOwner, topics.StatusSucceeded},
			{"t1", topics.SharedFollower, topics.StatusSucceeded}, {"t2", topics.SharedFollower, topics.StatusSucceeded},
			{"t3", topics.SharedFollower, topics.StatusSucceeded}}, tasks)
		for _, ev := range b.events() {
			if string(ev[0].Result) != `{"v":1}` || ev[0].RunMs != 40 {
				t.Errorf("event %+v", ev[0])
			}
		}
		if m := b.get("k"); len(m.Parked) != 0 {
			t.Errorf("parked left: %v", m.Parked)
		}
	})
}

// TestFencing covers issue-level rule 4: one rule for complete and write-back, and a token
// below the fence is never accepted, with or without a meta.
func TestFencing(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		t.Run("OlderOwnerCannotOverwriteNewerResultAfterItsMetaExpired", func(t *testing.T) {
			a, _ := b.own("f1")
			b.set("f1", "heartbeatAt", "now-6s")
			d := b.acquireWith(flight.AcquireParams{Key: "f1", OwnerID: "B", Task: b.task("tb"), Start: true})
			if _, err := b.complete(*d.Owner, `"B"`); err != nil {
				t.Fatal(err)
			}
			b.rdb.Del(b.ctx, b.ks.Flight("f1"), b.ks.Flight("f1")) // the newer result expired
			st, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Tenant: "acme", Key: "f1",
				Token: a.Token, Result: []byte(`"A"`)})
			if !errors.Is(err, flight.ErrStaleToken) || st.Restored {
				t.Fatalf("restore of the older token: %+v %v", st, err)
			}
			if _, err := b.c.Get(b.ctx, "f1"); !errors.Is(err, flight.ErrNotFound) {
				t.Errorf("the refused write-back created a meta: %v", err)
			}
		})
		t.Run("CancelledRunNeverComesBackAfterItsRecordExpired", func(t *testing.T) {
			a, ta := b.own("f2")
			if _, err := b.c.Cancel(b.ctx, "f2", "stop", cancelParams()); err != nil {
				t.Fatal(err)
			}
			b.rdb.Del(b.ctx, b.ks.Flight("f2")) // the CANCELLED record's TTL ran out
			b.rdb.Del(b.ctx, b.ks.Results(testStage))
			st, err := b.complete(*a.Owner, `"late"`)
			if !errors.Is(err, flight.ErrCancelled) || !st.Answered {
				t.Fatalf("complete of the cancelled run: %+v %v", st, err)
			}
			if _, err := b.c.Result(b.ctx, "f2"); !errors.Is(err, flight.ErrNotFound) {
				t.Errorf("the cancelled run's result was stored: %v", err)
			}
			if ev := b.events()["ta"]; len(ev) != 1 || ev[0].Status != topics.StatusCancelled {
				t.Errorf("owner's task: %+v", ev)
			}
			if h := b.holder(ta); h != "" {
				t.Errorf("owner entry pending under %q", h)
			}
			if _, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Key: "f2", Token: a.Token, Result: []byte(`1`)}); !errors.Is(err, flight.ErrCancelled) {
				t.Errorf("write-back of the cancelled run: %v", err)
			}
		})
		t.Run("OwnResultJustAfterExpireAtIsAccepted", func(t *testing.T) {
			a, _ := b.own("f3")
			b.set("f3", "expireAt", "now-1ms")
			if _, err := b.c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrExpired) {
				t.Fatalf("heartbeat: %v", err)
			}
			st, err := b.complete(*a.Owner, `"in time"`)
			if err != nil || !st.Answered {
				t.Fatalf("complete just after expireAt: %+v %v", st, err)
			}
			if m := b.get("f3"); m.Status != flight.StatusSucceeded {
				t.Errorf("status %s", m.Status)
			}
			// The write-back of the same outcome follows the same rule: the stored result stands.
			if _, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Key: "f3", Token: a.Token, Result: []byte(`"in time"`)}); err != nil {
				t.Errorf("write-back of the same outcome: %v", err)
			}
		})
		t.Run("ResultOfARunExpiredForGoodIsRefused", func(t *testing.T) {
			a, _ := b.own("f4")
			b.set("f4", "expireAt", "now-1ms", "attempts", "3")
			if d := b.acquire("f4", "B", b.task("tb4")); d.Action != flight.ActionExpired {
				t.Fatalf("acquire: %+v", d)
			}
			if _, err := b.complete(*a.Owner, `"late"`); !errors.Is(err, flight.ErrExpired) {
				t.Fatalf("complete after the flight expired for good: %v", err)
			}
			if _, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Key: "f4", Token: a.Token, Result: []byte(`1`)}); !errors.Is(err, flight.ErrExpired) {
				t.Errorf("write-back: %v", err)
			}
		})
		t.Run("TokenOlderThanAnyFenceIsRefused", func(t *testing.T) {
			old := (time.Now().Add(-24 * time.Hour).UnixMicro())
			_, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Key: "f5", Token: old, Result: []byte(`1`)})
			if !errors.Is(err, flight.ErrStaleToken) {
				t.Errorf("restore of a day-old token without a fence: %v", err)
			}
		})
		t.Run("LostMetaIsWrittenBackByItsOwner", func(t *testing.T) {
			a, _ := b.own("f6")
			b.rdb.Del(b.ctx, b.ks.Flight("f6"), b.ks.Fence("f6")) // Redis restarted without persistence
			st, err := b.complete(*a.Owner, `"kept"`)
			if err != nil || !st.Restored || !st.Answered {
				t.Fatalf("complete with the meta gone: %+v %v", st, err)
			}
			m := b.get("f6")
			if m.Status != flight.StatusSucceeded || m.OwnerToken != a.Token || m.Fields["restoredAt"] == "" {
				t.Errorf("meta %+v", m)
			}
			if d := b.acquire("f6", "B", b.task("tb6")); d.Action != flight.ActionResultHit {
				t.Errorf("next acquire %+v", d)
			}
		})
	})
}

// TestIdempotentOwnerCalls: complete and fail retried with the same token (a reply lost on the
// way back) succeed again with the same outcome.
func TestIdempotentOwnerCalls(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		a, _ := b.own("i1")
		tf := b.task("tf")
		b.acquire("i1", "B", tf)
		if _, err := b.complete(*a.Owner, `"v"`); err != nil {
			t.Fatal(err)
		}
		st, err := b.complete(*a.Owner, `"v"`)
		if err != nil || !st.Answered {
			t.Fatalf("complete retried: %+v %v", st, err)
		}
		evs := b.events()
		if len(evs["ta"]) < 1 || evs["ta"][len(evs["ta"])-1].Shared != topics.SharedOwner {
			t.Errorf("the retried owner's task must stay labelled owner: %+v", evs["ta"])
		}
		if len(evs["tf"]) != 1 {
			t.Errorf("parked task answered %d times", len(evs["tf"]))
		}

		f, _ := b.own("i2")
		fail := flight.Failure{Type: "bad_request", Code: "400", Message: "no"}
		if _, err := b.c.Fail(b.ctx, *f.Owner, fail, 0); err != nil {
			t.Fatal(err)
		}
		st, err = b.c.Fail(b.ctx, *f.Owner, fail, 0)
		if err != nil || !st.Final || !st.Answered {
			t.Errorf("fail retried: %+v %v", st, err)
		}
	})
}

// TestCancelMeansCancel covers issue-level rule 5.
func TestCancelMeansCancel(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		for _, c := range []struct {
			name    string
			arrange func(key string)
		}{
			{"FailedRetryable", func(key string) {
				a, _ := b.own(key)
				if _, err := b.c.Fail(b.ctx, *a.Owner, flight.Failure{Retryable: true, Type: "upstream", Code: "503"}, 0); err != nil {
					t.Fatal(err)
				}
			}},
			{"ExpiredWithAttemptsLeft", func(key string) {
				a, _ := b.own(key)
				b.set(key, "expireAt", "now-1ms")
				if _, err := b.c.Heartbeat(b.ctx, *a.Owner, ""); !errors.Is(err, flight.ErrExpired) {
					t.Fatal(err)
				}
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				key := "c-" + c.name
				c.arrange(key)
				out, err := b.c.Cancel(b.ctx, key, "no more", cancelParams())
				if err != nil || out.Already {
					t.Fatalf("cancel: %+v %v", out, err)
				}
				if d := b.acquire(key, "B", b.task("tb-"+c.name)); d.Action != flight.ActionCancelled || d.Owner != nil {
					t.Errorf("acquire after cancel: %+v (the model must not run again)", d)
				}
			})
		}
		t.Run("SecondCancelSaysSo", func(t *testing.T) {
			b.own("c2")
			if _, err := b.c.Cancel(b.ctx, "c2", "first", cancelParams()); err != nil {
				t.Fatal(err)
			}
			out, err := b.c.Cancel(b.ctx, "c2", "second", cancelParams())
			if err != nil || !out.Already || out.Reason != "first" {
				t.Errorf("second cancel: %+v %v", out, err)
			}
		})
		t.Run("ReasonReachesEveryEvent", func(t *testing.T) {
			b.rdb.Del(b.ctx, b.ks.Results(testStage))
			a, _ := b.own("c3")
			tf := b.task("tf3")
			b.acquire("c3", "B", tf)
			if _, err := b.c.Cancel(b.ctx, "c3", "interview closed", cancelParams()); err != nil {
				t.Fatal(err)
			}
			// The owner sees the cancel and answers its own task through acquire.
			d := b.acquireWith(flight.AcquireParams{Key: "c3", OwnerID: "A", Task: a.Owner.Task})
			if d.Action != flight.ActionCancelled {
				t.Fatalf("owner's acquire: %+v", d)
			}
			for id, evs := range b.events() {
				if len(evs) != 1 || evs[0].Status != topics.StatusCancelled || evs[0].Error != "interview closed" {
					t.Errorf("%s: %+v", id, evs)
				}
			}
		})
		t.Run("EndedFlightRefused", func(t *testing.T) {
			a, _ := b.own("c4")
			if _, err := b.c.Fail(b.ctx, *a.Owner, flight.Failure{Type: "bad_request", Code: "400"}, 0); err != nil {
				t.Fatal(err)
			}
			var se *flight.StateError
			if _, err := b.c.Cancel(b.ctx, "c4", "x", cancelParams()); !errors.As(err, &se) || se.Status != flight.StatusFailed {
				t.Errorf("cancel of a final failure: %v", err)
			}
			if _, err := b.c.Cancel(b.ctx, "none", "x", cancelParams()); !errors.Is(err, flight.ErrNotFound) {
				t.Errorf("cancel of nothing: %v", err)
			}
		})
	})
}

// TestVanishedFlight covers issue-level rule 2: a flight whose meta disappears mid-run is not a
// stale token: the owner's heartbeat writes it back, duplicates follow, everybody is answered.
func TestVanishedFlight(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		a, ta := b.own("v")
		tf := b.task("tf")
		b.acquire("v", "B", tf)
		b.rdb.Del(b.ctx, b.ks.Flight("v"), b.ks.Waiters("v")) // lost writes
		restored, err := b.c.Heartbeat(b.ctx, *a.Owner, "")
		if err != nil || !restored {
			t.Fatalf("heartbeat: restored %v, %v", restored, err)
		}
		tg := b.task("tg")
		if d := b.acquire("v", "C", tg); d.Action != flight.ActionFollowerWait || d.Reason != flight.ReasonParked || d.Token != a.Token {
			t.Fatalf("a duplicate after the loss: %+v (it must follow the live owner)", d)
		}
		if _, err := b.complete(*a.Owner, `"r"`); err != nil {
			t.Fatal(err)
		}
		// tf's waiter record was lost with the meta: its entry stays parked (pending) until a
		// parked-entry check acquires for it, which answers it from the result.
		if h := b.holder(tf); h != topics.ParkingConsumer {
			t.Fatalf("tf held by %q", h)
		}
		if d := b.acquire("v", "sweeper", tf); d.Action != flight.ActionResultHit {
			t.Errorf("check of the orphaned parked task: %+v", d)
		}
		b.checkAnswers(t, []answered{{"ta", topics.SharedOwner, topics.StatusSucceeded},
			{"tg", topics.SharedFollower, topics.StatusSucceeded}, {"tf", topics.SharedHit, topics.StatusSucceeded}},
			map[string]flight.Task{"ta": ta, "tf": tf, "tg": tg})
	})
}

// TestPinnedPolicy covers issue-level rule 7: a live flight is judged by its owner's policy,
// never by the caller's (a rolling deploy with a shorter lease takes nothing over).
func TestPinnedPolicy(t *testing.T) {
	b := setup(t)
	long := b.pol
	long.Lease = 5 * time.Second
	d := b.acquireWith(flight.AcquireParams{Key: "p", OwnerID: "A", Task: b.task("ta"), Start: true, Policy: long})
	b.set("p", "heartbeatAt", "now-2s")
	short := b.pol
	short.Lease, short.MaxAttempts = time.Second, 1
	got := b.acquireWith(flight.AcquireParams{Key: "p", OwnerID: "B", Task: b.task("tb"), Policy: short})
	if got.Action != flight.ActionFollowerWait || got.Token != d.Token || got.Lease != 5*time.Second {
		t.Errorf("a caller with a 1 s lease judged a 2 s old heartbeat of a 5 s lease: %+v", got)
	}
	if m := b.get("p"); m.Policy.Lease != 5*time.Second || m.Policy.MaxAttempts != 3 {
		t.Errorf("pinned policy %+v", m.Policy)
	}
}

// TestPinnedFenceTTL: a flight that an acquire ends EXPIRED for good keeps its fence for its
// own owner's lifetime (the pinned policy's fence TTL), not the shorter one of the caller that
// ended it: a zombie of the long policy must find the fence for as long as it may still run.
func TestPinnedFenceTTL(t *testing.T) {
	long := flight.Policy{Lease: 5 * time.Second, RunningTTL: time.Hour, ResultTTL: 10 * time.Minute,
		FailureTTL: 2 * time.Minute, MaxAttempts: 1}
	short := flight.Policy{Lease: time.Second, RunningTTL: time.Second, ResultTTL: time.Second,
		FailureTTL: time.Second, MaxAttempts: 1}
	for _, c := range []struct {
		name   string
		fields []string // what the long owner's record becomes before the short caller comes
	}{
		{"lease lapsed", []string{"heartbeatAt", "now-6s"}},
		{"expired by its own heartbeat", []string{"status", "EXPIRED"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			d := b.acquireWith(flight.AcquireParams{Key: "p", OwnerID: "A", Task: b.task("ta"), Start: true, Policy: long})
			b.set("p", c.fields...)
			got := b.acquireWith(flight.AcquireParams{Key: "p", OwnerID: "B", Task: b.task("tb"), Policy: short})
			if got.Action != flight.ActionExpired {
				t.Fatalf("acquire: %+v, want EXPIRED (the long owner's only attempt is spent)", got)
			}
			f, err := b.rdb.Get(b.ctx, b.ks.Fence("p")).Result()
			if err != nil || f != strconv.FormatInt(d.Token, 10)+":x" {
				t.Fatalf("fence %q %v, want the owner's token closed", f, err)
			}
			b.checkFenceTTL("p", long.FenceTTL())
		})
	}
	t.Run("written back", func(t *testing.T) {
		// A result spooled while Redis was away keeps the owner's policy: its write-back of a
		// record Redis lost sets the owner's fence TTL, not the default policy's.
		b := setup(t)
		d := b.acquireWith(flight.AcquireParams{Key: "w", OwnerID: "A", Task: b.task("tw"), Start: true, Policy: long})
		b.rdb.Del(b.ctx, b.ks.Flight("w"))
		if _, err := b.c.Restore(b.ctx, flight.Outcome{Stage: testStage, Tenant: "acme", Key: "w", Token: d.Token,
			OwnerID: "A", Attempts: 1, Result: []byte(`1`), ResultTTL: long.ResultTTL, RunningTTL: long.RunningTTL,
			FailureTTL: long.FailureTTL}); err != nil {
			t.Fatal(err)
		}
		b.checkFenceTTL("w", long.FenceTTL())
	})
}

// checkFenceTTL fails unless key's fence lives about want more (a minute of slack).
func (b *bundle) checkFenceTTL(key string, want time.Duration) {
	b.t.Helper()
	ttl, err := b.rdb.PTTL(b.ctx, b.ks.Fence(key)).Result()
	if err != nil || ttl < want-time.Minute || ttl > want {
		b.t.Errorf("fence TTL of %s: %v %v, want the owner's fence TTL %v", key, ttl, err, want)
	}
}

// TestArchiveLabelSurvivesALostReply: an owner that ended its flight with an archived outcome
// and lost the reply (its consumer crashed before it saw it) acquires again with the same task:
// its event says "archive" again, not "owner" (no model ran under that token).
func TestArchiveLabelSurvivesALostReply(t *testing.T) {
	for _, c := range []struct {
		name string
		a    flight.Archived
		want flight.Action
	}{
		{"succeeded", flight.Archived{Status: flight.StatusSucceeded, Result: []byte(`{"v":1}`)}, flight.ActionResultHit},
		{"failed", flight.Archived{Status: flight.StatusFailed, ErrorType: "model", ErrorCode: "bad", Error: "no"}, flight.ActionFailedFinal},
		{"cancelled", flight.Archived{Status: flight.StatusCancelled, Error: "stop"}, flight.ActionCancelled},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := setup(t)
			ta := b.task("ta")
			d := b.acquireWith(flight.AcquireParams{Key: "a", OwnerID: "A", Task: ta, Start: true})
			c.a.Key, c.a.Stage, c.a.Tenant, c.a.Token, c.a.Attempts = "a", testStage, "acme", 1, 1
			// An archived cancellation answers the owner's complete with ErrCancelled.
			if _, err := b.c.Rehydrate(b.ctx, *d.Owner, c.a); err != nil && !errors.Is(err, flight.ErrCancelled) {
				t.Fatal(err)
			}
			again := b.acquireWith(flight.AcquireParams{Key: "a", OwnerID: "A", Task: ta})
			if again.Action != c.want || again.Shared != topics.SharedArchive {
				t.Errorf("acquire again: %s shared %q, want %s shared archive", again.Action, again.Shared, c.want)
			}
			evs := b.events()["ta"]
			if len(evs) != 2 || evs[0].Shared != topics.SharedArchive || evs[1].Shared != topics.SharedArchive {
				t.Errorf("events of ta: %+v, want two with shared archive", evs)
			}
		})
	}
}

// TestDeadline: a caller whose deadline passed gets EXPIRED (deadline_passed) instead of
// running or following, but a stored outcome still answers it (a redelivered copy of a
// finished task gets the original outcome).
func TestDeadline(t *testing.T) {
	b := setup(t)
	past := time.Now().Add(-time.Second)
	late := b.acquireWith(flight.AcquireParams{Key: "d", OwnerID: "A", Task: b.task("late"), Deadline: past})
	if late.Action != flight.ActionExpired || late.Reason != flight.ReasonDeadlinePassed {
		t.Fatalf("late task: %+v", late)
	}
	if _, err := b.c.Get(b.ctx, "d"); !errors.Is(err, flight.ErrNotFound) {
		t.Errorf("a late task created a flight: %v", err)
	}
	a, _ := b.own("d")
	if _, err := b.complete(*a.Owner, `"done"`); err != nil {
		t.Fatal(err)
	}
	again := b.acquireWith(flight.AcquireParams{Key: "d", OwnerID: "B", Task: b.task("redelivered"), Deadline: past})
	if again.Action != flight.ActionResultHit {
		t.Errorf("redelivered finished task: %+v", again)
	}
	ev := b.events()
	if e := ev["late"]; len(e) != 1 || e[0].Status != topics.StatusExpired || e[0].ErrorCode != "deadline_passed" {
		t.Errorf("late event %+v", e)
	}
	if e := ev["redelivered"]; len(e) != 1 || e[0].Status != topics.StatusSucceeded {
		t.Errorf("redelivered event %+v", e)
	}
}

// TestEventsAreValidJSON: events built by the scripts decode with the client's decoder, also
// with awkward task ids and error texts, and results too large or not JSON are not inlined.
func TestEventsAreValidJSON(t *testing.T) {
	modes(t, func(t *testing.T, b *bundle) {
		a, _ := b.own("j")
		big := `"` + strings.Repeat("x", 70<<10) + `"`
		if _, err := b.complete(*a.Owner, big); err != nil {
			t.Fatal(err)
		}
		ev := b.events()["ta"]
		if len(ev) != 1 || ev[0].Result != nil || ev[0].ResultRef == "" {
			t.Errorf("large result inlined: %d bytes", len(ev[0].Result))
		}
		c, _ := b.own("j2")
		if _, err := b.c.Fail(b.ctx, *c.Owner, flight.Failure{Type: "t\"y", Code: "c\\d", Message: "line\nbreak \u2028 \x01"}, 0); err != nil {
			t.Fatal(err)
		}
		evs := b.events()["ta"]
		last := evs[len(evs)-1]
		if last.ErrorType != "t\"y" || last.ErrorCode != "c\\d" || last.Error != "line\nbreak \u2028 \x01" {
			t.Errorf("escaped fields %+v", last)
		}
		d, _ := b.own("j3")
		if _, err := b.complete(*d.Owner, `not json`); err != nil {
			t.Fatal(err)
		}
		evs = b.events()["ta"]
		if last := evs[len(evs)-1]; last.Result != nil || last.ResultRef == "" {
			t.Errorf("non-JSON result inlined: %+v", last)
		}
		// JSON results are inlined compact; white space inside strings stays.
		for i, doc := range []string{`{"a":"x y","b":[1,2]}`, "{ \"a\" : \"x y\",\n \"b\": [1, 2] }"} {
			o, _ := b.own("j4" + strings.Repeat("x", i))
			if _, err := b.complete(*o.Owner, doc); err != nil {
				t.Fatal(err)
			}
			evs = b.events()["ta"]
			if last := evs[len(evs)-1]; string(last.Result) != `{"a":"x y","b":[1,2]}` {
				t.Errorf("result %q inlined as %q", doc, last.Result)
			}
		}
		e, _ := b.own("j5")
		if _, err := b.complete(*e.Owner, `{"a":"x y"`); err != nil {
			t.Fatal(err)
		}
		evs = b.events()["ta"]
		if last := evs[len(evs)-1]; last.Result != nil {
			t.Errorf("truncated JSON inlined: %q", last.Result)
		}
	})
}
