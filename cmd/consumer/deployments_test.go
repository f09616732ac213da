package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestTwoDeploymentsOnOneHost: two stock consumers named c1, with the same prefix and the
// same spool directory but two Redis servers, both run on one host and each answers its own
// deployment's tasks; a consumer named c1 of one of them is still refused while the first
// runs (its spool is that deployment's).
func TestTwoDeploymentsOnOneHost(t *testing.T) {
	a, b := redistest.Start(t, nil), redistest.Start(t, nil)
	prefix := redistest.Prefix()
	ea := newE2EOn(t, a.Client(), a.URL(), prefix)
	eb := newE2EOn(t, b.Client(), b.URL(), prefix)
	eb.spool = ea.spool
	ea.stages, eb.stages = "interview-evaluation", "interview-evaluation"
	ea.start("c1")
	eb.start("c1")
	ea.enqueue(task("a0", "interview-evaluation", 1, 0))
	eb.enqueue(task("b0", "interview-evaluation", 2, 0))
	ea.expectAnswered(ids("a", 1), 20*time.Second)
	eb.expectAnswered(ids("b", 1), 20*time.Second)
	// A second c1 of deployment a on this host: the live one holds that deployment's spool.
	out := ea.failAtStart(t, "c1", []string{"REDIS_URL=" + ea.url}, "--redis-wait", "0")
	if !strings.Contains(out, "consumer name in use") {
		t.Errorf("a second c1 of one deployment: %s", out)
	}
}
