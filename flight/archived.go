package flight

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Archived is the terminal outcome of a flight as a durable archive, such as package archive,
// keeps it: one per request key, the latest token's.
type Archived struct {
	// Key, Stage and Tenant identify the flight.
	Key, Stage, Tenant string
	// Status is SUCCEEDED, FAILED, CANCELLED or EXPIRED.
	Status Status
	// Token is the owner token the outcome was produced under. Attempts is the flight's attempts.
	Token    int64
	Attempts int
	// Result is the result of a SUCCEEDED flight.
	Result []byte
	// ErrorType, ErrorCode and Error describe a FAILED, CANCELLED or EXPIRED one.
	ErrorType, ErrorCode, Error string
	// FinishedAt is when the flight ended.
	FinishedAt time.Time
	// Retention is how long the archive keeps the outcome after FinishedAt.
	Retention time.Duration
}

// Answers reports whether the archived outcome answers a new owner of its key without a run:
// a result, or a failure or cancellation that ended less than failureTTL ago, as Redis would
// have kept it. An expired flight never does.
func (a Archived) Answers(failureTTL time.Duration) bool {
	switch a.Status {
	case StatusSucceeded:
		return true
	case StatusExpired:
		return false
	}
	return time.Since(a.FinishedAt) <= failureTTL
}

// Archived returns the outcome status of the flight o owned, as the archive keeps it. f
// describes a failure.
func (o Ownership) Archived(status Status, result []byte, f Failure, retention time.Duration) Archived {
	return Archived{Key: o.Key, Stage: o.Stage, Tenant: o.Tenant, Status: status, Token: o.Token,
		Attempts: max(o.Attempts, 1), Result: result, ErrorType: f.Type, ErrorCode: f.Code, Error: f.Message,
		FinishedAt: time.Now(), Retention: retention}
}

// Final returns the outcome an acquire of key answered its caller with when it ended the
// flight for good there: CANCELLED, or EXPIRED for the flight and not only for the caller's
// deadline. ok is false for any other decision.
func (d Decision) Final(key, stage, tenant string, retention time.Duration) (a Archived, ok bool) {
	var status Status
	switch {
	case d.Token <= 0:
		return Archived{}, false
	case d.Action == ActionCancelled:
		status = StatusCancelled
	case d.Action == ActionExpired && d.Reason != ReasonDeadlinePassed:
		status = StatusExpired
	default:
		return Archived{}, false
	}
	o := Ownership{Key: key, Stage: stage, Tenant: tenant, Token: d.Token, Attempts: d.Attempts}
	return o.Archived(status, nil, Failure{Type: d.ErrorType, Code: d.ErrorCode, Message: d.Error}, retention), true
}

// Archive is a durable store of terminal outcomes. It is consulted by lazy rehydrate before a
// new owner runs a model, and fed with every outcome an owner settles. package archive
// implements it on PostgreSQL.
type Archive interface {
	// Lookup returns the outcome archived for key while it is within its retention, or false
	// when there is none. An error means the archive could not answer.
	Lookup(ctx context.Context, key string) (Archived, bool, error)
	// Record archives an outcome. It must not block on the store: implementations batch,
	// and spool what the store cannot take yet.
	Record(a Archived)
}

// Fencer is an Archive that also keeps a fence that outlives Redis. package archive's Writer
// implements it. A Redis data loss takes a flight's fence with the flight: an owner paused
// past its lease before the loss, and taken over, could then write its older result back.
// A failover that loses writes can also roll a flight back to an owner that was taken over.
// So an owner that takes a flight over from an owner that may still be running claims the
// key durably with its token before it runs anything, see needsClaim. And an owner asks
// ArchiveFence for the largest token known for its key before it writes back a flight Redis
// lost, or writes on a record of its own that lets another caller take the flight over.
type Fencer interface {
	Archive
	// Claim records durably that token owns key's flight, for ttl. A ttl <= 0 means the
	// archive's default retention. Only a larger token replaces a claim.
	Claim(ctx context.Context, key string, token int64, ttl time.Duration) error
	// Fence returns the largest owner token known for key, of its claim and its archived
	// outcome, or false when none is known. An error means the archive could not answer.
	Fence(ctx context.Context, key string) (int64, bool, error)
}

