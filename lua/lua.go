// Package lua holds Flightdeck's Redis scripts. Each script lives in its own .lua file that
// opens with a KEYS/ARGV/Output header, and is exported here as a *redis.Script (EVALSHA with
// an EVAL fallback on NOSCRIPT). The flight scripts (acquire, start, heartbeat, complete, fail,
// cancel, handover) share a prelude, lib.lua, that this package puts in front of each: the
// clock, the fence rule and the answering of tasks. Every key a script touches arrives in
// KEYS, and the keys of one call share one hash tag (a flight's {requestKey}, a session's
// {sessionId}) or are a single stream, so every script runs unchanged on Redis Cluster; only
// answer mode "write" (see lib.lua) reaches streams of other slots, and it is used on a single
// Redis node only.
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
	//go:embed lib.lua
	libSrc string
	//go:embed acquire.lua
	acquireSrc string
	//go:embed start.lua
	startSrc string
	//go:embed heartbeat.lua
	heartbeatSrc string
	//go:embed complete.lua
	completeSrc string
	//go:embed fail.lua
	failSrc string
	//go:embed cancel.lua
	cancelSrc string
	//go:embed handover.lua
	handoverSrc string
	//go:embed stream_touch.lua
	streamTouchSrc string
	//go:embed liveness.lua
	livenessSrc string
	//go:embed session_lock.lua
	sessionLockSrc string
)

// flightScript returns a flight script with the prelude in front of it.
func flightScript(src string) *redis.Script { return redis.NewScript(libSrc + "\n" + src) }

// Acquire decides who runs a flight: OWNER, FOLLOWER_WAIT, RESULT_HIT, FAILED_FINAL,
// CANCELLED or EXPIRED, and answers the tasks a final outcome settles. See acquire.lua.
var Acquire = flightScript(acquireSrc)

// Start moves a flight from PENDING to RUNNING for the token's owner.
var Start = flightScript(startSrc)

// Heartbeat renews the owner's lease, records progress, reports cancellation and expiry, and
// writes back a meta that is gone.
var Heartbeat = flightScript(heartbeatSrc)

// Complete stores the owner's result (or writes back a spooled one), makes the flight
// SUCCEEDED and answers every task waiting for it.
var Complete = flightScript(completeSrc)

// Fail records a failed attempt; a final failure answers every task waiting for the flight.
var Fail = flightScript(failSrc)

// Cancel makes a flight that may still run CANCELLED and answers its parked tasks.
var Cancel = flightScript(cancelSrc)

// Handover gives a running flight up without spending its attempt.
var Handover = flightScript(handoverSrc)

// StreamTouch keeps (or hands over) custody of the task entries a consumer holds.
var StreamTouch = redis.NewScript(streamTouchSrc)

// Liveness records a consumer process's heartbeat in the group's liveness hash.
var Liveness = redis.NewScript(livenessSrc)

// SessionLock acquires, renews or releases the fenced, leased lock of one interview session.
var SessionLock = redis.NewScript(sessionLockSrc)

// All lists every script, for loading them ahead of pipelines (SCRIPT LOAD).
func All() []*redis.Script {
	return []*redis.Script{Acquire, Start, Heartbeat, Complete, Fail, Cancel, Handover, StreamTouch,
		Liveness, SessionLock}
}
