package redistest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a private Redis Cluster of local redis-server processes, one master per node and
// no replicas, stopped in t.Cleanup.
type Cluster struct {
	tb    testing.TB
	nodes []*Server
}

// StartCluster starts masters redis-server processes with cluster-enabled, joins them with
// `redis-cli --cluster create` and waits until every slot is served.
func StartCluster(tb testing.TB, masters int) *Cluster {
	tb.Helper()
	c := &Cluster{tb: tb}
	for range masters {
		c.nodes = append(c.nodes, Start(tb, &Options{Args: []string{"--cluster-enabled", "yes",
			"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no"}}))
	}
	args := []string{"--cluster", "create"}
	args = append(args, c.Addrs()...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		tb.Fatalf("redistest: redis-cli not found (it comes with redis-server; run `make deps`): %v", err)
	}
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		tb.Fatalf("redistest: cluster create: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range c.nodes {
		cl := n.Client()
		for {
			info, err := cl.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_slots_ok:16384") {
				break
			}
			if ctx.Err() != nil {
				tb.Fatalf("redistest: cluster did not become ready: %v %s", err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// Addrs are the nodes' host:port addresses.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// Node returns the i-th node's server, to stop or pause one master.
func (c *Cluster) Node(i int) *Server { return c.nodes[i] }

// URL is the cluster form of REDIS_URL: redis://<first>?addr=<second>&addr=<third>...
func (c *Cluster) URL() string {
	a := c.Addrs()
	u := "redis://" + a[0]
	for i, x := range a[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += fmt.Sprintf("%saddr=%s", sep, x)
	}
	return u
}

// Client returns a cluster client, closed in Cleanup.
func (c *Cluster) Client() *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
	c.tb.Cleanup(func() { _ = cl.Close() })
	return cl
}
