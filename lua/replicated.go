package lua

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReplicatedCaller sends FCALLs that are each followed, on the same connection, by WAIT 1:
// a Batcher, or Replicating on a client.
type ReplicatedCaller interface {
	// FCallReplicated sends the call and returns its reply and how many replicas acknowledged
	// it within timeout (0 when none did, or when the WAIT failed).
	FCallReplicated(ctx context.Context, timeout time.Duration, function string, keys []string, args ...any) (*redis.Cmd, int64)
}

// RunReplicated is RunVia through calls, each call followed by a WAIT for one replica: it
// returns the call's reply and how many replicas acknowledged every write the connection made
// up to and including the call. The wait rides in the call's pipeline, whose reply is bounded
// by the client's read timeout, so timeout must stay below it.
func (f *Function) RunReplicated(ctx context.Context, calls ReplicatedCaller, c redis.UniversalClient, timeout time.Duration, keys []string, args ...any) (*redis.Cmd, int64) {
	cmd, acked := calls.FCallReplicated(ctx, timeout, f.name, keys, args...)
	if err := cmd.Err(); err != nil && isNoFunction(err) {
		if lerr := loadMissing(ctx, c); lerr != nil {
			if errors.Is(lerr, ErrLibraryMissing) {
				cmd.SetErr(lerr)
			}
			return cmd, 0
		}
		cmd, acked = calls.FCallReplicated(ctx, timeout, f.name, keys, args...)
	}
	return cmd, acked
}

// Replicating sends replicated calls straight on a client: each call and its WAIT in a
// pipeline of their own (on a cluster, on the master of the call's first key).
type Replicating struct {
	// Client is any go-redis client.
	Client redis.UniversalClient
}

// FCallReplicated sends the call and its WAIT.
func (r Replicating) FCallReplicated(ctx context.Context, timeout time.Duration, function string, keys []string, args ...any) (*redis.Cmd, int64) {
	var node redis.Cmdable = r.Client
	cc, cluster := r.Client.(*redis.ClusterClient)
	if cluster && len(keys) > 0 {
		n, err := cc.MasterForKey(ctx, keys[0])
		if err != nil {
			return failed(ctx, err), 0
		}
		node = n
	}
	var cmd, wait *redis.Cmd
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		cmd = p.FCall(ctx, function, keys, args...)
		wait = p.Do(ctx, "WAIT", 1, timeout.Milliseconds())
		return nil
	})
	if err := cmd.Err(); cluster && err != nil && movedOrAsk(err) {
		// The slot moved: the next try asks the cluster where it lives now.
		cc.ReloadState(ctx)
	}
	n, err := wait.Int64()
	if err != nil {
		return cmd, 0
	}
	return cmd, n
}

// movedOrAsk reports a cluster redirection answered to a call sent straight to a node.
func movedOrAsk(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "MOVED ") || strings.HasPrefix(msg, "ASK ")
}
