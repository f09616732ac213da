package flight

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/lua"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// ErrLockLost: the caller's token no longer holds the session lock. Its lease ran out and
// perhaps another holder took the lock, or it was released. Nothing was written. The caller
// must stop its heavy work and write nothing under that token.
var ErrLockLost = errors.New("flight: session lock lost")

// sessionFenceTTL is how long a session's fence counter outlives its last use. Tokens stay
// strictly increasing without it, since they are at least Redis TIME in microseconds. It only
// guards against a Redis clock that steps back while the counter lives.
const sessionFenceTTL = 7 * 24 * time.Hour

// SessionLock serializes heavy stages per interview session across the fleet: at most one
// holder per session of a tenant at a time, for one lease that the holder renews. Two
// tenants' sessions of the same id are different sessions. Each acquisition gets a fencing
// token, strictly increasing per session, also across releases, lease expiries and the loss
// of the fence key. Pass it along with writes so that a holder whose lease ran out can be
// refused downstream (DESIGN.md sections 2 and 7).
//
// A holder is a string naming the caller, such as node and task. Acquiring again under
// the same holder string while it holds the lock returns the same token and renews the lease,
// so two callers must never share a holder string.
//
// The state lives in Redis under topics.Keyspace.SessionLock and SessionFence, see
// lua/session_lock.lua. A SessionLock holds only its client and keyspace and is safe for
// concurrent use. It does not close the client.
type SessionLock struct {
	rdb redis.UniversalClient
	ks  topics.Keyspace
}

// NewSessionLock returns a session lock on rdb with the keys of ks.
func NewSessionLock(rdb redis.UniversalClient, ks topics.Keyspace) *SessionLock {
	return &SessionLock{rdb: rdb, ks: ks}
}

// sessionReply is a decoded answer of the session_lock script.
type sessionReply struct {
	code   string
	token  int64
	holder string
	pttl   time.Duration
}

func (l *SessionLock) run(ctx context.Context, tenant, sessionID string, args ...any) (sessionReply, error) {
	res, err := lua.SessionLock.Run(ctx, l.rdb,
		[]string{l.ks.SessionLock(tenant, sessionID), l.ks.SessionFence(tenant, sessionID)}, args...).Slice()
	if err != nil {
		return sessionReply{}, err
	}
	if len(res) == 0 {
		return sessionReply{}, fmt.Errorf("%w: session lock answered nothing", ErrProtocol)
	}
	var r sessionReply
	r.code, _ = res[0].(string)
	if len(res) > 1 {
		r.token, _ = res[1].(int64)
	}
	if len(res) > 3 {
		r.holder, _ = res[2].(string)
		ms, _ := res[3].(int64)
		r.pttl = time.Duration(ms) * time.Millisecond
	}
	switch r.code {
	case "OK", "LOST":
		return r, nil
	case "BUSY":
		if r.token <= 0 {
			return r, fmt.Errorf("%w: corrupt session lock value %q", ErrProtocol, r.holder)
		}
		return r, nil
	default:
		return r, fmt.Errorf("%w: session lock code %q", ErrProtocol, r.code)
	}
}

// checkSession reports a tenant or session id that cannot name a session lock.
func checkSession(tenant, sessionID string) error {
	if tenant == "" {
		return fmt.Errorf("%w: empty tenant", ErrInvalidKey)
	}
	if err := CheckKey(sessionID); err != nil {
		return err
	}
	return CheckKey(tenant + ":" + sessionID)
}

func checkSessionLease(lease time.Duration) error {
	if lease < time.Millisecond {
		return fmt.Errorf("lease %v is below 1ms", lease)
	}
	return nil
}

func sessionFenceArg(lease time.Duration) int64 {
	return ms(max(sessionFenceTTL, 2*lease))
}

