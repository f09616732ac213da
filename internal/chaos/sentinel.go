package chaos

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelMasterName is the name the run's sentinels monitor their master under.
const sentinelMasterName = "flightdeck"

// localSentinel is the run's own Redis Sentinel deployment, set by Config.Sentinel. It is
// two redis-server processes, a master and its replica, each in its own directory with AOF
// on and appendfsync always. Three sentinels watch them with quorum 2, and a master silent
// for 1 s is down. localSentinel implements Cluster with one master. RestartMaster starts
// the killed server again on its port and directory, where the sentinels make it a replica.
type localSentinel struct {
	servers   []*redisServer
	sentinels []*redisServer
	logf      func(format string, args ...any)

	mu     sync.Mutex
	killed *redisServer
}

var _ Cluster = (*localSentinel)(nil)

// startSentinel starts the deployment under dir and waits until the replica is in sync and
// every sentinel knows the master, the replica and the other sentinels.
func startSentinel(dir string, logf func(string, ...any)) (*localSentinel, error) {
	s := &localSentinel{logf: logf}
	master, err := startRedis(filepath.Join(dir, "server1"), "--repl-diskless-sync-delay", "0")
	if err != nil {
		return nil, fmt.Errorf("chaos: start the master: %w", err)
	}
	s.servers = append(s.servers, master)
	host, port, _ := net.SplitHostPort(master.Addr())
	replica, err := startRedis(filepath.Join(dir, "server2"), "--repl-diskless-sync-delay", "0", "--replicaof", host, port)
	if err != nil {
		s.stop(syscall.SIGKILL)
		return nil, fmt.Errorf("chaos: start the replica: %w", err)
	}
	s.servers = append(s.servers, replica)
	conf := strings.Join([]string{
		"sentinel monitor " + sentinelMasterName + " " + host + " " + port + " 2",
		"sentinel down-after-milliseconds " + sentinelMasterName + " 1000",
		"sentinel failover-timeout " + sentinelMasterName + " 4000",
		"sentinel parallel-syncs " + sentinelMasterName + " 1",
	}, "\n") + "\n"
	for i := range 3 {
		d := filepath.Join(dir, fmt.Sprintf("sentinel%d", i+1))
		sn, err := startSentinelProcess(d, conf)
		if err != nil {
			s.stop(syscall.SIGKILL)
			return nil, fmt.Errorf("chaos: start sentinel %d: %w", i+1, err)
		}
		s.sentinels = append(s.sentinels, sn)
	}
	if err := s.wait(30*time.Second, "the deployment to be known to every sentinel", s.known); err != nil {
		s.stop(syscall.SIGKILL)
		return nil, err
	}
	return s, nil
}

// startSentinelProcess starts one sentinel with its configuration file in dir.
func startSentinelProcess(dir, conf string) (*redisServer, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, "sentinel.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	return startServer(dir, path, nil)
}

// URL is go-redis's failover URL: the first sentinel as the host, the others as addr=.
func (s *localSentinel) URL() string {
	u := "redis://" + s.sentinels[0].Addr() + "/0?master_name=" + sentinelMasterName
	for _, sn := range s.sentinels[1:] {
		u += "&addr=" + sn.Addr()
	}
	return u
}

// Masters is 1: a Sentinel deployment has one master.
func (s *localSentinel) Masters() int { return 1 }

// sentinelClient is a client of one sentinel.
func sentinelClient(addr string) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: 300 * time.Millisecond,
		ReadTimeout: time.Second, WriteTimeout: time.Second})
}

// named returns the master address every running sentinel names, or "" when they disagree
// or one does not answer.
func (s *localSentinel) named(ctx context.Context) string {
	addr := ""
	for _, sn := range s.sentinels {
		c := sentinelClient(sn.Addr())
		a, err := c.GetMasterAddrByName(ctx, sentinelMasterName).Result()
		c.Close()
		if err != nil || len(a) != 2 {
			return ""
		}
		got := net.JoinHostPort(a[0], a[1])
		if addr != "" && got != addr {
			return ""
		}
		addr = got
	}
	return addr
}

