package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// The gateway's records in Redis, under each tenant's prefix (docs/HTTP.md, "Records in
// Redis"):
//
//	<prefix>:gateway:task:<tenant>:<taskId>   the task's receipt, and its terminal event once seen
//	<prefix>:gateway:idem:<tenant>:<sha256 of the Idempotency-Key>   the first request's fingerprint and receipt
//
// Both live RecordTTL (24 h) once written. While a request holds one before its task is
// appended, it lives pendingTTL, so that a gateway dying there blocks nobody for long.
const (
	// pendingTTL is the life of a record held by a request that is still enqueueing.
	pendingTTL = 30 * time.Second
	// idempotencyWait is how long a retry waits for the first request of its key to finish
	// enqueueing before it answers 409 idempotency_in_progress.
	idempotencyWait = 5 * time.Second
	// maxCachedEvent bounds the event a receipt record keeps, as JSON.
	maxCachedEvent = 64 << 10
)

// taskRecord is the value of a receipt record.
type taskRecord struct {
	// Pending is true while the request that reserved a caller's task id is enqueueing.
	Pending bool `json:"pending,omitempty"`
	// Receipt is the task's receipt.
	Receipt *client.Receipt `json:"receipt,omitempty"`
	// Event is the task's terminal event, once the gateway saw it.
	Event *topics.Event `json:"event,omitempty"`
}

// idemRecord is the value of an idempotency record.
type idemRecord struct {
	// Fingerprint is the hex SHA-256 of the first request's stage and compacted body.
	Fingerprint string `json:"fingerprint"`
	// Receipt is the first request's receipt, absent while it is enqueueing.
	Receipt *client.Receipt `json:"receipt,omitempty"`
}

func (t *tenantToken) taskKey(taskID string) string {
	return t.Prefix + ":gateway:task:" + t.Tenant + ":" + taskID
}

func (t *tenantToken) idemKey(idempotencyKey string) string {
	sum := sha256.Sum256([]byte(idempotencyKey))
	return t.Prefix + ":gateway:idem:" + t.Tenant + ":" + hex.EncodeToString(sum[:])
}

// fingerprint identifies a request for its Idempotency-Key: its stage and its body without
// insignificant white space.
func fingerprint(stage string, body []byte) string {
	h := sha256.New()
	h.Write([]byte(stage))
	h.Write([]byte{0})
	h.Write(compactJSON(body))
	return hex.EncodeToString(h.Sum(nil))
}

// enqueue validates and enqueues task for tok and writes its receipt record. A task id the
// caller chose is reserved first, so that a tenant's task id names one task: a second task
// under it is refused with errTaskIDTaken. Errors wrap topics.ErrInvalidTask for an invalid
// task, else they are Redis errors.
func (s *Server) enqueue(ctx context.Context, tok *tenantToken, task topics.Task) (client.Receipt, error) {
	chosen := task.TaskID != ""
	if !chosen {
		task.TaskID = uuid.NewString()
	}
	if err := task.Validate(s.cfg.Limits); err != nil {
		return client.Receipt{}, err
	}
	if err := task.CheckNotBefore(s.cfg.Now(), s.cfg.ScheduleHorizon); err != nil {
		return client.Receipt{}, err
	}
	key := tok.taskKey(task.TaskID)
	if chosen {
		pending, _ := json.Marshal(taskRecord{Pending: true})
		ok, err := s.cfg.Client.SetNX(ctx, key, pending, pendingTTL).Result()
		if err != nil {
			return client.Receipt{}, fmt.Errorf("gateway: reserve task id: %w", err)
		}
		if !ok {
			return client.Receipt{}, errTaskIDTaken
		}
	}
	receipt, err := tok.cl.Enqueue(ctx, task)
	if err != nil {
		if chosen {
			s.release(key)
		}
		return client.Receipt{}, err
	}
	rec, _ := json.Marshal(taskRecord{Receipt: &receipt})
	if err := s.cfg.Client.Set(ctx, key, rec, s.cfg.RecordTTL).Err(); err != nil {
		// The task is on its stream: answering an error would make the caller enqueue it again.
		s.log.Warn().Err(err).Str("tenant", tok.Tenant).Str("taskId", task.TaskID).
			Msg("the task is enqueued but its receipt record was not written: GET /v1/tasks will not find it")
	}
	return receipt, nil
}

