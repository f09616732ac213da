package main_test

import (
	"encoding/json"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestEvictionPolicyGuarded: on a Redis that may evict keys (maxmemory 64mb, allkeys-lru) a
// stock consumer warns at start naming the policy, and /readyz, /metrics and the dashboard's
// overview show it; once the policy is noeviction they stop showing it at the next beats.
// With --require-noeviction a consumer refuses to start on such a Redis.
func TestEvictionPolicyGuarded(t *testing.T) {
	srv := redistest.Start(t, &redistest.Options{Args: []string{"--maxmemory", "64mb", "--maxmemory-policy", "allkeys-lru"}})
	e := newE2EOn(t, srv.Client(), srv.URL(), redistest.Prefix())
	token := secret(t, "ui-read-")
	p := e.startWith("ev1", []string{"REDIS_URL=" + e.url, "FLIGHTDECK_UI_READ_TOKEN=" + token}, true)
	b, err := os.ReadFile(p.logPath)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"maxmemoryPolicy":"allkeys-lru"`) || !strings.Contains(string(b), "Redis may evict keys") {
		t.Errorf("no warning naming the policy at start:\n%s", b)
	}
	shows := func(policy string) bool {
		_, ready := httpGet(t, "http://"+p.http+"/readyz", "", "")
		_, metrics := httpGet(t, "http://"+p.http+"/metrics", "", "")
		code, body := httpGet(t, "http://"+p.http+"/ui/api/overview", "", token)
		var ov struct {
			EvictionPolicy string `json:"evictionPolicy"`
		}
		if code != http.StatusOK || json.Unmarshal([]byte(body), &ov) != nil {
			t.Fatalf("overview: %d %.300s", code, body)
		}
		warned := strings.Contains(ready, "maxmemory-policy is "+policy)
		if policy == "noeviction" {
			warned = !strings.Contains(ready, "maxmemory-policy")
		}
		return warned && ov.EvictionPolicy == policy &&
			strings.Contains(metrics, `flightdeck_redis_maxmemory_policy{policy="`+policy+`"} 1`) &&
			strings.Count(metrics, "flightdeck_redis_maxmemory_policy{") == 1
	}
	if !shows("allkeys-lru") {
		_, ready := httpGet(t, "http://"+p.http+"/readyz", "", "")
		t.Errorf("allkeys-lru not shown on /readyz, /metrics and the overview; /readyz: %s", ready)
	}
	if err := e.rdb.ConfigSet(e.ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(25 * time.Second) // the overview reads the policy every 10 s
	for !shows("noeviction") {
		if time.Now().After(deadline) {
			t.Fatal("still showing an eviction policy after noeviction was set")
		}
		time.Sleep(100 * time.Millisecond)
	}

	if err := e.rdb.ConfigSet(e.ctx, "maxmemory-policy", "volatile-lru").Err(); err != nil {
		t.Fatal(err)
	}
	out := e.failAtStart(t, "ev2", []string{"REDIS_URL=" + e.url}, "--require-noeviction")
	if !strings.Contains(out, "maxmemory-policy is volatile-lru") {
		t.Errorf("--require-noeviction: the refusal does not name the policy:\n%s", out)
	}
	if err := e.rdb.ConfigSet(e.ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	e.startWith("ev4", []string{"REDIS_URL=" + e.url}, true, "--require-noeviction").stop(t)
}
