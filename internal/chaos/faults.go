package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// Fault kinds.
const (
	FaultKill       = "sigkill-consumer"      // SIGKILL a consumer; a new incarnation starts soon after
	FaultStop       = "sigstop-owner"         // SIGSTOP a consumer that owns a running flight, past its lease, then SIGCONT
	FaultRedisTerm  = "redis-restart-sigterm" // SIGTERM redis-server, start it again (AOF keeps the data)
	FaultRedisKill  = "redis-restart-sigkill" // SIGKILL redis-server, start it again (AOF, fsync always)
	FaultRedisPause = "redis-pause"           // SIGSTOP redis-server briefly, then SIGCONT
	FaultMasterKill = "cluster-master-kill"   // kill one Redis Cluster master (needs Config.Cluster)
)

// Cluster is the hook for the FaultMasterKill fault. With Config.RedisCluster the runner
// starts its own cluster (localCluster, cluster.go) instead of the single redis-server and
// hands URL() to the consumers; single-node runs never draw the fault and the report says
// "not available".
type Cluster interface {
	// URL is the cluster URL the consumers and the producer use (several seed addresses).
	URL() string
	// Masters is the number of master nodes.
	Masters() int
	// KillMaster SIGKILLs master i; a replica is promoted (or the slot range is down until
	// RestartMaster).
	KillMaster(i int) error
	// RestartMaster brings master i's node back (as a replica of its successor, or master).
	RestartMaster(i int) error
}

// faultWeights are the relative odds of each kind.
var faultWeights = []struct {
	kind   string
	weight float64
}{
	{FaultKill, 3}, {FaultStop, 3}, {FaultRedisTerm, 1}, {FaultRedisKill, 1}, {FaultRedisPause, 1.5}, {FaultMasterKill, 1},
}

// injector draws and injects faults until its end time.
type injector struct {
	rng     *rand.Rand
	sup     *supervisor
	redis   *redisServer // nil in cluster mode: the single-node Redis faults are not drawn
	cluster Cluster
	coord   *flight.Coordinator
	prod    *producer
	lease   time.Duration
	every   time.Duration // mean gap between faults
	logf    func(format string, args ...any)

	mu     sync.Mutex
	faults []Fault
	wg     sync.WaitGroup
}

func (in *injector) record(f Fault) {
	in.mu.Lock()
	in.faults = append(in.faults, f)
	in.mu.Unlock()
	in.logf("fault %-22s %-8s %s %s", f.Kind, f.Target, f.For, f.Note)
}

// drawable reports whether kind can be injected in this run.
func (in *injector) drawable(kind string) bool {
	switch kind {
	case FaultMasterKill:
		return in.cluster != nil
	case FaultRedisTerm, FaultRedisKill, FaultRedisPause:
		return in.redis != nil
	}
	return true
}

func (in *injector) pick() string {
	total := 0.0
	for _, w := range faultWeights {
		if !in.drawable(w.kind) {
			continue
		}
		total += w.weight
	}
	x := in.rng.Float64() * total
	for _, w := range faultWeights {
		if !in.drawable(w.kind) {
			continue
		}
		if x < w.weight {
			return w.kind
		}
		x -= w.weight
	}
	return FaultKill
}

// between draws a duration uniformly in [lo, hi).
func (in *injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.rng.Int64N(int64(hi-lo)))
}

// run injects faults until end, then waits for the running ones to recover.
func (in *injector) run(ctx context.Context, end time.Time) {
	defer in.wg.Wait()
	for {
		gap := in.between(in.every*2/5, in.every*8/5)
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		if time.Now().After(end) {
			return
		}
		kind := in.pick()
		switch kind {
		case FaultKill:
			in.kill()
		case FaultStop:
			in.stop(ctx)
		case FaultRedisTerm, FaultRedisKill:
			sig := syscall.SIGTERM
			if kind == FaultRedisKill {
				sig = syscall.SIGKILL
			}
			down := in.between(200*time.Millisecond, 2*time.Second)
			at := time.Now()
			err := in.redis.restart(sig, down)
			f := Fault{Kind: kind, Target: "redis", At: at, For: time.Since(at).Round(time.Millisecond).String()}
			if err != nil {
				f.Note = err.Error()
			}
			in.record(f)
		case FaultRedisPause:
			d := in.between(300*time.Millisecond, 2500*time.Millisecond)
			at := time.Now()
			in.redis.signal(syscall.SIGSTOP)
			time.Sleep(d)
			in.redis.signal(syscall.SIGCONT)
			in.record(Fault{Kind: kind, Target: "redis", At: at, For: d.Round(time.Millisecond).String()})
		case FaultMasterKill:
			in.masterKill()
		}
	}
}

