package flight

import (
	"bytes"
	"slices"
)

// Held outcomes (DESIGN.md section 6): a process never runs the model for a key whose outcome
// it holds unwritten. An owner holds its result from the moment its model call returns until
// Redis took it or refused it (Hold); one whose write failed spools the outcome first (Add),
// and the spool holds it until its write-back is taken or refused (Flush). Every owner asks
// Held after its acquire and before it runs anything, and completes its flight with a held
// result instead of a model call.
//
// What makes the rule hold under concurrency is the key's active count: a caller enters the
// key (Enter) before it sends its acquire and leaves after its run, so it asks Held while it
// is active. A hold released while any caller of the key is active (a write refused because
// that very caller's acquire took the flight over, its reply still on the way) stays visible
// to Held until the last of them leaves. Redis orders the acquire before the refused write,
// and the caller entered before it sent the acquire: no refusal can hide a held outcome from
// an owner whose token caused it.

// keyHold is one key's held state. Guarded by Spool.mu.
type keyHold struct {
	active int     // callers between Enter and leave
	holds  []*hold // in owners' hands, or released while active > 0
}

// hold is one outcome an owner has in hand (Hold), or one released while its key was active.
type hold struct {
	token    int64
	result   []byte
	released bool
}

// Spooled reports whether an outcome for key is spooled (waiting for its write-back).
func (s *Spool) Spooled(key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.pending {
		if o.Key == key {
			return true
		}
	}
	return false
}

// Enter marks a caller that is about to acquire key's flight and may own it; call leave once
// the caller is done with the flight (after its run, or when its acquire did not make it
// owner). Holds of key released meanwhile stay visible to Held until the last caller leaves.
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
// hand and has not seen it written: Held answers it until release is called (and, while a
// caller of key is active, until the last one leaves). An owner holds its result from the
// moment it has it until Redis took or refused it; one whose write failed spools the outcome
// (Add) before it releases the hold, so that the outcome is held without a gap. result must
// not be modified until release returns (a hold that outlives it keeps a copy). release may
// be called more than once.
func (s *Spool) Hold(key string, token int64, result []byte) (release func()) {
	h := &hold{token: token, result: result}
	s.mu.Lock()
	k := s.keyLocked(key)
	k.holds = append(k.holds, h)
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if h.released {
			return
		}
		h.released = true
		k := s.keys[key]
		if k.active == 0 {
			k.holds = slices.DeleteFunc(k.holds, func(x *hold) bool { return x == h })
		} else {
			// It outlives its owner's hands: keep a copy of its own.
			h.result = bytes.Clone(h.result)
		}
		s.tidyLocked(key, k)
	}
}

// Held returns the result and token of an outcome for key that this process holds and has
// not seen written: in an owner's hand (Hold) or spooled (Add), the largest token's when there
// are several. An owner asks it after its acquire, before it runs anything, and completes its
// flight with the held result instead: a process never runs a key whose outcome it holds. The
// result must not be modified.
func (s *Spool) Held(key string) (result []byte, token int64, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if k := s.keys[key]; k != nil {
		for _, h := range k.holds {
			if !ok || h.token > token {
				result, token, ok = h.result, h.token, true
			}
		}
	}
	for _, o := range s.pending {
		if o.Key == key && (!ok || o.Token > token) {
			result, token, ok = o.Result, o.Token, true
		}
	}
	return result, token, ok
}

// orphanLocked keeps a spooled outcome whose write-back was refused visible to Held while a
// caller of its key is active (the refusal may be that caller's own takeover, its reply still
// on the way).
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

func (s *Spool) tidyLocked(key string, k *keyHold) {
	if k.active == 0 && len(k.holds) == 0 {
		delete(s.keys, key)
	}
}