// needsClaim reports whether an ownership acquired for reason must be claimed in a Fencer
// before its run, because its previous owner may still be running: its lease lapsed or its
// attempt expired. A retry after a failure, a handover and a lost result follow an owner that
// ended. A new flight follows none that Redis still knows of. An owner paused for longer than
// its flight's records live is refused by Redis's fence rule by token age, not by a claim.
func needsClaim(reason Reason) bool { return reason == ReasonTakeover || reason == ReasonExpired }

// claimTakeover claims d's flight in f, within bound, when d made its caller owner by taking
// the flight over from an owner that may still be running, see needsClaim. The claim lives as
// long as Redis's fence would have, the owner policy's fence TTL. It does nothing for any
// other decision.
func claimTakeover(ctx context.Context, f Fencer, d Decision, bound time.Duration) error {
	if d.Owner == nil || !needsClaim(d.Reason) {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	return f.Claim(cctx, d.Owner.Key, d.Owner.Token, d.Owner.Policy.WithDefaults().FenceTTL())
}

// archiveFenceTimeout bounds one ArchiveFence lookup. A caller with less than twice
// minArchiveFenceTimeout left asks nothing.
const (
	archiveFenceTimeout    = time.Second
	minArchiveFenceTimeout = 10 * time.Millisecond
)

// ArchiveFence returns a Config.WriteBackFence over fence, a Fencer's Fence method. It answers
// the largest token known for the key, asked within a second and within half of what is left
// of the caller's deadline, since the write it guards needs the rest. A lookup that fails or
// times out tells nothing and the write goes on, because the archive's outage must not lose an
// answer. onError, when set, is told, so a write that went on unchecked leaves a trace.
func ArchiveFence(fence func(ctx context.Context, key string) (int64, bool, error),
	onError func(key string, err error)) func(ctx context.Context, key string) (int64, bool) {
	return func(ctx context.Context, key string) (int64, bool) {
		bound := archiveFenceTimeout
		if dl, ok := ctx.Deadline(); ok {
			bound = min(bound, time.Until(dl)/2)
		}
		if bound < minArchiveFenceTimeout {
			// Too little time left to ask, and the write it guards will likely time out too. A
			// bound this short would only count against the archive's health.
			if onError != nil {
				onError(key, fmt.Errorf("flight: fence of %q: %w", key, context.DeadlineExceeded))
			}
			return 0, false
		}
		lctx, cancel := context.WithTimeout(ctx, bound)
		defer cancel()
		tok, ok, err := fence(lctx, key)
		if err != nil {
			if onError != nil {
				onError(key, err)
			}
			return 0, false
		}
		return tok, ok
	}
}

// ErrNotRehydratable is returned by Rehydrate for an archived outcome that cannot answer a
// flight. That is an EXPIRED one, whose key may run again.
var ErrNotRehydratable = errors.New("flight: archived outcome cannot answer the flight")

// Rehydrate answers the flight that o owns from an archived outcome instead of a model call.
// A SUCCEEDED outcome completes it with the archived result, a FAILED one fails it for good,
// and a CANCELLED one cancels it. It is o's own complete, fail or cancel, fenced by o's token
// like any other, so concurrent rebuilders cannot both win: only one holds the flight. The
// tasks parked on the flight are answered with it. The owner's own task gets the event
// with shared "archive". Errors are those of Complete, Fail and Cancel, or ErrNotRehydratable.
func (c *Coordinator) Rehydrate(ctx context.Context, o Ownership, a Archived) (Settlement, error) {
	switch a.Status {
	case StatusSucceeded:
		return c.complete(ctx, o, a.Result, 0, string(topics.SharedArchive))
	case StatusFailed:
		return c.fail(ctx, o, Failure{Type: a.ErrorType, Code: a.ErrorCode, Message: a.Error}, 0,
			string(topics.SharedArchive))
	case StatusCancelled:
		if _, err := c.Cancel(ctx, o.Key, a.Error, CancelParams{Stage: o.Stage, TTL: o.Policy.WithDefaults().FailureTTL}); err != nil &&
			!errors.As(err, new(*StateError)) {
			return Settlement{}, err
		}
		return c.complete(ctx, o, []byte("null"), 0, string(topics.SharedArchive))
	default:
		return Settlement{}, fmt.Errorf("%w: %s %s", ErrNotRehydratable, a.Key, a.Status)
	}
}

// labelled is the function arguments that write a meta back, complete's ARGV[17..22], and
// the caller's shared label, ARGV[23].
func labelled(o Ownership, shared string) []any {
	return []any{o.OwnerID, o.Stage, o.Tenant, o.SessionID, o.Key, max(o.Attempts, 1), shared}
}
