// Package faults reads the fault-injection knobs of the Flightdeck binaries from the
// environment. They exist for chaos runs and process tests, which need a process to die at a
// precise point (between a flight script and the writing of its answers); no production
// setting uses them.
//
//	FLIGHTDECK_FAULT_ANSWER_AFTER_SCRIPT=1   write answers after the scripts, as on Redis
//	                                         Cluster, even on a single node
//	FLIGHTDECK_FAULT_CRASH_AFTER=OP:P        exit (status 86) right after the answering script
//	                                         OP (acquire, complete, fail, cancel, or "*") with
//	                                         probability P in [0, 1]
package faults

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
)

// CrashExitCode is the exit status of a process that a fault knob crashed.
const CrashExitCode = 86

// Knobs are the parsed fault-injection settings.
type Knobs struct {
	// AnswerAfterScript forces answer mode return.
	AnswerAfterScript bool
	// CrashOp and CrashP: exit after the script CrashOp ("*": any) with probability CrashP.
	CrashOp string
	CrashP  float64
}

// FromEnv reads the knobs; an unparsable value is an error.
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

// AfterScript returns the hook for flight.Config.AfterScript, or nil when no crash is set.
// The hook writes one line to stderr and exits the process with CrashExitCode.
func (k Knobs) AfterScript() func(op string) {
	if k.CrashOp == "" || k.CrashP == 0 {
		return nil
	}
	return func(op string) {
		if (k.CrashOp == "*" || k.CrashOp == op) && rand.Float64() < k.CrashP {
			fmt.Fprintf(os.Stderr, `{"level":"error","fault":"crash_after_script","op":%q,"message":"fault injection: exiting after the %s script, before its answers"}`+"\n", op, op)
			os.Exit(CrashExitCode)
		}
	}
}
