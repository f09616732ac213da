package redistest

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// MasterName is the name the sentinels of StartSentinel monitor the master under.
const MasterName = "mymaster"

// Sentinel is a private Redis Sentinel deployment: a master, one replica and three sentinels
// that monitor them with quorum 2, where a master silent for 1 s is down. All are stopped in
// Cleanup.
type Sentinel struct {
	tb testing.TB
	// Master and Replica are the servers as started. After a failover the replica is the
	// master, as CurrentMaster tells.
	Master, Replica *Server
	// Sentinels are the three sentinel processes.
	Sentinels []*Server
	clients   []*redis.SentinelClient // one per sentinel
}

// StartSentinel starts the deployment and returns once the replica is in sync and every
// sentinel knows the master, the replica and the other sentinels.
func StartSentinel(tb testing.TB) *Sentinel {
	tb.Helper()
	s := &Sentinel{tb: tb, Master: Start(tb, &Options{Args: []string{"--repl-diskless-sync-delay", "0"}})}
	host, port, _ := net.SplitHostPort(s.Master.Addr())
	s.Replica = Start(tb, &Options{Args: []string{"--replicaof", host, port, "--repl-diskless-sync-delay", "0"}})
	replica := s.Replica.Client()
	waitFor(tb, 10*time.Second, "the replica in sync", func(ctx context.Context) bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
	conf := []string{
		"sentinel monitor " + MasterName + " " + host + " " + port + " 2",
		"sentinel down-after-milliseconds " + MasterName + " 1000",
		"sentinel failover-timeout " + MasterName + " 3000",
		"sentinel parallel-syncs " + MasterName + " 1",
	}
	for range 3 {
		sn := Start(tb, &Options{Sentinel: conf})
		c := redis.NewSentinelClient(&redis.Options{Addr: sn.Addr(), MaxRetries: -1})
		tb.Cleanup(func() { _ = c.Close() })
		s.Sentinels, s.clients = append(s.Sentinels, sn), append(s.clients, c)
	}
	waitFor(tb, 20*time.Second, "the sentinels to know the deployment", func(ctx context.Context) bool {
		for _, c := range s.clients {
			m, err := c.Master(ctx, MasterName).Result()
			if err != nil || m["num-slaves"] != "1" || m["num-other-sentinels"] != "2" {
				return false
			}
		}
		return true
	})
	return s
}

// URL is the deployment's failover URL in go-redis's form: the first sentinel as the host,
// the others as addr=, and master_name=.
func (s *Sentinel) URL() string {
	u := "redis://" + s.Sentinels[0].Addr() + "/0?master_name=" + MasterName
	for _, sn := range s.Sentinels[1:] {
		u += "&addr=" + sn.Addr()
	}
	return u
}

// Client returns a client that follows the master the sentinels name, closed in Cleanup.
func (s *Sentinel) Client() *redis.Client {
	addrs := make([]string, len(s.Sentinels))
	for i, sn := range s.Sentinels {
		addrs[i] = sn.Addr()
	}
	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: MasterName, SentinelAddrs: addrs})
	s.tb.Cleanup(func() { _ = c.Close() })
	return c
}

// CurrentMaster is the master's address as the first sentinel that answers names it.
func (s *Sentinel) CurrentMaster(ctx context.Context) (string, error) {
	var err error
	for _, c := range s.clients {
		var a []string
		if a, err = c.GetMasterAddrByName(ctx, MasterName).Result(); err == nil {
			return net.JoinHostPort(a[0], a[1]), nil
		}
	}
	return "", err
}

// WaitPromoted waits until every sentinel names the same master other than old and it
// answers as a master, and returns its address.
func (s *Sentinel) WaitPromoted(old string, timeout time.Duration) string {
	s.tb.Helper()
	var addr string
	waitFor(s.tb, timeout, "every sentinel to name a master other than "+old, func(ctx context.Context) bool {
		a := ""
		for _, c := range s.clients {
			m, err := c.GetMasterAddrByName(ctx, MasterName).Result()
			if err != nil || len(m) != 2 {
				return false
			}
			if got := net.JoinHostPort(m[0], m[1]); got == old || (a != "" && got != a) {
				return false
			} else {
				a = got
			}
		}
		c := redis.NewClient(&redis.Options{Addr: a, MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		addr = a
		return err == nil && strings.Contains(info, "role:master")
	})
	return addr
}

// Rejoin restarts srv, a killed master, as a replica of the current master with
// replica-priority 0, so that it cannot be promoted. A private server comes back empty and
// as a master until the sentinels demote it some seconds later, and a master's INFO carries
// no priority, so a false failover on a loaded machine could promote it in that window and
// wipe the deployment's data.
func (s *Sentinel) Rejoin(srv *Server) {
	s.tb.Helper()
	ctx := context.Background()
	master, err := s.CurrentMaster(ctx)
	if err != nil {
		s.tb.Fatalf("redistest: current master: %v", err)
	}
	host, port, _ := net.SplitHostPort(master)
	srv.Restart()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
	defer c.Close()
	if err := c.ConfigSet(ctx, "replica-priority", "0").Err(); err != nil {
		s.tb.Fatalf("redistest: replica-priority on %s: %v", srv.Addr(), err)
	}
	if err := c.Do(ctx, "REPLICAOF", host, port).Err(); err != nil {
		s.tb.Fatalf("redistest: REPLICAOF on %s: %v", srv.Addr(), err)
	}
}

// WaitReplica waits until srv replicates the current master with its link up.
func (s *Sentinel) WaitReplica(srv *Server, timeout time.Duration) {
	s.tb.Helper()
	waitFor(s.tb, timeout, srv.Addr()+" as a replica", func(ctx context.Context) bool {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr(), MaxRetries: -1})
		defer c.Close()
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up")
	})
}

// waitFor polls ok every 50 ms until it holds, or fails tb after timeout naming what.
func waitFor(tb testing.TB, timeout time.Duration, what string, ok func(ctx context.Context) bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done := ok(ctx)
		cancel()
		if done {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: waited %v for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
