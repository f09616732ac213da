// Package lua holds Flightdeck's Redis scripts. Each script is in its own .lua file that opens
// with a KEYS/ARGV/Output header.
//
// The flight scripts acquire, start, heartbeat, complete, fail, cancel and handover form one
// Redis Functions library, loaded with FUNCTION LOAD on Redis 7.0 or later. lib.lua holds the
// helpers they share, such as the clock, the fence rule and the answering of tasks, defined
// once when the library loads. Each script's file registers one function (acquire.lua two:
// acquire and hit, the short answer of a late duplicate). A call then runs
// only its body, not a prelude, which keeps an owner's two calls per task cheap. The
// library's name and its functions' names carry a hash of its source, so consumers of two
// versions run side by side during a rolling deploy. Function.Run loads the library on
// demand, since a Redis restarted without persistence forgets it. It never replaces a library
// that is there: on a Redis shared by tenants only an operator's credential may load it, and
// a consumer checks at start that the library holds this build's code. See library.go.
//
// The other scripts are plain scripts, run with EVALSHA and an EVAL fallback: stream_touch,
// liveness, session_lock, and the scheduled set's schedule_add, schedule_due, schedule_done
// and schedule_cancel. Every key a script touches arrives in KEYS. The keys of one call share
// one hash tag or are a single stream. The tag is a flight's {requestKey}, a session's
// {tenant:sessionId}, or a stage's {stage} of its scheduled set. So every script runs
// unchanged on Redis Cluster. Only answer mode "write", see lib.lua, reaches streams of other
// slots, and it is used on a single Redis node only.
package lua

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"strings"

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
	//go:embed limit.lua
	limitSrc string
	//go:embed stream_touch.lua
	streamTouchSrc string
	//go:embed liveness.lua
	livenessSrc string
	//go:embed session_lock.lua
	sessionLockSrc string
	//go:embed schedule_due.lua
	scheduleDueSrc string
	//go:embed schedule_add.lua
	scheduleAddSrc string
	//go:embed schedule_done.lua
	scheduleDoneSrc string
	//go:embed schedule_cancel.lua
	scheduleCancelSrc string
)

// library is the flight function library's source and prefix, set once by newLibrary.
type library struct {
	name, prefix, src string
}

func newLibrary() library {
	body := strings.Join([]string{libSrc, acquireSrc, startSrc, heartbeatSrc, completeSrc, failSrc,
		cancelSrc, handoverSrc, limitSrc}, "\n")
	sum := sha256.Sum256([]byte(body))
	v := hex.EncodeToString(sum[:6])
	lib := library{name: "flightdeck_" + v, prefix: "fd_" + v + "_"}
	lib.src = "#!lua name=" + lib.name + "\n" + strings.Replace(body, "{{prefix}}", lib.prefix, 1)
	return lib
}

var flightLib = newLibrary()

// Library returns the flight library's name and source, for inspection and tests.
func Library() (name, src string) { return flightLib.name, flightLib.src }

// Function is one function of the flight library.
type Function struct {
	name string
}

// Name is the function's name in Redis, with the library's version prefix.
func (f *Function) Name() string { return f.name }

// Run calls the function on c with FCALL. When Redis does not know it, because the library
// was never loaded or Redis lost it with a restart, it loads the library if c may, and calls again.
func (f *Function) Run(ctx context.Context, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	return f.RunVia(ctx, c, c, keys, args...)
}

// RunVia is Run with the call sent through calls, such as a Batcher. c loads the library when
// Redis does not know it. A library that is there is never replaced: the call runs what
// EnsureLibrary checked at start. When the library is missing and c may not load it, the
// call fails with ErrLibraryMissing.
func (f *Function) RunVia(ctx context.Context, calls FCaller, c redis.UniversalClient, keys []string, args ...any) *redis.Cmd {
	cmd := calls.FCall(ctx, f.name, keys, args...)
	if err := cmd.Err(); err != nil && isNoFunction(err) {
		if lerr := loadMissing(ctx, c); lerr != nil {
			if errors.Is(lerr, ErrLibraryMissing) {
				cmd.SetErr(lerr)
			}
			return cmd
		}
		cmd = calls.FCall(ctx, f.name, keys, args...)
	}
	return cmd
}

func isNoFunction(err error) bool {
	return strings.Contains(err.Error(), "Function not found") || strings.Contains(err.Error(), "No such function")
}

func fn(name string) *Function { return &Function{name: flightLib.prefix + name} }

// Acquire decides who runs a flight: OWNER, FOLLOWER_WAIT, RESULT_HIT, FAILED_FINAL,
// CANCELLED or EXPIRED, and answers the tasks a final outcome settles. See acquire.lua.
var Acquire = fn("acquire")

// Hit answers a duplicate of a key from the outcome its consumer completed a moment ago, once
// the record shows that outcome still stands. See acquire.lua.
var Hit = fn("hit")

// Start moves a flight from PENDING to RUNNING for the token's owner.
var Start = fn("start")

// Heartbeat renews the owner's lease, records progress, reports cancellation and expiry, and
// writes back a meta that is gone.
var Heartbeat = fn("heartbeat")

// Complete stores the owner's result or writes back a spooled one, makes the flight
// SUCCEEDED and answers every task waiting for it.
var Complete = fn("complete")

// Fail records a failed attempt. A final failure answers every task waiting for the flight.
var Fail = fn("fail")

// Cancel makes a flight that may still run CANCELLED and answers its parked tasks.
var Cancel = fn("cancel")

// Handover gives a running flight up without spending its attempt.
var Handover = fn("handover")

// LimitTake takes one call's requests, tokens and concurrency slot from a named limiter, or
// says how long to wait. See limit.lua.
var LimitTake = fn("limit_take")

// LimitSettle corrects a limiter after a call: the tokens the provider counted, the budget it
// says remains, and a 429's hold.
var LimitSettle = fn("limit_settle")

// StreamTouch keeps or hands over custody of the task entries a consumer holds.
var StreamTouch = redis.NewScript(streamTouchSrc)

// Liveness records a consumer process's heartbeat in the group's liveness hash.
var Liveness = redis.NewScript(livenessSrc)

// SessionLock acquires, renews or releases the fenced, leased lock of one interview session.
var SessionLock = redis.NewScript(sessionLockSrc)

// ScheduleAdd keeps a task in its stage's scheduled set until it is due, indexed by its
// request key.
var ScheduleAdd = redis.NewScript(scheduleAddSrc)

// ScheduleDue takes the due members of a stage's scheduled set for appending to its task
// stream.
var ScheduleDue = redis.NewScript(scheduleDueSrc)

// ScheduleDone forgets the scheduled members that were appended to the task stream, with their
// payloads and index entries.
var ScheduleDone = redis.NewScript(scheduleDoneSrc)

// ScheduleCancel removes one request key's tasks from its stage's scheduled set and returns
// their payloads.
var ScheduleCancel = redis.NewScript(scheduleCancelSrc)

// Scripts lists the plain scripts, for loading them with SCRIPT LOAD ahead of pipelines.
func Scripts() []*redis.Script {
	return []*redis.Script{StreamTouch, Liveness, SessionLock, ScheduleAdd, ScheduleDue, ScheduleDone, ScheduleCancel}
}
