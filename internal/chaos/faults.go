package chaos

import (
	"context"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// Fault kinds.
const (
	FaultKill       = "sigkill-consumer"      // SIGKILL a consumer. A new incarnation starts soon after.
	FaultStop       = "sigstop-owner"         // SIGSTOP a consumer that owns a running flight, past its lease, then SIGCONT
	FaultRedisTerm  = "redis-restart-sigterm" // SIGTERM redis-server and start it again. AOF keeps the data.
	FaultRedisKill  = "redis-restart-sigkill" // SIGKILL redis-server and start it again, with AOF and fsync always
	FaultRedisPause = "redis-pause"           // SIGSTOP redis-server briefly, then SIGCONT
	FaultMasterKill = "cluster-master-kill"   // kill one Redis Cluster master. Needs Config.Cluster.
	// FaultSentinelKill SIGKILLs the master of the Sentinel deployment set by Config.Sentinel.
	// The sentinels promote its replica, and the killed server comes back as the new replica.
	FaultSentinelKill = "sentinel-master-kill"
	// FaultReshard adds an empty master without the function library to the run's own Redis
	// Cluster, moves 2,500 slots of a master to it with their keys while flights run, holds
	// them there 2-5 s, moves them back and removes the node. Flights meet MOVED, ASK and
	// TRYAGAIN meanwhile.
	FaultReshard = "cluster-reshard"
	// FaultAllDown SIGKILLs every consumer for longer than a flight's runningTTL +
	// failureTTL, then restarts them all under their names. Metas and waiter records expire
	// while tasks are parked.
	FaultAllDown = "all-down-past-ttl"
	// FaultDeleteKeys deletes the record and waiters of a RUNNING flight, as lost writes would.
	FaultDeleteKeys = "delete-flight-keys"
	// FaultPauseLease SIGSTOPs an owner for 30-60% of its lease, then SIGCONTs it. Nobody may
	// run its flight meanwhile.
	FaultPauseLease = "pause-under-lease"
	// FaultRestartSame SIGKILLs a consumer and restarts it at once under the same name.
	FaultRestartSame = "restart-same-name"
	// FaultCrashComplete restarts a consumer, for a window, with knobs that make it write
	// answers after the scripts and exit with status 86 right after a complete script, before
	// its answers. The supervisor restarts it under its name.
	FaultCrashComplete = "crash-after-complete"
	// FaultCancellerCrash runs `producer cancel KEY` against a running flight with knobs that
	// make it exit with status 86 right after the cancel script, before answering the parked
	// tasks. The key's tasks then legitimately end CANCELLED.
	FaultCancellerCrash = "canceller-crash"
	// FaultRedisDataLoss pauses Redis's writes, reads its events, dead letters and the
	// archive's rows, SIGKILLs redis-server, deletes its data and starts it again empty on the
	// same port, and the producer then sends again the tasks whose entries were lost. It is
	// drawn only with Config.Archive on and the run's own single node.
	FaultRedisDataLoss = "redis-data-loss"
)

// Cluster is the hook for the FaultMasterKill fault, which the runner's own localCluster
// serves when Config.RedisCluster is set. Single-node runs never draw the fault, and the
// report says "not available".
type Cluster interface {
	// URL is the cluster URL the consumers and the producer use, with several seed addresses.
	URL() string
	// Masters is the number of master nodes.
	Masters() int
	// KillMaster SIGKILLs master i. A replica is promoted, or else the slot range is down
	// until RestartMaster.
	KillMaster(i int) error
	// RestartMaster brings master i's node back, as a replica of its successor or as master.
	RestartMaster(i int) error
}

// faultWeight is the relative odds of one kind, after the first round.
type faultWeight struct {
	kind   string
	weight float64
}

// faultWeights lists every kind with its odds. It is a function, not a package variable,
// because the package keeps no mutable state.
func faultWeights() []faultWeight {
	return []faultWeight{
		{FaultKill, 3}, {FaultStop, 3}, {FaultRedisTerm, 1}, {FaultRedisKill, 1}, {FaultRedisPause, 1.5},
		{FaultMasterKill, 1}, {FaultAllDown, 0.5}, {FaultDeleteKeys, 1.5}, {FaultPauseLease, 2},
		{FaultRestartSame, 2}, {FaultCrashComplete, 1.5}, {FaultCancellerCrash, 1.5}, {FaultRedisDataLoss, 0.75},
		{FaultSentinelKill, 1}, {FaultReshard, 1},
	}
}

// redisMode is the shape of a run's Redis.
type redisMode uint8

// The Redis shapes of a run.
const (
	modeNode     redisMode = iota // one redis-server
	modeCluster                   // a Redis Cluster, from Config.RedisCluster or Config.Cluster
	modeSentinel                  // a Sentinel deployment, from Config.Sentinel
)

// drawableKinds lists the kinds a run can inject. The single-node Redis faults need the
// run's own redis-server. cluster-master-kill and cluster-reshard need a cluster,
// sentinel-master-kill a Sentinel deployment, and redis-data-loss the run's own
// redis-server and the archive.
func drawableKinds(mode redisMode, archive bool) []string {
	var out []string
	for _, w := range faultWeights() {
		switch w.kind {
		case FaultMasterKill, FaultReshard:
			if mode != modeCluster {
				continue
			}
		case FaultSentinelKill:
			if mode != modeSentinel {
				continue
			}
		case FaultRedisTerm, FaultRedisKill, FaultRedisPause:
			if mode != modeNode {
				continue
			}
		case FaultRedisDataLoss:
			if mode != modeNode || !archive {
				continue
			}
		}
		out = append(out, w.kind)
	}
	return out
}

// injector draws and injects faults until its end time. The first round injects every
// drawable kind once, in a seeded order, so that even a short run covers them all. Later
// faults are drawn by weight.
type injector struct {
	rng     *rand.Rand
	sup     *supervisor
	redis   *redisServer // nil in cluster and Sentinel mode, where the single-node Redis faults are not drawn
	cluster Cluster      // the cluster or the Sentinel deployment. mode says which.
	mode    redisMode
	coord   *flight.Coordinator
	rdb     redis.UniversalClient
	ks      topics.Keyspace
	prod    *producer
	lease   time.Duration
	// heartbeat is the owners' heartbeat interval. flightTTL is runningTTL + failureTTL, the
	// longest a flight's records live after its last acquisition.
	heartbeat time.Duration
	flightTTL time.Duration
	// canceller runs `producer cancel` for FaultCancellerCrash.
	canceller *canceller
	every     time.Duration // mean gap between faults
	logf      func(format string, args ...any)

	// losses reads what Redis and the archive hold before a redis-data-loss fault and keeps
	// it. It is nil without the archive, and then the fault is not drawn.
	losses *lossRecorder

	queue []string       // the first round's kinds still to inject
	tries map[string]int // failed attempts of the first round's kinds

	mu      sync.Mutex
	faults  []Fault
	cancels []Cancel
	wg      sync.WaitGroup
}

func (in *injector) record(f Fault) {
	in.mu.Lock()
	in.faults = append(in.faults, f)
	in.mu.Unlock()
	target := f.Target
	if f.Key != "" && f.Target == "" {
		target = shortKey(f.Key)
	}
	in.logf("fault %-22s %-8s %s %s", f.Kind, target, f.For, f.Note)
}

// drawable reports whether kind can be injected in this run.
func (in *injector) drawable(kind string) bool {
	switch kind {
	case FaultMasterKill:
		return in.cluster != nil && in.mode == modeCluster
	case FaultSentinelKill:
		return in.cluster != nil && in.mode == modeSentinel
	case FaultReshard:
		_, ok := in.cluster.(Resharder)
		return ok && in.mode == modeCluster
	case FaultRedisTerm, FaultRedisKill, FaultRedisPause:
		return in.redis != nil
	case FaultCancellerCrash:
		return in.canceller != nil
	case FaultRedisDataLoss:
		return in.redis != nil && in.losses != nil
	}
	return true
}

// firstRound shuffles every drawable kind into the queue. The long all-down outage is put in
// the first half, so that it ends well before a short run does.
func (in *injector) firstRound() {
	in.queue = in.queue[:0]
	for _, w := range faultWeights() {
		if in.drawable(w.kind) {
			in.queue = append(in.queue, w.kind)
		}
	}
	in.rng.Shuffle(len(in.queue), func(a, b int) { in.queue[a], in.queue[b] = in.queue[b], in.queue[a] })
	half := (len(in.queue) + 1) / 2
	for i, k := range in.queue {
		if k == FaultAllDown && i >= half {
			j := in.rng.IntN(half)
			in.queue[i], in.queue[j] = in.queue[j], in.queue[i]
		}
	}
	in.tries = map[string]int{}
}

// pick returns the next kind: the first round's next, then a weighted draw.
func (in *injector) pick() (kind string, fromQueue bool) {
	if len(in.queue) > 0 {
		kind, in.queue = in.queue[0], in.queue[1:]
		return kind, true
	}
	total := 0.0
	for _, w := range faultWeights() {
		if in.drawable(w.kind) {
			total += w.weight
		}
	}
	x := in.rng.Float64() * total
	for _, w := range faultWeights() {
		if !in.drawable(w.kind) {
			continue
		}
		if x < w.weight {
			return w.kind, false
		}
		x -= w.weight
	}
	return FaultKill, false
}

// between draws a duration uniformly from lo up to but not including hi.
func (in *injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.rng.Int64N(int64(hi-lo)))
}

