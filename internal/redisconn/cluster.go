package redisconn

import (
	"fmt"
	"net/url"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// IsCluster reports whether rawURL names a Redis Cluster: a redis:// or rediss:// URL whose
// query lists more seed nodes with addr=, e.g.
// redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000.
func IsCluster(rawURL string) bool {
	u, err := url.Parse(rawURL)
	return err == nil && u.Query().Has("addr")
}

// Universal returns a function making a new client for rawURL at every call: a cluster client for
// a cluster URL (IsCluster), a single-node client otherwise. Either honours context deadlines.
// Errors never repeat the URL.
func Universal(rawURL string) (func() redis.UniversalClient, error) {
	if !IsCluster(rawURL) {
		opt, err := Options(rawURL)
		if err != nil {
			return nil, err
		}
		return Factory(opt), nil
	}
	opt, err := redis.ParseClusterURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("redisconn: invalid Redis Cluster URL: %w", err)
	}
	return func() redis.UniversalClient { return NewClusterClient(opt) }, nil
}

// NewClusterClient returns a cluster client on a copy of opt, with context deadlines honoured
// and maintenance notifications off (see NewClient).
func NewClusterClient(opt *redis.ClusterOptions) *redis.ClusterClient {
	o := *opt
	o.ContextTimeoutEnabled = true
	o.MaintNotificationsConfig = &maintnotifications.Config{Mode: maintnotifications.ModeDisabled}
	return redis.NewClusterClient(&o)
}
