package main

import (
	"fmt"
	"runtime/debug"
	"strconv"
)

// defaultGCPercent is the consumer's garbage-collector target when neither --gc-percent nor
// GOGC sets one. A consumer's live heap is a few MB while every task allocates, so Go's
// default of 100 collects very often. At 400 the heap may grow to five times the live heap
// between collections. That costs a few tens of MB and saves a tenth of the CPU a task costs
// the consumer. See docs/BENCHMARKS.md, section 1.
const defaultGCPercent = 400

// gcPercent returns the garbage-collector target to set from the --gc-percent flag, a
// percentage or "off", and the GOGC environment variable. apply is false when GOGC is set and
// the flag is not, so the runtime's own setting stays.
func gcPercent(flagValue, env string) (percent int, apply bool, err error) {
	switch {
	case flagValue == "" && env != "":
		return 0, false, nil
	case flagValue == "":
		return defaultGCPercent, true, nil
	case flagValue == "off":
		return -1, true, nil
	}
	n, err := strconv.Atoi(flagValue)
	if err != nil || n < 0 {
		return 0, false, fmt.Errorf("--gc-percent %q: want a percentage (0 or more) or \"off\"", flagValue)
	}
	return n, true, nil
}

// setGCPercent applies gcPercent's choice.
func setGCPercent(flagValue, env string) error {
	p, apply, err := gcPercent(flagValue, env)
	if err != nil {
		return err
	}
	if apply {
		debug.SetGCPercent(p)
	}
	return nil
}