// run injects faults until end, then waits for the running ones to recover.
func (in *injector) run(ctx context.Context, end time.Time) {
	defer in.wg.Wait()
	in.firstRound()
	for {
		gap := in.between(in.every*2/5, in.every*8/5)
		select {
		case <-ctx.Done():
			return
		case <-time.After(gap):
		}
		if time.Now().After(end) {
			if len(in.queue) > 0 {
				in.logf("faults over: %v of the first round not injected", in.queue)
			}
			return
		}
		kind, fromQueue := in.pick()
		if !in.inject(ctx, kind, end) && fromQueue {
			// Not injectable now, for lack of a running flight or free consumers. Try again
			// later, a few times, so that a short run still covers it.
			if in.tries[kind]++; in.tries[kind] < 4 {
				in.queue = append(in.queue, kind)
			} else {
				in.logf("fault %s could not be injected (4 tries)", kind)
			}
		}
	}
}

// inject injects one fault of kind. It returns false when it could not be injected now.
func (in *injector) inject(ctx context.Context, kind string, end time.Time) bool {
	switch kind {
	case FaultKill:
		return in.kill()
	case FaultStop:
		return in.stop(ctx)
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
	case FaultMasterKill, FaultSentinelKill:
		in.masterKill(kind)
	case FaultReshard:
		in.reshard()
	case FaultAllDown:
		return in.allDown(ctx, end)
	case FaultDeleteKeys:
		return in.deleteFlightKeys(ctx)
	case FaultPauseLease:
		return in.pauseUnderLease(ctx)
	case FaultRestartSame:
		return in.restartSameName(ctx)
	case FaultCrashComplete:
		return in.crashAfterComplete()
	case FaultCancellerCrash:
		return in.cancellerCrash(ctx)
	case FaultRedisDataLoss:
		return in.dataLoss(ctx)
	}
	return true
}

