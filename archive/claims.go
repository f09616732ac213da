package archive

import (
	"context"
	"errors"
	"time"
)

// Claims are the fence that outlives Redis. An owner that takes a flight over from an
// owner that may still be running claims the key with its token before it runs the model.
// A Redis data loss takes the flight's fence with it. After one, the claim or a newer
// archived outcome refuses the older owner's write-back. See docs/DESIGN.md section 9.

// Claim records durably through Store.Claim, before the model call, that token owns key's
// flight. While the archive is away it fails at once with ErrUnavailable, like Lookup. It
// does not need Run. A failure, a timeout included, marks the archive away, unless ctx was
// cancelled or gave it less than 100 ms.
func (w *Writer) Claim(ctx context.Context, key string, token int64, ttl time.Duration) error {
	if err := w.available("claim", key, false); err != nil {
		return err
	}
	short := shortBound(ctx)
	if err := w.store.Claim(ctx, key, token, ttl); err != nil {
		if !errors.Is(err, ErrInvalid) {
			w.failed(ctx, short, "claim", err)
		}
		return err
	}
	return nil
}

// Fence returns the largest owner token the archive knows for key, from Store.Fence. While
// the archive is away it fails at once with ErrUnavailable, like Lookup. It does not need
// Run, because a consumer writes its spool back before Run starts. A failure, a timeout
// included, marks the archive away, unless ctx was cancelled or gave it less than 100 ms.
func (w *Writer) Fence(ctx context.Context, key string) (int64, bool, error) {
	if err := w.available("fence", key, false); err != nil {
		return 0, false, err
	}
	short := shortBound(ctx)
	tok, ok, err := w.store.Fence(ctx, key)
	if err != nil {
		w.failed(ctx, short, "fence", err)
		return 0, false, err
	}
	return tok, ok, nil
}

// healthBound is the shortest caller bound whose timeout says the archive is unwell. A call
// given less time than this can miss it on a healthy database.
const healthBound = 100 * time.Millisecond

// shortBound reports whether ctx leaves less than healthBound.
func shortBound(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && time.Until(dl) < healthBound
}

// failed counts a failed call of op and marks the archive away, so that an archive that
// does not answer holds up no other owner's call. Later calls then fail at once until a
// probe answers. It does not mark the archive away when the failure says nothing of it:
// the caller cancelled the call, or short is set and the call ran out of its bound.
func (w *Writer) failed(ctx context.Context, short bool, op string, err error) {
	w.metrics.errors.WithLabelValues(op).Inc()
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
	case short && errors.Is(ctx.Err(), context.DeadlineExceeded):
	default:
		w.markDown(err)
	}
}