// release deletes a record a failed request held, on a context of its own, so that a
// cancelled request still frees it.
func (s *Server) release(key string) {
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.cfg.Client.Del(ctx, key).Err(); err != nil {
		s.log.Warn().Err(err).Msg("a pending record was not released; it expires by itself")
	}
}

// enqueueOnce enqueues task under an Idempotency-Key: the first request of the key enqueues,
// and a retry with the same fingerprint gets the first receipt with replayed true. The
// record is taken with SET NX, so that concurrent retries enqueue once: a retry that finds
// the first request still enqueueing waits for it up to idempotencyWait, then answers
// errIdempotencyInProgress. A key used with another fingerprint answers
// errIdempotencyMismatch. A request that fails releases the key, for a retry to try again.
func (s *Server) enqueueOnce(ctx context.Context, tok *tenantToken, idempotencyKey, fp string,
	task topics.Task) (receipt client.Receipt, replayed bool, err error) {
	key := tok.idemKey(idempotencyKey)
	pending, _ := json.Marshal(idemRecord{Fingerprint: fp})
	deadline := time.Now().Add(idempotencyWait)
	for {
		ok, err := s.cfg.Client.SetNX(ctx, key, pending, pendingTTL).Result()
		if err != nil {
			return client.Receipt{}, false, fmt.Errorf("gateway: idempotency record: %w", err)
		}
		if ok {
			break
		}
		raw, err := s.cfg.Client.Get(ctx, key).Bytes()
		if errors.Is(err, redis.Nil) {
			continue // released or expired since: try to take it
		}
		if err != nil {
			return client.Receipt{}, false, fmt.Errorf("gateway: idempotency record: %w", err)
		}
		var rec idemRecord
		if err := json.Unmarshal(raw, &rec); err != nil {
			return client.Receipt{}, false, fmt.Errorf("gateway: idempotency record: %w", err)
		}
		switch {
		case rec.Fingerprint != fp:
			return client.Receipt{}, false, errIdempotencyMismatch
		case rec.Receipt != nil:
			return *rec.Receipt, true, nil
		case time.Now().After(deadline):
			return client.Receipt{}, false, errIdempotencyInProgress
		}
		select {
		case <-ctx.Done():
			return client.Receipt{}, false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	receipt, err = s.enqueue(ctx, tok, task)
	if err != nil {
		s.release(key)
		return client.Receipt{}, false, err
	}
	done, _ := json.Marshal(idemRecord{Fingerprint: fp, Receipt: &receipt})
	if err := s.cfg.Client.Set(ctx, key, done, s.cfg.RecordTTL).Err(); err != nil {
		s.log.Warn().Err(err).Str("tenant", tok.Tenant).Str("taskId", receipt.TaskID).
			Msg("the task is enqueued but its idempotency record was not written: a retry within 30 s is refused, a later one enqueues again")
	}
	return receipt, false, nil
}

// loadTask reads the receipt record of taskID, or nil when there is none.
func (s *Server) loadTask(ctx context.Context, tok *tenantToken, taskID string) (*taskRecord, error) {
	raw, err := s.cfg.Client.Get(ctx, tok.taskKey(taskID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("gateway: task record: %w", err)
	}
	var rec taskRecord
	if err := json.Unmarshal(raw, &rec); err != nil || (!rec.Pending && rec.Receipt == nil) {
		return nil, fmt.Errorf("gateway: task record of %q: %w", taskID, errMalformedRecord)
	}
	return &rec, nil
}

// keepEvent adds ev to the receipt record of r's task, keeping its TTL, so that later reads
// answer without the result stream. An event larger than maxCachedEvent is not kept.
func (s *Server) keepEvent(tok *tenantToken, r client.Receipt, ev topics.Event) {
	b, err := json.Marshal(taskRecord{Receipt: &r, Event: &ev})
	if err != nil || len(b) > maxCachedEvent {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	defer cancel()
	if err := s.cfg.Client.SetArgs(ctx, tok.taskKey(r.TaskID), b, redis.SetArgs{Mode: "XX", KeepTTL: true}).Err(); err != nil &&
		!errors.Is(err, redis.Nil) {
		s.log.Debug().Err(err).Msg("the terminal event was not kept in the receipt record")
	}
}
