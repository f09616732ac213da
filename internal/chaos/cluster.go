package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
)

// clusterMasters and clusterReplicas shape the run's own Redis Cluster: 3 masters, each with
// one replica.
const (
	clusterMasters  = 3
	clusterReplicas = 1
)

// localCluster is the run's own Redis Cluster, set by Config.RedisCluster. It is six
// redis-server processes joined with `redis-cli --cluster create ... --cluster-replicas 1`.
// Each has its own directory and nodes.conf, with AOF on and appendfsync always.
// localCluster implements Cluster.
type localCluster struct {
	nodes []*redisServer
	logf  func(format string, args ...any)

	mu     sync.Mutex
	killed map[int]*redisServer
	added  int // masters added by Reshard so far. Each was removed again.
}

var _ Cluster = (*localCluster)(nil)

// startCluster starts the nodes under dir/node<i>, creates the cluster and waits until every
// slot is served and every master has a synced replica.
func startCluster(dir string, logf func(string, ...any)) (*localCluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, fmt.Errorf("redis-cli not found (it comes with redis-server; run `make deps`): %w", err)
	}
	c := &localCluster{logf: logf, killed: map[int]*redisServer{}}
	for i := range clusterMasters * (1 + clusterReplicas) {
		n, err := startRedis(filepath.Join(dir, fmt.Sprintf("node%d", i+1)),
			"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no")
		if err != nil {
			c.stop(syscall.SIGKILL)
			return nil, fmt.Errorf("chaos: start cluster node %d: %w", i+1, err)
		}
		c.nodes = append(c.nodes, n)
	}
	args := append([]string{"--cluster", "create"}, c.addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(clusterReplicas), "--cluster-yes")
	if out, err := exec.Command(cli, args...).CombinedOutput(); err != nil {
		c.stop(syscall.SIGKILL)
		return nil, fmt.Errorf("chaos: redis-cli --cluster create: %w\n%s", err, out)
	}
	if err := c.waitHealthy(60 * time.Second); err != nil {
		c.stop(syscall.SIGKILL)
		return nil, err
	}
	return c, nil
}

func (c *localCluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.Addr()
	}
	return out
}

// URL is the cluster form of REDIS_URL, with every node as a seed.
func (c *localCluster) URL() string {
	a := c.addrs()
	u := "redis://" + a[0]
	for i, x := range a[1:] {
		sep := "&"
		if i == 0 {
			sep = "?"
		}
		u += sep + "addr=" + x
	}
	return u
}

// Masters is the number of masters. The node acting as master i changes with failovers.
func (c *localCluster) Masters() int { return clusterMasters }

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string
	master   bool
	failing  bool // flagged fail or fail?
	slots    bool
}

func nodeClient(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
}

// view returns CLUSTER NODES as seen by the first running node that answers.
func (c *localCluster) view() ([]clusterNode, error) {
	var lastErr error = errors.New("no cluster node is running")
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		v, err := nodeView(n.Addr())
		if err != nil {
			lastErr = err
			continue
		}
		return v, nil
	}
	return nil, lastErr
}

// nodeView is CLUSTER NODES as the node at addr sees it.
func nodeView(addr string) ([]clusterNode, error) {
	cl := nodeClient(addr)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s, err := cl.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	return parseClusterNodes(s), nil
}

func parseClusterNodes(s string) []clusterNode {
	var out []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := "," + f[2] + ","
		out = append(out, clusterNode{id: f[0], addr: addr, master: strings.Contains(flags, ",master,"),
			failing: strings.Contains(flags, ",fail,") || strings.Contains(flags, ",fail?,"), slots: len(f) > 8})
	}
	return out
}

// liveMasters are the addresses of the masters serving slots and not failing, sorted.
func liveMasters(nodes []clusterNode) []string {
	var out []string
	for _, n := range nodes {
		if n.master && n.slots && !n.failing {
			out = append(out, n.addr)
		}
	}
	sort.Strings(out)
	return out
}

// ok reports whether every running node sees the whole cluster served and no master
// serving slots is a stopped node. Served means cluster_state:ok with all 16384 slots ok.
func (c *localCluster) ok() bool {
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		cl := nodeClient(n.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := cl.ClusterInfo(ctx).Result()
		cancel()
		cl.Close()
		if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_slots_ok:16384") {
			return false
		}
	}
	// Until the others flag a killed master, they still report cluster_state:ok.
	nodes, err := c.view()
	if err != nil {
		return false
	}
	for _, addr := range liveMasters(nodes) {
		if n := c.nodeAt(addr); n == nil || !n.running() {
			return false
		}
	}
	return true
}

