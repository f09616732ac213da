// Package faults reads the fault-injection knobs of the Flightdeck binaries from the
// environment. They exist for chaos runs and process tests, which need a process to die at
// a precise point, such as between a flight script and the writing of its answers. No
// production setting uses them.
//
//	FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT=1   write answers after the scripts, as on Redis
//	                                         Cluster, even on a single node
//	FLIGHTDECK_FAULT_CRASH_AFTER=OP:P        exit with status 86 right after the answering
//	                                         script OP with probability P in [0, 1].
//	                                         OP is acquire, complete, fail, cancel or "*".
package faults

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/redis/go-redis/v9"
)

// CrashExitCode is the exit status of a process that a fault knob crashed.
const CrashExitCode = 86

// Knobs are the parsed fault-injection settings.
type Knobs struct {
	// AnswerAfterScript makes answers be written after the scripts, as on Redis Cluster,
	// even on a single node.
	AnswerAfterScript bool
	// CrashOp and CrashP make the process exit after the script CrashOp with probability
	// CrashP. A CrashOp of "*" means any script.
	CrashOp string
	CrashP  float64
}

// FromEnv reads the knobs. An unparsable value is an error.
func FromEnv(getenv func(string) string) (Knobs, error) {
	var k Knobs
	k.AnswerAfterScript = getenv("FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT") == "1"
	if v := getenv("FLIGHTDECK_FAULT_CRASH_AFTER"); v != "" {
		op, p, ok := strings.Cut(v, ":")
		prob, err := strconv.ParseFloat(p, 64)
		if !ok || op == "" || err != nil || prob < 0 || prob > 1 {
			return Knobs{}, fmt.Errorf("FLIGHTDECK_FAULT_CRASH_AFTER=%q: want OP:P with P in [0, 1]", v)
		}
		k.CrashOp, k.CrashP = op, prob
	}
	return k, nil
}

// Hook returns the crash knob as a go-redis hook made by AfterScripts, or nil when no crash
// is set.
func (k Knobs) Hook() redis.Hook {
	if k.CrashOp == "" || k.CrashP == 0 {
		return nil
	}
	return AfterScripts(k.crash)
}

// Wrap adds Hook to every client newClient returns. When no crash is set, it returns
// newClient as it is.
func (k Knobs) Wrap(newClient func() redis.UniversalClient) func() redis.UniversalClient {
	h := k.Hook()
	if h == nil {
		return newClient
	}
	return func() redis.UniversalClient {
		c := newClient()
		c.AddHook(h)
		return c
	}
}

// crash writes one line to stderr and exits the process with CrashExitCode, with
// probability CrashP, after the script op when CrashOp names it or is "*".
func (k Knobs) crash(op string) {
	if (k.CrashOp == "*" || k.CrashOp == op) && rand.Float64() < k.CrashP {
		fmt.Fprintf(os.Stderr, `{"level":"error","fault":"crash_after_script","op":%q,"message":"fault injection: exiting after the %s script, before its answers"}`+"\n", op, op)
		os.Exit(CrashExitCode)
	}
}

// AfterScripts returns a go-redis hook that calls f with the script's name after Redis
// answered a call of that flight function, before the caller sees the reply. The names are
// acquire, complete, fail and cancel. A process that dies in f leaves the script's answers
// unwritten.
func AfterScripts(f func(op string)) redis.Hook {
	ops := map[string]string{}
	for op, fn := range map[string]*lua.Function{"acquire": lua.Acquire, "complete": lua.Complete,
		"fail": lua.Fail, "cancel": lua.Cancel} {
		ops[fn.Name()] = op
	}
	return afterScripts{ops: ops, f: f}
}

type afterScripts struct {
	ops map[string]string
	f   func(op string)
}

func (h afterScripts) after(cmd redis.Cmder, err error) {
	args := cmd.Args()
	if err != nil || len(args) < 2 || !strings.EqualFold(cmd.Name(), "fcall") {
		return
	}
	if name, ok := args[1].(string); ok {
		if op, ok := h.ops[name]; ok {
			h.f(op)
		}
	}
}

func (h afterScripts) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h afterScripts) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(cmd, err)
		return err
	}
}

func (h afterScripts) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.after(cmd, cmd.Err())
		}
		return err
	}
}
