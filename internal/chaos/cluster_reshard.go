package chaos

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// Resharder is a cluster that can add a master and move slots to it while the run goes on,
// for FaultReshard. The run's own cluster is one.
type Resharder interface {
	// Reshard adds an empty master that holds no function library, moves slots from a
	// live master to it, waits hold, moves them back and removes the node again. It
	// returns what it did.
	Reshard(slots int, hold time.Duration) (string, error)
}

var _ Resharder = (*localCluster)(nil)

// Reshard implements Resharder, moving the slots with their keys by redis-cli --cluster
// reshard and MIGRATE. Calls on them meet MOVED, ASK and TRYAGAIN while they move, and the
// calls that reach the new node find no function library there.
func (c *localCluster) Reshard(slots int, hold time.Duration) (string, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return "", err
	}
	nodes, err := c.view()
	if err != nil {
		return "", err
	}
	masters := liveMasters(nodes)
	if len(masters) == 0 {
		return "", errors.New("no live master")
	}
	src := masters[0]
	srcID := idOf(nodes, src)
	c.mu.Lock()
	c.added++
	dir := filepath.Join(filepath.Dir(c.nodes[0].dir), fmt.Sprintf("added%d", c.added))
	c.mu.Unlock()
	n, err := startRedis(dir, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", "2000", "--cluster-require-full-coverage", "no")
	if err != nil {
		return "", fmt.Errorf("start the new master: %w", err)
	}
	// A step that fails leaves the new node running, part of the cluster with whatever
	// slots it took. Stopping it would take them down. The run goes on with it.
	keep := func(err error) (string, error) {
		c.mu.Lock()
		c.nodes = append(c.nodes, n)
		c.mu.Unlock()
		// Close any slot left migrating or importing, so that its keys answer again.
		if out, ferr := exec.Command(cli, "--cluster", "fix", src, "--cluster-yes").CombinedOutput(); ferr != nil {
			err = fmt.Errorf("%w; redis-cli --cluster fix: %w: %s", err, ferr, lastLines(string(out), 3))
		}
		return "", err
	}
	run := func(args ...string) error {
		out, err := exec.Command(cli, append([]string{"--cluster"}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("redis-cli --cluster %s: %w: %s", args[0], err, lastLines(string(out), 3))
		}
		return nil
	}
	if err := run("add-node", n.Addr(), src); err != nil {
		return keep(err)
	}
	newID, err := c.waitKnown(n.Addr(), 30*time.Second)
	if err != nil {
		return keep(err)
	}
	// redis-cli copies the function libraries to the node it adds. A node added by other
	// means has none, and the consumers must survive that case.
	if err := flushFunctions(n.Addr()); err != nil {
		return keep(err)
	}
	moved := strconv.Itoa(slots)
	at := time.Now()
	if err := run("reshard", src, "--cluster-from", srcID, "--cluster-to", newID, "--cluster-slots", moved, "--cluster-yes"); err != nil {
		return keep(err)
	}
	out := time.Since(at)
	time.Sleep(hold)
	served := fcallsOn(n.Addr())
	at = time.Now()
	if err := run("reshard", src, "--cluster-from", newID, "--cluster-to", srcID, "--cluster-slots", moved, "--cluster-yes"); err != nil {
		return keep(err)
	}
	back := time.Since(at)
	if err := run("del-node", src, newID); err != nil {
		return keep(err)
	}
	n.stop(syscall.SIGKILL) // del-node shut it down already
	return fmt.Sprintf("%s slots of %s to new master %s in %v, back in %v; it served %s", moved, src, n.Addr(),
		out.Round(time.Millisecond), back.Round(time.Millisecond), served), c.waitHealthy(60 * time.Second)
}

// waitKnown waits until every running node lists addr in CLUSTER NODES and the node at addr
// sees the cluster ok, and returns its id. Until then a node that just joined answers
// CLUSTERDOWN to a slot migration.
func (c *localCluster) waitKnown(addr string, timeout time.Duration) (string, error) {
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		id, all := "", true
		for _, n := range c.nodes {
			if !n.running() {
				continue
			}
			v, err := nodeView(n.Addr())
			if id = idOf(v, addr); err != nil || id == "" {
				all = false
				break
			}
		}
		if all && id != "" && clusterOK(addr) {
			return id, nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return "", fmt.Errorf("the cluster does not know %s after %v", addr, timeout)
}

// idOf is the node id of addr in nodes, or "".
func idOf(nodes []clusterNode, addr string) string {
	for _, n := range nodes {
		if n.addr == addr {
			return n.id
		}
	}
	return ""
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// clusterOK reports whether the node at addr says cluster_state:ok.
func clusterOK(addr string) bool {
	cl := nodeClient(addr)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	info, err := cl.ClusterInfo(ctx).Result()
	return err == nil && strings.Contains(info, "cluster_state:ok")
}

// fcallsOn describes what the node at addr served of the flight library: the FCALLs it ran
// and the libraries it holds. It joined with none.
func fcallsOn(addr string) string {
	cl := nodeClient(addr)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	calls := "?"
	if info, err := cl.Info(ctx, "commandstats").Result(); err == nil {
		calls = "0"
		for _, line := range strings.Split(info, "\n") {
			if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_fcall:calls="); ok {
				calls, _, _ = strings.Cut(rest, ",")
			}
		}
	}
	libs := "?"
	if l, err := cl.FunctionList(ctx, redis.FunctionListQuery{}).Result(); err == nil {
		libs = strconv.Itoa(len(l))
	}
	return calls + " FCALLs, " + libs + " function libraries loaded"
}

// flushFunctions deletes every function library of the node at addr.
func flushFunctions(addr string) error {
	cl := nodeClient(addr)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := cl.FunctionFlush(ctx).Err(); err != nil {
		return fmt.Errorf("FUNCTION FLUSH on %s: %w", addr, err)
	}
	return nil
}