// running is a RUNNING flight found by findFlight: its key, its meta and the slot of its
// owner. The slot is -1 when no slot runs a process of that name.
type running struct {
	key  string
	meta flight.Meta
	slot int
}

// findFlight looks at the flights of recent keys, for up to wait, for a RUNNING one that
// suits want. A nil want takes any. With preferParked it looks for one with parked tasks for
// the first half of wait, and settles for any suitable one after that. ok is false when none
// was found.
func (in *injector) findFlight(ctx context.Context, wait time.Duration, preferParked bool, want func(running) bool) (running, bool) {
	cctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	settle := time.Now().Add(wait / 2)
	var fallback *running
	for cctx.Err() == nil { // most runs are short, so look again for a while
		keys := in.prod.recentKeys(3 * in.prod.keys)
		in.rng.Shuffle(len(keys), func(a, b int) { keys[a], keys[b] = keys[b], keys[a] })
		for _, k := range keys {
			m, err := in.coord.Get(cctx, k)
			if err != nil || m.Status != flight.StatusRunning {
				continue
			}
			r := running{key: k, meta: m, slot: in.sup.slotOf(m.OwnerID)}
			if want != nil && !want(r) {
				continue
			}
			if !preferParked || len(m.Parked) > 0 {
				return r, true
			}
			fallback = &r
		}
		if fallback != nil && time.Now().After(settle) {
			// Looked for parked tasks long enough. The fallback's state may be old by now, so
			// read it again.
			if m, err := in.coord.Get(cctx, fallback.key); err == nil && m.Status == flight.StatusRunning {
				r := running{key: fallback.key, meta: m, slot: in.sup.slotOf(m.OwnerID)}
				if want == nil || want(r) {
					return r, true
				}
			}
			fallback = nil
		}
		select {
		case <-cctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	return running{}, false
}

// ownedBySlot reports whether the flight's owner is one of the run's current consumer processes.
func ownedBySlot(r running) bool { return r.slot >= 0 }

func (in *injector) list() []Fault {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Fault(nil), in.faults...)
}

func (in *injector) cancelList() []Cancel {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]Cancel(nil), in.cancels...)
}

func shortKey(k string) string {
	if len(k) > 12 {
		return "…" + k[len(k)-12:]
	}
	return k
}
