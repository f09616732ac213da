package admin

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
)

// evictionTTL is how long the overview shows a policy it read before it reads it again. The
// page polls every second, and the policy seldom changes.
const evictionTTL = 10 * time.Second

// evictionCache keeps Redis's maxmemory-policy for the overview. It reads it at most every
// evictionTTL, and not at all once the credential was refused both ways, since asking again
// would only fill Redis's ACL log.
type evictionCache struct {
	mu     sync.Mutex
	at     time.Time
	value  string
	closed bool
}

// policy returns the cached policy, reading it again when it is older than evictionTTL. It
// returns "" when the policy cannot be read.
func (c *evictionCache) policy(ctx context.Context, rdb redis.UniversalClient) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || time.Since(c.at) < evictionTTL {
		return c.value
	}
	p, err := broker.EvictionPolicy(ctx, rdb)
	c.at, c.value = time.Now(), p
	if errors.Is(err, broker.ErrPolicyRefused) {
		c.closed = true
	}
	return c.value
}
