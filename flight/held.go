package flight

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Held outcomes: a process never runs the model for a key whose outcome it holds unwritten
// (DESIGN.md section 6). An owner holds its result with Hold from the moment its model call
// returns until Redis took it or refused it. One whose write failed first spools the outcome
// with Add, and the spool holds it until Flush has its write-back taken or refused. Every
// owner asks Held after its acquire and before it runs anything. It completes its flight with
// a held result instead of a model call, unless Coordinator.RunClosed says the held result's
// run was closed for good: such a result is never stored.
//
// What makes the rule hold under concurrency is the key's active count. A caller enters the
// key with Enter before it sends its acquire and leaves after its run, so it asks Held while
// it is active. A hold released because another token owns the flight, while any caller of
// the key is active, stays visible to Held until the last of them leaves. That very caller's
// acquire may have taken the flight over, its reply still on the way. Redis orders the
// acquire before the refused write, and the caller entered before it sent the acquire, so no
// refusal can hide a held outcome from an owner whose token caused it. A result Redis took,
// or refused because its run was closed, is held no more.

// keyHold is one key's held state. Guarded by Spool.mu.
type keyHold struct {
	active int     // callers between Enter and leave
	holds  []*hold // in owners' hands, or released while active > 0
}

// hold is one outcome an owner has in hand through Hold, or one released while its key was active.
type hold struct {
	token    int64
	result   []byte
	released bool
}

// Spooled reports whether an outcome for key is spooled, waiting for its write-back.
func (s *Spool) Spooled(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spooled[key] > 0
}

// Enter marks a caller that is about to acquire key's flight and may own it. Call leave once
// the caller is done with the flight: after its run, or when its acquire did not make it
// owner. Holds of key released meanwhile stay visible to Held until the last caller leaves.
// leave may be called more than once.
func (s *Spool) Enter(key string) (leave func()) {
	s.mu.Lock()
	s.keyLocked(key).active++
	s.mu.Unlock()
	var once bool
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if once {
			return
		}
		once = true
		k := s.keys[key]
		k.active--
		if k.active == 0 {
			k.holds = slices.DeleteFunc(k.holds, func(h *hold) bool { return h.released })
		}
		s.tidyLocked(key, k)
	}
}

// Hold records that an owner of this process has result, produced under token for key, in
// hand and has not seen it written. Held answers it until release is called. An owner holds
// its result from the moment it has it until Redis took or refused it. One whose write failed
// spools the outcome with Add before it releases the hold, so that the outcome is held without
// a gap. release(true) says Redis stored the result, or refused it for good because its run
// was cancelled or expired for good, or the spool holds it now. The hold then ends at once. A
// result refused for good may never be stored, under any token. release(false) says Redis
// refused it because another token owns the flight, or it was not written at all. The hold
// then stays visible to Held while a caller of key is active, until the last one leaves: the
// refusal may be that caller's own takeover. result must not be modified until release
// returns. A hold that outlives it keeps a copy. release may be called more than once. The
// first call counts.
func (s *Spool) Hold(key string, token int64, result []byte) (release func(settled bool)) {
	h := &hold{token: token, result: result}
	s.mu.Lock()
	k := s.keyLocked(key)
	k.holds = append(k.holds, h)
	s.mu.Unlock()
	return func(settled bool) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if h.released {
			return
		}
		h.released = true
		k := s.keys[key]
		if settled || k.active == 0 {
			k.holds = slices.DeleteFunc(k.holds, func(x *hold) bool { return x == h })
		} else {
			// It outlives its owner's hands: keep a copy of its own.
			h.result = bytes.Clone(h.result)
		}
		s.tidyLocked(key, k)
	}
}

// Held returns the result and token of an outcome for key that this process holds and has
// not seen written, either in an owner's hand from Hold or spooled by Add. With several, it
// returns the largest token's. An owner asks it after its acquire, before it runs anything,
// and completes its flight with the held result instead: a process never runs a key whose
// outcome it holds. The result is the caller's own copy, because the owner whose hold it is
// may hand its slice on, as an Executor caller's Result.Value, once it released it.
func (s *Spool) Held(key string) (result []byte, token int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	defer func() {
		if ok {
			result = bytes.Clone(result)
		}
	}()
	if k := s.keys[key]; k != nil {
		for _, h := range k.holds {
			if !ok || h.token > token {
				result, token, ok = h.result, h.token, true
			}
		}
	}
	if s.spooled[key] == 0 {
		return result, token, ok
	}
	for _, o := range s.pending {
		if o.Key == key && (!ok || o.Token > token) {
			result, token, ok = o.Result, o.Token, true
		}
	}
	return result, token, ok
}

// RunClosed reports whether the run of token on key was closed for good: the key's fence
// records that very token as cancelled or expired for good (DESIGN.md section 3). Such a run's
// outcome may never be stored, under its own token or another's. So an owner about to complete
// its own flight with another run's outcome, one its process holds by Spool.Held or one the
// archive holds, asks first, and runs the flight itself when it was. The owner asks after its
// acquire made it owner. From then on no run of a token below its own can be closed, so the
// answer cannot change. It answers false when there is no fence, because it expired or was
// lost with Redis's data, or when the fence is of another run, since it records the last
// ended run only.
func (c *Coordinator) RunClosed(ctx context.Context, key string, token int64) (bool, error) {
	v, err := c.rdb.Get(ctx, c.ks.Fence(key)).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("flight: fence of %q: %w", key, err)
	}
	tok, mark, _ := strings.Cut(v, ":")
	fence, err := strconv.ParseInt(tok, 10, 64)
	if err != nil {
		return false, fmt.Errorf("flight: fence of %q: %w: %q", key, ErrProtocol, v)
	}
	return (mark == "c" || mark == "x") && fence == token, nil
}

// orphanLocked keeps a spooled outcome whose write-back was refused because another token owns
// the flight visible to Held while a caller of its key is active. The refusal may be that
// caller's own takeover, its reply still on the way. One refused because its run was closed
// is not kept: it may never be stored.
func (s *Spool) orphanLocked(o Outcome) {
	if k := s.keys[o.Key]; k != nil && k.active > 0 {
		k.holds = append(k.holds, &hold{token: o.Token, result: o.Result, released: true})
	}
}

func (s *Spool) keyLocked(key string) *keyHold {
	if s.keys == nil {
		s.keys = map[string]*keyHold{}
	}
	k := s.keys[key]
	if k == nil {
		k = &keyHold{}
		s.keys[key] = k
	}
	return k
}

// setPendingLocked replaces the pending outcomes with outs and indexes them by key.
func (s *Spool) setPendingLocked(outs []Outcome) {
	s.pending = outs
	clear(s.spooled)
	for _, o := range outs {
		s.countLocked(o.Key)
	}
}

// countLocked counts one more pending outcome of key.
func (s *Spool) countLocked(key string) {
	if s.spooled == nil {
		s.spooled = map[string]int{}
	}
	s.spooled[key]++
}

func (s *Spool) tidyLocked(key string, k *keyHold) {
	if k.active == 0 && len(k.holds) == 0 {
		delete(s.keys, key)
	}
}
