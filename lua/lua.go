// Package lua holds Flightdeck's Redis scripts. Each script lives in its own .lua file that
// opens with a KEYS/ARGV/Output header, and is exported here as a *redis.Script (EVALSHA with
// an EVAL fallback on NOSCRIPT). Every key a script touches arrives in KEYS, and the keys of
// one call share one hash tag (a flight's {requestKey}, a session's {sessionId}) or are a
// single stream, so every script runs unchanged on Redis Cluster.
package lua

import (
	_ "embed"

	"github.com/redis/go-redis/v9"
)

var (
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
	//go:embed stream_ack.lua
	streamAckSrc string
	//go:embed stream_touch.lua
	streamTouchSrc string
	//go:embed liveness.lua
	livenessSrc string
	//go:embed session_lock.lua
	sessionLockSrc string
	//go:embed restore.lua
	restoreSrc string
)

// Acquire decides who runs a flight: OWNER, FOLLOWER_WAIT, RESULT_HIT, FAILED_FINAL,
// CANCELLED or EXPIRED. See acquire.lua for KEYS, ARGV and the reply.
var Acquire = redis.NewScript(acquireSrc)

// Start moves a flight from PENDING to RUNNING for the token's owner.
var Start = redis.NewScript(startSrc)

// Heartbeat renews the owner's lease and records progress; it reports cancellation and expiry.
var Heartbeat = redis.NewScript(heartbeatSrc)

// Complete stores the owner's result and makes the flight SUCCEEDED.
var Complete = redis.NewScript(completeSrc)

// Fail records a failed attempt and makes the flight FAILED.
var Fail = redis.NewScript(failSrc)

// Cancel makes an active flight CANCELLED.
var Cancel = redis.NewScript(cancelSrc)

// StreamAck acknowledges task entries only while the calling consumer still holds them.
var StreamAck = redis.NewScript(streamAckSrc)

// StreamTouch resets the idle time of an entry the calling consumer still holds.
var StreamTouch = redis.NewScript(streamTouchSrc)

// Liveness records a consumer process's heartbeat in the group's liveness hash.
var Liveness = redis.NewScript(livenessSrc)

// SessionLock acquires, renews or releases the fenced, leased lock of one interview session.
var SessionLock = redis.NewScript(sessionLockSrc)

// Restore writes back an uncertain outcome: a result the model produced while Redis was down.
var Restore = redis.NewScript(restoreSrc)

// All lists every script, for loading them ahead of pipelines (SCRIPT LOAD).
func All() []*redis.Script {
	return []*redis.Script{Acquire, Start, Heartbeat, Complete, Fail, Cancel, StreamAck, StreamTouch, Liveness, Restore, SessionLock}
}
