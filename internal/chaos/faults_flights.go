package chaos

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/faults"
)

// Faults that act on flights and on Redis.

// delRunningSrc deletes a flight's record KEYS[1] and waiters KEYS[2] when the flight is
// still RUNNING under token ARGV[1]. It returns the number of keys deleted, or -1. It is
// atomic, so that a flight that finished meanwhile keeps its outcome. Deleting a SUCCEEDED
// record would let a fresh flight run the model inside the result TTL, which is not the fault
// intended.
const delRunningSrc = `
local v = redis.call('GET', KEYS[1])
if v and string.match(v, '^f1\t(%u+)\t') == 'RUNNING' and string.match(v, '^f1\t%u+\t(%d+)\t') == ARGV[1] then
  return redis.call('DEL', KEYS[1], KEYS[2])
end
return -1`

// deleteFlightKeys deletes the record and waiters of a RUNNING flight, as lost writes would.
// It prefers one with parked tasks. The owner's heartbeat writes the flight back. A duplicate
// that acquires first starts a fresh flight, which the checker allows as an extra run.
func (in *injector) deleteFlightKeys(ctx context.Context) bool {
	r, ok := in.findFlight(ctx, 3*time.Second, true, nil)
	if !ok {
		return false
	}
	at := time.Now()
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	n, err := redis.NewScript(delRunningSrc).Run(cctx, in.rdb, []string{in.ks.Flight(r.key), in.ks.Waiters(r.key)},
		r.meta.OwnerToken).Int64()
	if err != nil || n < 0 {
		return false // the flight moved on meanwhile or Redis did not answer
	}
	in.record(Fault{Kind: FaultDeleteKeys, At: at, Key: r.key, Token: r.meta.OwnerToken,
		Note: fmt.Sprintf("owner %s token %d, %d parked: %d keys deleted", r.meta.OwnerID, r.meta.OwnerToken, len(r.meta.Parked), n)})
	return true
}

// canceller runs the producer binary's cancel command.
type canceller struct {
	bin, redisURL, tmpDir string
}

// cancel runs `producer cancel key --reason reason`. When crash is set, it adds the knobs
// that make it exit 86 right after the cancel script, before its answers. It returns the exit
// status and the output, and an error only when the process could not run.
func (c *canceller) cancel(ctx context.Context, key, reason string, crash bool) (int, string, error) {
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(cctx, c.bin, "cancel", key, "--reason", reason)
	cmd.Env = append(filterEnv(os.Environ(), "REDIS_URL", "REDIS_URL_FILE", "TMPDIR",
		"FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT", "FLIGHTDECK_FAULT_CRASH_AFTER"),
		"REDIS_URL="+c.redisURL, "TMPDIR="+c.tmpDir)
	if crash {
		cmd.Env = append(cmd.Env, "FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT=1", "FLIGHTDECK_FAULT_CRASH_AFTER=cancel:1")
	}
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return -1, string(out), fmt.Errorf("chaos: run producer cancel: %w", err)
	}
	return cmd.ProcessState.ExitCode(), strings.TrimSpace(string(out)), nil
}

// cancellerCrash cancels a running flight, preferably one with parked tasks, with a
// canceller that dies right after the cancel script, before answering the parked tasks.
// The consumers' parked-entry checks answer those. Half the time a second, plain cancel
// follows. It prints "already cancelled" and answers what is still parked.
func (in *injector) cancellerCrash(ctx context.Context) bool {
	r, ok := in.findFlight(ctx, 3*time.Second, true, nil)
	if !ok {
		return false
	}
	const reason = "chaos: canceller-crash"
	at := time.Now()
	code, out, err := in.canceller.cancel(ctx, r.key, reason, true)
	if err != nil {
		in.logf("fault %s: %v", FaultCancellerCrash, err)
		return false
	}
	in.addCancel(Cancel{Key: r.key, At: at, Crash: true, Exit: code, Output: clip([]byte(out))})
	note := fmt.Sprintf("owner %s token %d, %d parked: canceller exited %d", r.meta.OwnerID, r.meta.OwnerToken, len(r.meta.Parked), code)
	if code != faults.CrashExitCode {
		note += " (" + firstLine(out) + ")"
	}
	if in.rng.IntN(2) == 0 {
		at2 := time.Now()
		code2, out2, err := in.canceller.cancel(ctx, r.key, reason+" (second)", false)
		if err == nil {
			in.addCancel(Cancel{Key: r.key, At: at2, Exit: code2, Output: clip([]byte(out2))})
			note += fmt.Sprintf("; second cancel exited %d: %s", code2, firstLine(out2))
		}
	}
	in.record(Fault{Kind: FaultCancellerCrash, At: at, For: time.Since(at).Round(time.Millisecond).String(),
		Key: r.key, Token: r.meta.OwnerToken, Note: note})
	return true
}

func (in *injector) addCancel(c Cancel) {
	in.mu.Lock()
	in.cancels = append(in.cancels, c)
	in.mu.Unlock()
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

// masterKill SIGKILLs a Redis Cluster master or the Sentinel deployment's master, waits
// 1-5 s and restarts its node. kind says which.
func (in *injector) masterKill(kind string) {
	if in.cluster == nil {
		return
	}
	i := in.rng.IntN(in.cluster.Masters())
	down := in.between(time.Second, 5*time.Second)
	at := time.Now()
	f := Fault{Kind: kind, Target: fmt.Sprintf("master%d", i), At: at}
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

// reshard injects FaultReshard: it moves slots of a cluster master to a new master and back.
func (in *injector) reshard() {
	r, ok := in.cluster.(Resharder)
	if !ok {
		return
	}
	hold := in.between(2*time.Second, 5*time.Second)
	at := time.Now()
	note, err := r.Reshard(2500, hold)
	if cc, ok := in.rdb.(*redis.ClusterClient); ok {
		// The run's own client may still map slots to the node that is gone.
		cc.ReloadState(context.Background())
	}
	f := Fault{Kind: FaultReshard, Target: "cluster", At: at, For: time.Since(at).Round(time.Millisecond).String(), Note: note}
	if err != nil {
		f.Note = strings.TrimSpace(note + " " + err.Error())
	}
	in.record(f)
}