// waitHealthy waits until the cluster is ok, has clusterMasters live masters, and every
// running replica's link to its master is up. Then the next failover has a synced replica
// to promote.
func (c *localCluster) waitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var why string
	for time.Now().Before(deadline) {
		why = c.unhealthy()
		if why == "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("chaos: cluster not healthy after %v: %s", timeout, why)
}

func (c *localCluster) unhealthy() string {
	if !c.ok() {
		return "cluster_state not ok on every node"
	}
	nodes, err := c.view()
	if err != nil {
		return err.Error()
	}
	if m := liveMasters(nodes); len(m) != clusterMasters {
		return fmt.Sprintf("%d live masters", len(m))
	}
	for _, n := range c.nodes {
		if !n.running() {
			continue
		}
		cl := nodeClient(n.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		info, err := cl.Info(ctx, "replication").Result()
		cancel()
		cl.Close()
		if err != nil {
			return err.Error()
		}
		if strings.Contains(info, "role:slave") && !strings.Contains(info, "master_link_status:up") {
			return n.Addr() + ": replica link down"
		}
	}
	return ""
}

func (c *localCluster) nodeAt(addr string) *redisServer {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// KillMaster SIGKILLs the i-th current master in CLUSTER NODES, sorted by address, and
// waits for its replica to be promoted: cluster_state:ok with every slot served again.
func (c *localCluster) KillMaster(i int) error {
	nodes, err := c.view()
	if err != nil {
		return err
	}
	masters := liveMasters(nodes)
	if len(masters) == 0 {
		return errors.New("no live master")
	}
	addr := masters[i%len(masters)]
	n := c.nodeAt(addr)
	if n == nil {
		return fmt.Errorf("master %s is not one of the run's nodes", addr)
	}
	c.mu.Lock()
	c.killed[i] = n
	c.mu.Unlock()
	at := time.Now()
	n.stop(syscall.SIGKILL)
	c.logf("cluster: SIGKILLed master %s (%s); waiting for its replica to be promoted", addr, filepath.Base(n.dir))
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		// Done when the others flag it failed and a promoted replica serves its slots.
		if c.ok() {
			if v, err := c.view(); err == nil && len(liveMasters(v)) == clusterMasters && !slices.Contains(liveMasters(v), addr) {
				c.logf("cluster: failover of %s done after %v; masters now %v", addr, time.Since(at).Round(time.Millisecond), liveMasters(v))
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("no replica of %s promoted within 60s", addr)
}

// RestartMaster starts the node killed by KillMaster on its port and directory and waits
// until the cluster is healthy again. Its nodes.conf makes it rejoin as a replica of its
// promoted successor.
func (c *localCluster) RestartMaster(i int) error {
	c.mu.Lock()
	n := c.killed[i]
	delete(c.killed, i)
	c.mu.Unlock()
	if n == nil {
		return nil
	}
	var err error
	for range 50 {
		if err = n.start(); err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("restart %s: %w", n.Addr(), err)
	}
	at := time.Now()
	if err := c.waitHealthy(60 * time.Second); err != nil {
		return err
	}
	role := "?"
	if v, err := c.view(); err == nil {
		role = "replica"
		for _, m := range liveMasters(v) {
			if m == n.Addr() {
				role = "master"
			}
		}
	}
	c.logf("cluster: %s restarted, rejoined as %s, cluster healthy after %v", n.Addr(), role, time.Since(at).Round(time.Millisecond))
	return nil
}

// stop stops every node.
func (c *localCluster) stop(sig syscall.Signal) {
	for _, n := range c.nodes {
		n.stop(sig)
	}
}

// clusterClient returns the client the runner, the producer and the checker use.
func clusterClient(url string) (*redis.ClusterClient, error) {
	opt, err := redis.ParseClusterURL(url)
	if err != nil {
		return nil, err
	}
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = time.Second, 2*time.Second, 2*time.Second
	opt.MaxRedirects = 8
	return redisconn.NewClusterClient(opt), nil
}

// clusterReady is waitRedis for cluster mode. It waits until the run's own cluster is ok,
// or for another cluster until every master answers PING through the client.
func clusterReady(cl Cluster, rdb *redis.ClusterClient, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if lc, own := cl.(*localCluster); own {
			if lc.ok() {
				return true
			}
		} else {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			rdb.ReloadState(ctx)
			err := rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error { return m.Ping(ctx).Err() })
			cancel()
			if err == nil {
				return true
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}
