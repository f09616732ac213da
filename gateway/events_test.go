package gateway

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// eventsOf reads n event messages of s, failing on one of another tenant than tenant, and
// returns their task ids and the id of the last.
func eventsOf(t *testing.T, s *sse, tenant string, n int) (ids []string, last string) {
	t.Helper()
	for len(ids) < n {
		m := s.next(60 * time.Second)
		if m.data == "" || m.event != "" {
			continue
		}
		var ev topics.Event
		if err := json.Unmarshal([]byte(m.data), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Tenant != tenant {
			t.Fatalf("%s's stream carried an event of %s", tenant, ev.Tenant)
		}
		ids, last = append(ids, ev.TaskID), m.id
	}
	return ids, last
}

// TestEventsResume: a tenant's stream carries its terminal events in order and no other
// tenant's, on a shared prefix. A client that disconnects after some and reconnects with
// the last id it read gets every later event, those of tasks enqueued while it was away
// included, each exactly once.
func TestEventsResume(t *testing.T) {
	b := newBundle(t, nil)
	b.consumer(b.shared)
	s := b.events(acmeSecret, stage, "")
	if s.res.StatusCode != http.StatusOK || s.res.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d", s.res.StatusCode)
	}
	if m := s.next(10 * time.Second); m.event != "ready" || !m.hasID {
		t.Fatalf("first message %+v, want ready with an id", m)
	}
	enqueue := func(secret string, n int, tag string) []string {
		var ids []string
		for i := range n {
			id := fmt.Sprintf("%s-%d", tag, i)
			r := b.do("POST", "/v1/stages/"+stage+"/tasks?wait=30s", secret, fmt.Sprintf(`{"input":{"n":"%s"},"taskId":"%s"}`, id, id))
			if r.status != http.StatusOK {
				t.Fatalf("POST %s: %d %s", id, r.status, r.body)
			}
			ids = append(ids, id)
		}
		return ids
	}
	want := enqueue(acmeSecret, 4, "first")
	enqueue(betaSecret, 2, "beta")
	got, last := eventsOf(t, s, "acme", 2)
	s.close()
	want = append(want, enqueue(acmeSecret, 3, "second")...)
	s = b.events(acmeSecret, stage, last)
	if m := s.next(10 * time.Second); m.event != "ready" || m.id != last {
		t.Fatalf("after a resume, the ready message %+v, want id %q", m, last)
	}
	more, _ := eventsOf(t, s, "acme", len(want)-len(got))
	got = append(got, more...)
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("events %v, want %v once each in order", got, want)
	}
}

// TestEventsRefused: a stream without stages, with a malformed Last-Event-ID or of a stage
// the gateway does not serve is refused, and a token may hold MaxStreamsPerToken streams at
// once, no more.
func TestEventsRefused(t *testing.T) {
	b := newBundle(t, func(c *Config) {
		c.Stages = []string{stage}
		c.MaxStreamsPerToken = 1
	})
	for _, tc := range []struct {
		stages, lastID string
		status         int
		code           string
	}{
		{"", "", 400, codeBadRequest},
		{"Bad_Stage", "", 400, codeBadRequest},
		{"other-stage", "", 403, codeStageNotAllowed},
		{stage, "garbage", 400, codeBadRequest},
		{stage, stage + "=x-1", 400, codeBadRequest},
		{stage, stage + "=1-0," + stage + "=2-0", 400, codeBadRequest}, // a stage twice
		{stage, stage + "=99999999999999-0", 400, codeBadRequest},      // far past the stream
		{stage, stage + "=" + strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10), 400, codeBadRequest},
	} {
		s := b.events(acmeSecret, tc.stages, tc.lastID)
		var e errorBody
		_ = json.NewDecoder(s.res.Body).Decode(&e)
		if s.res.StatusCode != tc.status || e.Code != tc.code {
			t.Errorf("stages %q Last-Event-ID %q: %d %s", tc.stages, tc.lastID, s.res.StatusCode, e.Code)
		}
	}
	s := b.events(acmeSecret, stage, "")
	if m := s.next(10 * time.Second); m.event != "ready" {
		t.Fatalf("first stream: %+v", m)
	}
	second := b.events(acmeSecret, stage, "")
	if second.res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("a second stream of the token: %d", second.res.StatusCode)
	}
	if other := b.events(betaSecret, stage, ""); other.res.StatusCode != http.StatusOK {
		t.Errorf("another token's stream: %d", other.res.StatusCode)
	}
}