// tryAcquire runs acquire once and returns the whole reply.
func (l *SessionLock) tryAcquire(ctx context.Context, tenant, sessionID, holder string, lease time.Duration) (sessionReply, error) {
	if err := checkSession(tenant, sessionID); err != nil {
		return sessionReply{}, fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	if holder == "" {
		return sessionReply{}, fmt.Errorf("flight: session lock %q: empty holder", sessionID)
	}
	if err := checkSessionLease(lease); err != nil {
		return sessionReply{}, fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	r, err := l.run(ctx, tenant, sessionID, "acquire", holder, ms(lease), sessionFenceArg(lease))
	if err != nil {
		return r, fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	return r, nil
}

// TryAcquire tries once to take the lock of tenant's session sessionID for holder, for one lease of at least 1 ms.
// With ok true the caller holds the lock with token until the lease ends: it renews the lease
// with Renew and frees the lock with Release. With ok false another holder has the lock and
// token is that holder's token. A holder that already holds the lock gets ok true, its
// existing token and a fresh lease. sessionID must pass CheckKey and holder must not be empty.
func (l *SessionLock) TryAcquire(ctx context.Context, tenant, sessionID, holder string, lease time.Duration) (token int64, ok bool, err error) {
	r, err := l.tryAcquire(ctx, tenant, sessionID, holder, lease)
	if err != nil {
		return 0, false, err
	}
	return r.token, r.code == "OK", nil
}

// Acquire waits for sessionID's lock and returns the caller's token. It tries, then sleeps
// poll with ±50% jitter, never past the current holder's lease end, and tries again, until it
// holds the lock or ctx ends. Then it returns ctx's error, wrapped. A Redis error ends the
// wait too. poll must be positive. See TryAcquire for the rest.
func (l *SessionLock) Acquire(ctx context.Context, tenant, sessionID, holder string, lease, poll time.Duration) (int64, error) {
	if poll <= 0 {
		return 0, fmt.Errorf("flight: session lock %q: poll %v is not positive", sessionID, poll)
	}
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		r, err := l.tryAcquire(ctx, tenant, sessionID, holder, lease)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil && !errors.Is(err, ctxErr) {
				return 0, fmt.Errorf("flight: session lock %q: %w", sessionID, ctxErr)
			}
			return 0, err
		}
		if r.code == "OK" {
			return r.token, nil
		}
		wait := poll/2 + rand.N(poll+1)
		if r.pttl > 0 && r.pttl+time.Millisecond < wait {
			wait = r.pttl + time.Millisecond
		}
		if timer == nil {
			timer = time.NewTimer(wait)
		} else {
			timer.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("flight: session lock %q: %w", sessionID, ctx.Err())
		case <-timer.C:
		}
	}
}

// Renew restarts the lease of the holder of token at lease, at least 1 ms. It answers
// ErrLockLost, wrapped, when token no longer holds sessionID's lock, and the lock is then left
// as it is. Renew well within the lease, such as every third of it.
func (l *SessionLock) Renew(ctx context.Context, tenant, sessionID string, token int64, lease time.Duration) error {
	if err := checkSession(tenant, sessionID); err != nil {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	if err := checkSessionLease(lease); err != nil {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	r, err := l.run(ctx, tenant, sessionID, "renew", tok(token), ms(lease), sessionFenceArg(lease))
	if err != nil {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	if r.code != "OK" {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, ErrLockLost)
	}
	return nil
}

// Release frees sessionID's lock when token still holds it. It answers ErrLockLost, wrapped,
// when it does not because the lease ran out or the lock was released already. The lock is
// then left as it is. The fence counter stays, so the next token is larger.
func (l *SessionLock) Release(ctx context.Context, tenant, sessionID string, token int64) error {
	if err := checkSession(tenant, sessionID); err != nil {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	r, err := l.run(ctx, tenant, sessionID, "release", tok(token), "0", "0")
	if err != nil {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, err)
	}
	if r.code != "OK" {
		return fmt.Errorf("flight: session lock %q: %w", sessionID, ErrLockLost)
	}
	return nil
}
