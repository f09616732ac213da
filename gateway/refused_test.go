package gateway

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// TestRedisRefusalIsInternal: when Redis refuses the gateway's ACL user a command, at top
// level or inside a script or function, the gateway answers 500 internal, which retrying
// does not cure, not 503 redis_unavailable, and logs Redis's refusal. When Redis lost the
// flight functions and the user may not load them, it answers 503 with Retry-After instead:
// a consumer loads them at start.
func TestRedisRefusalIsInternal(t *testing.T) {
	for _, tc := range []struct {
		name, rules, logged string
		status              int
		code                string
		flush               bool
	}{
		{"function", "-fcall", "NOPERM", http.StatusInternalServerError, codeInternal, false},
		{"script", "-hkeys", "can't run this command", http.StatusInternalServerError, codeInternal, false},
		{"library missing", "-function|load", "not loaded", http.StatusServiceUnavailable, codeRedisUnavailable, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A private server, so that no user with these rules outlives the test elsewhere.
			srv := redistest.Start(t, &redistest.Options{ACL: []string{"user gw on >pw ~* +@all " + tc.rules}})
			b := newBundle(t, func(c *Config) {
				restricted := redis.NewClient(&redis.Options{Addr: srv.Addr(), Username: "gw", Password: "pw"})
				t.Cleanup(func() { restricted.Close() })
				c.Client = restricted
			})
			b.rdb, b.url = srv.Client(), srv.URL() // the consumer runs as the default user
			b.consumer(b.shared)
			var d struct{ Receipt struct{ RequestKey string } }
			r := b.do("POST", "/v1/stages/"+stage+"/tasks?wait=30s", acmeSecret, `{"input":{"q":"refused"}}`)
			r.json(t, &d)
			if r.status != http.StatusOK {
				t.Fatalf("enqueue and wait: %d %s", r.status, r.body)
			}
			if tc.flush {
				if err := b.rdb.FunctionFlush(context.Background()).Err(); err != nil {
					t.Fatal(err)
				}
			}
			// The cancel runs the schedule_cancel script, then the flight library's cancel.
			r = b.do("POST", "/v1/keys/"+d.Receipt.RequestKey+"/cancel", acmeSecret, nil)
			if r.status != tc.status || r.code() != tc.code || (r.header.Get("Retry-After") != "") != (tc.status == http.StatusServiceUnavailable) {
				t.Errorf("cancel under %s: %d %s (Retry-After %q), want %d %s", tc.rules, r.status, r.body,
					r.header.Get("Retry-After"), tc.status, tc.code)
			}
			if logs := b.logs.String(); !strings.Contains(logs, tc.logged) {
				t.Errorf("the log has no %q:\n%s", tc.logged, logs)
			}
		})
	}
}
