package redistest

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// Link is a TCP proxy in front of a server that a test can hold: while held, no byte crosses
// it in either direction and its connections stay open, as on a link that stalled. A replica
// that replicates through a held Link keeps its link "up" and receives nothing, so the master
// can be killed with writes its replica never saw.
type Link struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	held  bool
	conns []net.Conn
}

// StartLink listens on a free loopback port and forwards each connection to target. It is
// closed in Cleanup.
func StartLink(tb testing.TB, target string) *Link {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("redistest: link: %v", err)
	}
	l := &Link{ln: ln, target: target}
	l.cond = sync.NewCond(&l.mu)
	go l.accept()
	tb.Cleanup(l.close)
	return l
}

// Addr is the address the link listens on.
func (l *Link) Addr() string { return l.ln.Addr().String() }

// Hold stops every byte on the link until Release.
func (l *Link) Hold() {
	l.mu.Lock()
	l.held = true
	l.mu.Unlock()
}

// Release lets the bytes held back go on.
func (l *Link) Release() {
	l.mu.Lock()
	l.held = false
	l.mu.Unlock()
	l.cond.Broadcast()
}

func (l *Link) accept() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.DialTimeout("tcp", l.target, time.Second)
		if err != nil {
			_ = c.Close()
			continue
		}
		l.mu.Lock()
		l.conns = append(l.conns, c, up)
		l.mu.Unlock()
		go l.pipe(up, c)
		go l.pipe(c, up)
	}
}

// pipe copies src to dst, waiting while the link is held before each read and each write.
func (l *Link) pipe(dst, src net.Conn) {
	defer func() { _ = dst.Close(); _ = src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		l.wait()
		n, err := src.Read(buf)
		if n > 0 {
			l.wait()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (l *Link) wait() {
	l.mu.Lock()
	for l.held {
		l.cond.Wait()
	}
	l.mu.Unlock()
}

func (l *Link) close() {
	_ = l.ln.Close()
	l.mu.Lock()
	for _, c := range l.conns {
		_ = c.Close()
	}
	l.held = false
	l.mu.Unlock()
	l.cond.Broadcast()
}

// StartReplica starts a private server that replicates master through a Link, and returns
// both once the replica is in sync and acknowledges writes to WAIT.
func StartReplica(tb testing.TB, master *Server) (*Server, *Link) {
	tb.Helper()
	// A full sync starts at once, not after the default 5 s of waiting for more replicas.
	if err := master.Client().ConfigSet(context.Background(), "repl-diskless-sync-delay", "0").Err(); err != nil {
		tb.Fatalf("redistest: %v", err)
	}
	link := StartLink(tb, master.Addr())
	host, port, _ := net.SplitHostPort(link.Addr())
	r := Start(tb, &Options{Args: []string{"--replicaof", host, port}})
	WaitInSync(tb, r, 10*time.Second)
	// After a full sync the master streams writes to the replica only once the replica
	// acknowledged the sync with its first REPLCONF ACK, up to a second later. Until then a
	// WAIT after a write times out.
	mc := master.Client()
	waitFor(tb, 10*time.Second, "the replica to acknowledge a write", func(ctx context.Context) bool {
		if err := mc.Set(ctx, "redistest:replicated", time.Now().UnixNano(), 0).Err(); err != nil {
			return false
		}
		n, err := mc.Do(ctx, "WAIT", 1, 100).Int()
		return err == nil && n >= 1
	})
	return r, link
}

// WaitInSync waits until srv is a replica with its master link up.
func WaitInSync(tb testing.TB, srv *Server, timeout time.Duration) {
	tb.Helper()
	c := srv.Client()
	waitFor(tb, timeout, srv.Addr()+" in sync with its master", func(ctx context.Context) bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	})
}

// Promote makes a replica a master with REPLICAOF NO ONE, as a failover does.
func Promote(ctx context.Context, srv *Server) error {
	c := srv.Client()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		return fmt.Errorf("redistest: promote %s: %w", srv.Addr(), err)
	}
	return nil
}