// known reports why the deployment is not yet whole: every sentinel must know the master,
// one replica and two other sentinels, and the replica's link must be up.
func (s *localSentinel) known(ctx context.Context) string {
	for _, sn := range s.sentinels {
		c := sentinelClient(sn.Addr())
		m, err := c.Master(ctx, sentinelMasterName).Result()
		c.Close()
		if err != nil {
			return err.Error()
		}
		if m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
			return fmt.Sprintf("sentinel %s knows %s replicas and %s other sentinels", sn.Addr(), m["num-slaves"], m["num-other-sentinels"])
		}
	}
	return s.replicaUp(ctx)
}

// replicaUp reports why the server that is not the master is not a replica in sync.
func (s *localSentinel) replicaUp(ctx context.Context) string {
	master := s.named(ctx)
	if master == "" {
		return "the sentinels name no master together"
	}
	for _, n := range s.servers {
		if n.Addr() == master || !n.running() {
			continue
		}
		c := nodeClient(n.Addr())
		info, err := c.Info(ctx, "replication").Result()
		c.Close()
		if err != nil {
			return err.Error()
		}
		if !strings.Contains(info, "role:slave") || !strings.Contains(info, "master_link_status:up") {
			return n.Addr() + ": not a replica in sync"
		}
	}
	return ""
}

// wait polls why every 100 ms until it answers "", or fails after timeout naming what.
func (s *localSentinel) wait(timeout time.Duration, what string, why func(ctx context.Context) string) error {
	deadline := time.Now().Add(timeout)
	last := ""
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		last = why(ctx)
		cancel()
		if last == "" {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("chaos: waited %v for %s: %s", timeout, what, last)
}

// KillMaster SIGKILLs the current master and waits until every sentinel names the other
// server and it answers as a master.
func (s *localSentinel) KillMaster(int) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	old := s.named(ctx)
	cancel()
	var victim *redisServer
	for _, n := range s.servers {
		if n.Addr() == old && n.running() {
			victim = n
		}
	}
	if victim == nil {
		return errors.New("no running master named by every sentinel")
	}
	victim.stop(syscall.SIGKILL)
	s.mu.Lock()
	s.killed = victim
	s.mu.Unlock()
	return s.wait(30*time.Second, "a promotion", func(ctx context.Context) string {
		m := s.named(ctx)
		if m == "" || m == old {
			return "not promoted yet"
		}
		c := nodeClient(m)
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		if err != nil || !strings.Contains(info, "role:master") {
			return m + " does not answer as a master yet"
		}
		return ""
	})
}

// RestartMaster starts the killed server again with its AOF and waits until the sentinels
// made it a replica of the new master, in sync.
func (s *localSentinel) RestartMaster(int) error {
	s.mu.Lock()
	n := s.killed
	s.killed = nil
	s.mu.Unlock()
	if n == nil {
		return nil
	}
	if err := n.restart(syscall.SIGKILL, 0); err != nil {
		return err
	}
	return s.wait(60*time.Second, n.Addr()+" back as a replica", s.replicaUp)
}

// ready reports whether the master the sentinels name answers PING, within d.
func (s *localSentinel) ready(d time.Duration) bool {
	return s.wait(d, "a master", func(ctx context.Context) string {
		m := s.named(ctx)
		if m == "" {
			return "no master"
		}
		c := nodeClient(m)
		defer c.Close()
		if err := c.Ping(ctx).Err(); err != nil {
			return err.Error()
		}
		return ""
	}) == nil
}

// stop stops every process.
func (s *localSentinel) stop(sig syscall.Signal) {
	for _, n := range append(append([]*redisServer(nil), s.sentinels...), s.servers...) {
		n.stop(sig)
	}
}

// sentinelFailoverClient returns the client the runner, the producer and the checker use.
func sentinelFailoverClient(s *localSentinel) *redis.Client {
	addrs := make([]string, len(s.sentinels))
	for i, sn := range s.sentinels {
		addrs[i] = sn.Addr()
	}
	return redis.NewFailoverClient(&redis.FailoverOptions{MasterName: sentinelMasterName, SentinelAddrs: addrs,
		DialTimeout: time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second})
}

// sentinelSummary describes the deployment for the run's log.
func (s *localSentinel) sentinelSummary() string {
	return "master " + s.servers[0].Addr() + ", replica " + s.servers[1].Addr() + ", sentinels " +
		strconv.Itoa(len(s.sentinels)) + ": " + s.URL()
}