// kill SIGKILLs a random consumer and starts a new incarnation 0.3-3 s later.
func (in *injector) kill() {
	i := in.rng.IntN(len(in.sup.slots))
	name, ok := in.sup.reserve(i)
	if !ok {
		return
	}
	down := in.between(300*time.Millisecond, 3*time.Second)
	at := time.Now()
	in.sup.kill(i)
	in.record(Fault{Kind: FaultKill, Target: name, At: at, For: down.Round(time.Millisecond).String()})
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer in.sup.release(i)
		time.Sleep(down)
		if err := in.sup.restart(i); err != nil {
			in.logf("restart consumer slot %d: %v", i+1, err)
		}
	}()
}

// stop SIGSTOPs a consumer that owns a running flight (any consumer when none does) for
// the lease plus 0.3-3 s, then SIGCONTs it: it wakes up as a zombie whose flights were
// taken over.
func (in *injector) stop(ctx context.Context) {
	i, key, token := in.findOwner(ctx)
	note := fmt.Sprintf("owner of %s token %d", shortKey(key), token)
	if i < 0 {
		i, note = in.rng.IntN(len(in.sup.slots)), "no running flight found: a random consumer"
	}
	name, ok := in.sup.reserve(i)
	if !ok {
		return
	}
	d := in.lease + in.between(300*time.Millisecond, 3*time.Second)
	at := time.Now()
	in.sup.stop(i)
	in.record(Fault{Kind: FaultStop, Target: name, At: at, For: d.Round(time.Millisecond).String(), Note: note})
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer in.sup.release(i)
		time.Sleep(d)
		in.sup.cont(i)
	}()
}

// findOwner looks at the flights of recent keys for a RUNNING one and returns its owner's
// slot, or -1.
func (in *injector) findOwner(ctx context.Context) (int, string, int64) {
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	for cctx.Err() == nil { // most runs are short: look again for a while
		keys := in.prod.recentKeys(3 * in.prod.keys)
		in.rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
		for _, k := range keys {
			m, err := in.coord.Get(cctx, k)
			if err != nil || m.Status != flight.StatusRunning {
				continue
			}
			if i := in.sup.slotOf(m.OwnerID); i >= 0 {
				return i, k, m.OwnerToken
			}
		}
		select {
		case <-cctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return -1, "", 0
}

func (in *injector) masterKill() {
	if in.cluster == nil {
		return
	}
	i := in.rng.IntN(in.cluster.Masters())
	down := in.between(time.Second, 5*time.Second)
	at := time.Now()
	f := Fault{Kind: FaultMasterKill, Target: fmt.Sprintf("master%d", i), At: at}
	if err := in.cluster.KillMaster(i); err != nil {
		f.Note = err.Error()
	}
	failover := time.Since(at)
	time.Sleep(down)
	if err := in.cluster.RestartMaster(i); err != nil {
		f.Note += " restart: " + err.Error()
	}
	f.For = time.Since(at).Round(time.Millisecond).String()
	f.Note = strings.TrimSpace(fmt.Sprintf("failover %v, down %v; %s", failover.Round(time.Millisecond), down.Round(time.Millisecond), f.Note))
	in.record(f)
}

func (in *injector) list() []Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Fault(nil), in.faults...)
}

func shortKey(k string) string {
	if len(k) > 12 {
		return "…" + k[len(k)-12:]
	}
	return k
}
