package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestRedisRefusalIsInternal: when Redis refuses the gateway's ACL user a command, at top
// level or inside a script or function, the gateway answers 500 internal, which retrying
// does not cure, not 503 redis_unavailable, and logs Redis's refusal.
func TestRedisRefusalIsInternal(t *testing.T) {
	for _, tc := range []struct{ name, rules, logged string }{
		{"function", "-fcall", "NOPERM"},
		{"script", "-hkeys", "can't run this command"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := newBundle(t, func(c *Config) {
				user := fmt.Sprintf("gw-refused-%d", time.Now().UnixNano())
				ctx := context.Background()
				if err := c.Client.Do(ctx, "ACL", "SETUSER", user, "on", ">pw", "~*", "+@all", tc.rules).Err(); err != nil {
					t.Fatal(err)
				}
				admin := c.Client
				t.Cleanup(func() { admin.Do(context.Background(), "ACL", "DELUSER", user) })
				opts := *c.Client.(*redis.Client).Options()
				opts.Username, opts.Password = user, "pw"
				restricted := redis.NewClient(&opts)
				t.Cleanup(func() { restricted.Close() })
				c.Client = restricted
			})
			b.consumer(b.shared)
			var d struct{ Receipt struct{ RequestKey string } }
			r := b.do("POST", "/v1/stages/"+stage+"/tasks?wait=30s", acmeSecret, `{"input":{"q":"refused"}}`)
			r.json(t, &d)
			if r.status != http.StatusOK {
				t.Fatalf("enqueue and wait: %d %s", r.status, r.body)
			}
			// The cancel runs the schedule_cancel script, then the flight library's cancel.
			r = b.do("POST", "/v1/keys/"+d.Receipt.RequestKey+"/cancel", acmeSecret, nil)
			if r.status != http.StatusInternalServerError || r.code() != codeInternal || r.header.Get("Retry-After") != "" {
				t.Errorf("cancel under %s: %d %s (Retry-After %q), want 500 internal", tc.rules, r.status, r.body, r.header.Get("Retry-After"))
			}
			if logs := b.logs.String(); !strings.Contains(logs, tc.logged) {
				t.Errorf("the log has no %q:\n%s", tc.logged, logs)
			}
		})
	}
}
