package flight

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Policy holds the per-stage timing and retry values the state machine needs. It is passed
// with every call so that one coordinator serves stages with different policies.
type Policy struct {
	// Lease: a flight whose heartbeat is older than this is taken over. Defaults to 5 s.
	Lease time.Duration `yaml:"lease"`
	// RunningTTL caps one attempt: past start + RunningTTL the flight is EXPIRED.
	// Defaults to 2 min.
	RunningTTL time.Duration `yaml:"runningTTL"`
	// StallTimeout: a RUNNING flight whose reported progress is older than this is EXPIRED
	// although its heartbeat is fresh. Zero turns the check off. Defaults to 0.
	StallTimeout time.Duration `yaml:"stallTimeout"`
	// ResultTTL is how long a result and the SUCCEEDED meta answer duplicates.
	// Defaults to 10 min.
	ResultTTL time.Duration `yaml:"resultTTL"`
	// FailureTTL is how long a FAILED, CANCELLED or EXPIRED meta is kept. It also outlives an
	// active flight's expireAt by this much. Defaults to 1 min.
	FailureTTL time.Duration `yaml:"failureTTL"`
	// MaxAttempts bounds owner attempts of one flight. New attempts, retries, takeovers and
	// expiry takeovers all count. Defaults to 3.
	MaxAttempts int `yaml:"maxAttempts"`
	// MaxParked bounds the task ids parked on one flight. Past it, acquire answers
	// FOLLOWER_WAIT with reason "full" and parks nothing. Zero means no cap. Defaults to 0.
	MaxParked int `yaml:"maxParked"`
	// Durability is what a call that makes an owner or settles an outcome waits for before it
	// returns. Such calls are acquire, complete and fail. Defaults to DurabilityAsync.
	Durability Durability `yaml:"durability"`
	// ReplicationTimeout bounds the wait for a replica's acknowledgement under
	// DurabilityReplicated. At most 2 s. Defaults to 1 s.
	ReplicationTimeout time.Duration `yaml:"replicationTimeout"`
}

// Durability says what a flight's ownership and outcome changes must reach before the calls
// that make them return.
type Durability string

// The durabilities (DESIGN.md section 3, "Replicated claims").
const (
	// DurabilityAsync: a call returns once the master applied it. Redis replicates it
	// afterwards, and a failover in between can lose it.
	DurabilityAsync Durability = "async"
	// DurabilityReplicated: a call returns once a replica acknowledged it with WAIT 1. Else it
	// fails with ErrNotReplicated and a claim is given up (DESIGN.md section 3).
	DurabilityReplicated Durability = "replicated"
)

// maxReplicationTimeout bounds ReplicationTimeout. The WAIT rides in the call's pipeline,
// whose reply must come within the client's read timeout, 3 s by default.
const maxReplicationTimeout = 2 * time.Second

// WithDefaults returns p with every zero field set to its default.
func (p Policy) WithDefaults() Policy {
	if p.Lease == 0 {
		p.Lease = 5 * time.Second
	}
	if p.RunningTTL == 0 {
		p.RunningTTL = 2 * time.Minute
	}
	if p.ResultTTL == 0 {
		p.ResultTTL = 10 * time.Minute
	}
	if p.FailureTTL == 0 {
		p.FailureTTL = time.Minute
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = 3
	}
	if p.Durability == "" {
		p.Durability = DurabilityAsync
	}
	if p.ReplicationTimeout == 0 {
		p.ReplicationTimeout = time.Second
	}
	return p
}

// Validate reports a policy the scripts cannot run with. Call it on WithDefaults' result.
func (p Policy) Validate() error {
	var errs []error
	for name, d := range map[string]time.Duration{
		"lease": p.Lease, "runningTTL": p.RunningTTL, "resultTTL": p.ResultTTL, "failureTTL": p.FailureTTL,
	} {
		if d < time.Millisecond {
			errs = append(errs, fmt.Errorf("%s must be at least 1ms, got %v", name, d))
		}
	}
	if p.StallTimeout < 0 {
		errs = append(errs, fmt.Errorf("stallTimeout must not be negative, got %v", p.StallTimeout))
	}
	if p.MaxAttempts < 1 {
		errs = append(errs, fmt.Errorf("maxAttempts must be at least 1, got %d", p.MaxAttempts))
	}
	if p.MaxParked < 0 {
		errs = append(errs, fmt.Errorf("maxParked must not be negative, got %d", p.MaxParked))
	}
	if p.Durability != DurabilityAsync && p.Durability != DurabilityReplicated {
		errs = append(errs, fmt.Errorf("durability %q: want %q or %q", p.Durability, DurabilityAsync, DurabilityReplicated))
	}
	if p.ReplicationTimeout < time.Millisecond || p.ReplicationTimeout > maxReplicationTimeout {
		errs = append(errs, fmt.Errorf("replicationTimeout %v: want 1ms to %v", p.ReplicationTimeout, maxReplicationTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("flight: invalid policy: %w", err)
	}
	return nil
}

// FenceTTL is how long a flight's fence outlives its last change: twice runningTTL +
// failureTTL + resultTTL. A token that finds neither meta nor fence and is older than this is
// refused, since nothing proves it was not superseded. Call it on WithDefaults' result.
func (p Policy) FenceTTL() time.Duration {
	return 2 * (p.RunningTTL + p.FailureTTL + p.ResultTTL)
}

// pinned is the policy as the meta's policy field holds it. PinnedPolicy parses it.
func (p Policy) pinned() string {
	return strconv.FormatInt(ms(p.Lease), 10) + " " + strconv.FormatInt(ms(p.RunningTTL), 10) + " " +
		strconv.FormatInt(ms(p.StallTimeout), 10) + " " + strconv.FormatInt(ms(p.ResultTTL), 10) + " " +
		strconv.FormatInt(ms(p.FailureTTL), 10) + " " + strconv.Itoa(p.MaxAttempts)
}

func ms(d time.Duration) int64 { return d.Milliseconds() }
