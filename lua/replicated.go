package lua

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCaller sends FCALLs that are each followed, on the same connection, by WAIT 1:
// a Batcher, or Replicating on a client.
type ReplicatedCaller interface {
	// FCallReplicated sends the call and returns its reply, how many replicas acknowledged it
	// within timeout, and the WAIT's own error. A refused or failed WAIT counts no replica.
	FCallReplicated(ctx context.Context, timeout time.Duration, function string, keys []string, args ...any) (*redis.Cmd, int64, error)
}

// RunReplicated is RunVia through calls, each call followed by a WAIT for one replica, which
// covers every write its connection made up to and including the call. The WAIT rides in the
// call's pipeline, so timeout must stay below the client's read timeout.
func (f *Function) RunReplicated(ctx context.Context, calls ReplicatedCaller, c redis.UniversalClient, timeout time.Duration, keys []string, args ...any) (*redis.Cmd, int64, error) {
	cmd, acked, werr := calls.FCallReplicated(ctx, timeout, f.name, keys, args...)
	if err := cmd.Err(); err != nil && isNoFunction(err) {
		if lerr := loadMissing(ctx, c); lerr != nil {
			if errors.Is(lerr, ErrLibraryMissing) {
				cmd.SetErr(lerr)
			}
			return cmd, 0, werr
		}
		cmd, acked, werr = calls.FCallReplicated(ctx, timeout, f.name, keys, args...)
	}
	return cmd, acked, werr
}

// Replicating sends replicated calls straight on a client, each call and its WAIT in a
// pipeline of their own. On a cluster the pair goes to the master of the call's first key,
// following one MOVED or ASK redirection.
type Replicating struct {
	// Client is any go-redis client.
	Client redis.UniversalClient
}

// FCallReplicated sends the call and its WAIT.
func (r Replicating) FCallReplicated(ctx context.Context, timeout time.Duration, function string, keys []string, args ...any) (*redis.Cmd, int64, error) {
	cc, cluster := r.Client.(*redis.ClusterClient)
	if !cluster || len(keys) == 0 {
		return pipelineWait(ctx, r.Client, false, timeout, function, keys, args)
	}
	n, err := cc.MasterForKey(ctx, keys[0])
	if err != nil {
		return failed(ctx, err), 0, err
	}
	cmd, acked, werr := pipelineWait(ctx, n, false, timeout, function, keys, args)
	kind, addr := redirection(cmd.Err())
	switch kind {
	case "MOVED":
		// The slot moved for good. The client reloads its map of the cluster in the
		// background, and the call goes to the new master once the map names it.
		cc.ReloadState(ctx)
		for range 10 {
			if n, err := cc.MasterForKey(ctx, keys[0]); err == nil && n.Options().Addr == addr {
				return pipelineWait(ctx, n, false, timeout, function, keys, args)
			}
			if !sleep(ctx, 20*time.Millisecond) {
				break
			}
		}
	case "ASK":
		// The slot is migrating and the keys are on addr already: ASKING lets addr serve them.
		if n := masterAt(ctx, cc, addr); n != nil {
			return pipelineWait(ctx, n, true, timeout, function, keys, args)
		}
		cc.ReloadState(ctx) // a master the client does not know yet
	}
	return cmd, acked, werr
}

// pipelineWait sends the call and WAIT 1 timeout in one pipeline, after ASKING when asking.
func pipelineWait(ctx context.Context, node redis.Cmdable, asking bool, timeout time.Duration, function string, keys []string, args []any) (*redis.Cmd, int64, error) {
	var cmd, wait *redis.Cmd
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		if asking {
			p.Do(ctx, "ASKING")
		}
		cmd = p.FCall(ctx, function, keys, args...)
		wait = p.Do(ctx, "WAIT", 1, waitMillis(timeout))
		return nil
	})
	n, err := wait.Int64()
	return cmd, n, err
}

// waitMillis is timeout as WAIT's argument: at least 1 ms, since 0 would wait for ever.
func waitMillis(timeout time.Duration) int64 { return max(timeout.Milliseconds(), 1) }

// redirection parses a "MOVED <slot> <addr>" or "ASK <slot> <addr>" error answered to a call
// sent straight to a node. It returns the kind and address, or "" when err is neither.
func redirection(err error) (kind, addr string) {
	if err == nil {
		return "", ""
	}
	f := strings.Fields(err.Error())
	if len(f) != 3 || (f[0] != "MOVED" && f[0] != "ASK") {
		return "", ""
	}
	return f[0], f[2]
}

// masterAt is the cluster's master client at addr, or nil. ForEachMaster calls fn on every
// master at once, hence the atomic pointer.
func masterAt(ctx context.Context, cc *redis.ClusterClient, addr string) *redis.Client {
	var found atomic.Pointer[redis.Client]
	_ = cc.ForEachMaster(ctx, func(_ context.Context, n *redis.Client) error {
		if n.Options().Addr == addr {
			found.Store(n)
		}
		return nil
	})
	return found.Load()
}

// sleep waits d or until ctx ends. It returns false when ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
