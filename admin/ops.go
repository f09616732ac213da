package admin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// MaxPreviewBytes caps the payload preview of a queued task.
const MaxPreviewBytes = 512

// MaxBulk bounds the dead letters one bulk action handles. A larger selection, such as "all"
// of a big DLQ, reports the rest as Remaining, to be sent again.
const MaxBulk = 10000

// ErrBadRequest is returned when an action's arguments do not name what it acts on.
var ErrBadRequest = errors.New("admin: bad request")

// Stages returns the stages the Inspector shows, sorted: Config.Stages and every stage of the
// stage registry at topics.Keyspace.Stages, so that a dashboard also shows stages its own
// consumer does not consume. When the registry cannot be read it returns Config.Stages alone.
func (in *Inspector) Stages(ctx context.Context) []string {
	out := slices.Clone(in.cfg.Stages)
	if reg, _, err := broker.ReadStages(ctx, in.rdb, in.ks); err == nil {
		for _, s := range reg {
			if !slices.Contains(out, s.Name) {
				out = append(out, s.Name)
			}
		}
	}
	slices.Sort(out)
	return out
}

// checkStage fails with ErrNotFound for a stage the Inspector does not show.
func (in *Inspector) checkStage(ctx context.Context, op, stage string) error {
	if !slices.Contains(in.Stages(ctx), stage) {
		return fmt.Errorf("admin: %s: %w: stage %q", op, ErrNotFound, stage)
	}
	return nil
}

// Pause pauses stage for the whole fleet: within about a second its consumers stop reading
// new task entries and claiming other consumers' entries, while what they hold is finished
// and parked tasks are still answered. by says who paused it, as free text cut to 256
// bytes, and pausing a paused stage records the new who and when.
func (in *Inspector) Pause(ctx context.Context, stage, by string) (topics.PauseInfo, error) {
	if err := in.checkStage(ctx, "pause", stage); err != nil {
		return topics.PauseInfo{}, err
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return topics.PauseInfo{}, fmt.Errorf("admin: pause: %w", err)
	}
	info := topics.PauseInfo{By: Truncate(by, 256), At: now.UnixMilli()}
	b, _ := json.Marshal(info)
	if err := in.rdb.HSet(ctx, in.ks.Paused(), stage, b).Err(); err != nil {
		return topics.PauseInfo{}, fmt.Errorf("admin: pause: %w", err)
	}
	return info, nil
}

// Resume resumes a paused stage and reports whether the stage was paused.
func (in *Inspector) Resume(ctx context.Context, stage string) (bool, error) {
	if err := in.checkStage(ctx, "resume", stage); err != nil {
		return false, err
	}
	n, err := in.rdb.HDel(ctx, in.ks.Paused(), stage).Result()
	if err != nil {
		return false, fmt.Errorf("admin: resume: %w", err)
	}
	return n > 0, nil
}

// PausedStages returns the paused stages among those the Inspector shows.
func (in *Inspector) PausedStages(ctx context.Context) (map[string]topics.PauseInfo, error) {
	return in.pausedOf(ctx, in.Stages(ctx))
}

// pausedOf returns the paused stages among stages.
func (in *Inspector) pausedOf(ctx context.Context, stages []string) (map[string]topics.PauseInfo, error) {
	vals, err := in.rdb.HMGet(ctx, in.ks.Paused(), stages...).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: paused stages: %w", err)
	}
	out := map[string]topics.PauseInfo{}
	for i, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		var info topics.PauseInfo
		if json.Unmarshal([]byte(s), &info) != nil {
			info.By = Truncate(s, 256) // written by hand, but still paused
		}
		out[stages[i]] = info
	}
	return out, nil
}

// QueuedView is a task entry not yet delivered to any consumer.
type QueuedView struct {
	// Stage is the task's stage, Stream the task stream partition holding the entry, ID its
	// entry id and UUID the message uuid.
	Stage  string `json:"stage"`
	Stream string `json:"stream"`
	ID     string `json:"id"`
	UUID   string `json:"uuid"`
	// TaskID and Tenant are read from the payload when it names them.
	TaskID string `json:"taskId,omitempty"`
	Tenant string `json:"tenant,omitempty"`
	// AgeMs is how long the entry has been queued, from its id's time.
	AgeMs int64 `json:"ageMs"`
	// Payload is the payload's first MaxPreviewBytes.
	Payload string `json:"payload"`
}

// Queued returns, oldest first, up to n entries that the consumer group has not delivered
// yet, past its last-delivered id, from each task stream of the given stages or of all
// stages when none are given. It returns at most MaxListEntries in all, with the payload cut
// to MaxPreviewBytes and every field to MaxFieldBytes.
func (in *Inspector) Queued(ctx context.Context, stages []string, n int64) ([]QueuedView, error) {
	n = min(max(n, 1), MaxListEntries)
	if len(stages) == 0 {
		stages = in.Stages(ctx)
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return nil, fmt.Errorf("admin: queued: %w", err)
	}
	out := []QueuedView{} // [] in JSON when there are none, never null
	for _, stage := range stages {
		if err := in.checkStage(ctx, "queued", stage); err != nil {
			return nil, err
		}
		for _, st := range in.ks.TaskStreams(stage) {
			from := "-"
			groups, err := in.rdb.XInfoGroups(ctx, st).Result()
			if err != nil && !strings.Contains(err.Error(), "no such key") {
				return nil, fmt.Errorf("admin: queued: %w", err)
			}
			for _, g := range groups {
				if g.Name == topics.ConsumerGroup {
					from = "(" + g.LastDeliveredID
				}
			}
			msgs, err := in.rdb.XRangeN(ctx, st, from, "+", n).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, fmt.Errorf("admin: queued: %w", err)
			}
			for _, m := range msgs {
				str := func(f string) string { v, _ := m.Values[f].(string); return v }
				payload := str(topics.FieldPayload)
				ms, _ := strconv.ParseInt(strings.SplitN(m.ID, "-", 2)[0], 10, 64)
				out = append(out, QueuedView{Stage: stage, Stream: st, ID: m.ID, UUID: str(topics.FieldUUID),
					TaskID: topics.NamedField([]byte(payload), "taskId"), Tenant: topics.NamedField([]byte(payload), "tenant"),
					AgeMs: max(now.UnixMilli()-ms, 0), Payload: Truncate(payload, MaxPreviewBytes)})
			}
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return topics.IDLess(out[i].ID, out[j].ID) })
	out, _ = boundList(out, int(n)*len(stages), MaxFieldBytes)
	return out, nil
}

// DLQSelection picks dead letters of one stage: the entries IDs, or with All every entry up
// to the entry id UpTo. An empty UpTo means the newest entry now.
type DLQSelection struct {
	// Stage names the DLQ. IDs names the entries, or All with UpTo every entry up to that id.
	Stage string   `json:"stage"`
	IDs   []string `json:"ids,omitempty"`
	All   bool     `json:"all,omitempty"`
	UpTo  string   `json:"upTo,omitempty"`
}

// BulkResult is what a bulk dead-letter action did.
type BulkResult struct {
	// Done counts the entries requeued or purged. Missing counts the selected ids not in the DLQ.
	Done    int `json:"done"`
	Missing int `json:"missing"`
	// Remaining counts the selected entries past MaxBulk, left for another call.
	Remaining int `json:"remaining"`
	// IDs are the new task entry ids of a requeue, for at most MaxListEntries entries.
	IDs []string `json:"ids,omitempty"`
	// UpTo is the last entry id an All selection covers, the newest entry when it was "" and
	// the DLQ was not empty. Send it as DLQSelection.UpTo to go on with the same selection
	// while Remaining is above zero, without taking entries dead-lettered since.
	UpTo string `json:"upTo,omitempty"`
}

// DeadLetterEntry is one dead letter in full, as the consumer wrote it, at most
// topics.MaxDeadLetterBytes in all. Nothing is cut here: the payload is as it was sent, or as
// much as the dead letter kept, and Detail says when it was cut.
type DeadLetterEntry struct {
	DeadLetterView
	// Original holds the refused entry's other raw fields as a JSON object, when it had any
	// that could not be kept as uuid and payload.
	Original string `json:"original,omitempty"`
}

// DeadLetter reads one dead letter of stage in full. It returns ErrNotFound when the DLQ has
// no entry id, and ErrBadRequest when id is not a stream entry id.
func (in *Inspector) DeadLetter(ctx context.Context, stage, id string) (DeadLetterEntry, error) {
	if err := in.checkSelection(ctx, "dead letter", DLQSelection{Stage: stage, IDs: []string{id}}); err != nil {
		return DeadLetterEntry{}, err
	}
	msgs, err := in.rdb.XRange(ctx, in.ks.DLQ(stage), id, id).Result()
	if err != nil {
		return DeadLetterEntry{}, fmt.Errorf("admin: dead letter: %w", err)
	}
	if len(msgs) == 0 {
		return DeadLetterEntry{}, fmt.Errorf("admin: dead letter: %w: entry %s of %s", ErrNotFound, id, in.ks.DLQ(stage))
	}
	return deadLetterEntry(stage, msgs[0]), nil
}

// deadLetterEntry reads a DLQ entry of stage.
func deadLetterEntry(stage string, m redis.XMessage) DeadLetterEntry {
	str := func(f string) string { v, _ := m.Values[f].(string); return v }
	payload := str(topics.FieldPayload)
	return DeadLetterEntry{DeadLetterView: DeadLetterView{Stage: stage, ID: m.ID, UUID: str(topics.FieldUUID),
		Reason: str(topics.FieldReason), Detail: str(topics.FieldDetail), Consumer: str(topics.FieldConsumer),
		TaskID: topics.NamedField([]byte(payload), "taskId"), Payload: payload}, Original: str(topics.FieldOriginal)}
}

func (in *Inspector) checkSelection(ctx context.Context, op string, sel DLQSelection) error {
	if err := in.checkStage(ctx, op, sel.Stage); err != nil {
		return err
	}
	if sel.All == (len(sel.IDs) > 0) {
		return fmt.Errorf("admin: %s: %w: give ids or all, not both", op, ErrBadRequest)
	}
	if len(sel.IDs) > MaxListEntries {
		return fmt.Errorf("admin: %s: %w: at most %d ids", op, ErrBadRequest, MaxListEntries)
	}
	for _, id := range append(slices.Clone(sel.IDs), sel.UpTo) {
		if id != "" && !validEntryID(id) {
			return fmt.Errorf("admin: %s: %w: %q is not a stream entry id", op, ErrBadRequest, Truncate(id, 64))
		}
	}
	return nil
}

// RequeueDLQ moves the selected dead letters back onto their stage's task stream with the
// same uuid and payload and deletes them from the DLQ, at most MaxBulk per call. A payload
// that is still invalid simply comes back to the DLQ.
func (in *Inspector) RequeueDLQ(ctx context.Context, sel DLQSelection) (BulkResult, error) {
	if err := in.checkSelection(ctx, "requeue", sel); err != nil {
		return BulkResult{}, err
	}
	var res BulkResult
	dlq := in.ks.DLQ(sel.Stage)
	if !sel.All {
		cmds, err := in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, id := range sel.IDs {
				p.XRange(ctx, dlq, id, id)
			}
			return nil
		})
		if err != nil && !errors.Is(err, redis.Nil) {
			return res, fmt.Errorf("admin: requeue: %w", err)
		}
		var msgs []redis.XMessage
		for _, c := range cmds {
			if r, ok := c.(*redis.XMessageSliceCmd); ok && len(r.Val()) == 1 {
				msgs = append(msgs, r.Val()[0])
			} else {
				res.Missing++
			}
		}
		return res, in.requeue(ctx, sel.Stage, msgs, &res)
	}
	upTo, err := in.upTo(ctx, dlq, sel.UpTo)
	if err != nil || upTo == "" {
		return res, err
	}
	res.UpTo = upTo
	for res.Done < MaxBulk {
		msgs, err := in.rdb.XRangeN(ctx, dlq, "-", upTo, int64(min(1000, MaxBulk-res.Done))).Result()
		if err != nil {
			return res, fmt.Errorf("admin: requeue: %w", err)
		}
		if len(msgs) == 0 {
			return res, nil
		}
		if err := in.requeue(ctx, sel.Stage, msgs, &res); err != nil {
			return res, err
		}
	}
	left, err := in.rdb.XRangeN(ctx, dlq, "-", upTo, MaxBulk).Result()
	if err == nil {
		res.Remaining = len(left)
	}
	return res, nil
}

// requeue adds msgs, dead letters of stage, to the task stream again and deletes them from
// the DLQ, in one pipeline.
func (in *Inspector) requeue(ctx context.Context, stage string, msgs []redis.XMessage, res *BulkResult) error {
	if len(msgs) == 0 {
		return nil
	}
	adds := make([]*redis.StringCmd, len(msgs))
	_, err := in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, m := range msgs {
			uuid, _ := m.Values[topics.FieldUUID].(string)
			payload, _ := m.Values[topics.FieldPayload].(string)
			adds[i] = p.XAdd(ctx, &redis.XAddArgs{Stream: in.ks.TaskStreamFor(stage, uuid), MaxLen: topics.DefaultTaskMaxLen,
				Approx: true, Values: []any{topics.FieldUUID, uuid, topics.FieldPayload, payload}})
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("admin: requeue: %w", err)
	}
	var added []string
	for i, c := range adds {
		if c.Err() == nil {
			added = append(added, msgs[i].ID)
			if len(res.IDs) < MaxListEntries {
				res.IDs = append(res.IDs, c.Val())
			}
		}
	}
	res.Done += len(added)
	if err := in.rdb.XDel(ctx, in.ks.DLQ(stage), added...).Err(); err != nil {
		return fmt.Errorf("admin: requeue: requeued but not removed from the DLQ: %w", err)
	}
	return nil
}

// PurgeDLQ deletes the selected dead letters. With All it deletes every entry up to UpTo at
// once with XTRIM MINID, however many.
func (in *Inspector) PurgeDLQ(ctx context.Context, sel DLQSelection) (BulkResult, error) {
	if err := in.checkSelection(ctx, "purge", sel); err != nil {
		return BulkResult{}, err
	}
	var res BulkResult
	dlq := in.ks.DLQ(sel.Stage)
	if !sel.All {
		n, err := in.rdb.XDel(ctx, dlq, sel.IDs...).Result()
		if err != nil {
			return res, fmt.Errorf("admin: purge: %w", err)
		}
		res.Done, res.Missing = int(n), len(sel.IDs)-int(n)
		return res, nil
	}
	upTo, err := in.upTo(ctx, dlq, sel.UpTo)
	if err != nil || upTo == "" {
		return res, err
	}
	res.UpTo = upTo
	n, err := in.rdb.XTrimMinID(ctx, dlq, nextEntryID(upTo)).Result()
	if err != nil {
		return res, fmt.Errorf("admin: purge: %w", err)
	}
	res.Done = int(n)
	return res, nil
}

// upTo returns id, or when it is "" the newest entry id of stream. It returns "" for an empty
// stream.
func (in *Inspector) upTo(ctx context.Context, stream, id string) (string, error) {
	if id != "" {
		return id, nil
	}
	last, err := in.rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
	if err != nil {
		return "", fmt.Errorf("admin: dead letters: %w", err)
	}
	if len(last) == 0 {
		return "", nil
	}
	return last[0].ID, nil
}

// validEntryID reports whether id is a full stream entry id "<ms>-<seq>".
func validEntryID(id string) bool {
	ms, seq, ok := strings.Cut(id, "-")
	_, err1 := strconv.ParseUint(ms, 10, 64)
	_, err2 := strconv.ParseUint(seq, 10, 64)
	return ok && err1 == nil && err2 == nil
}

// nextEntryID is the smallest entry id above the valid entry id id.
func nextEntryID(id string) string {
	ms, seq, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseUint(seq, 10, 64)
	if n == ^uint64(0) {
		m, _ := strconv.ParseUint(ms, 10, 64)
		return strconv.FormatUint(m+1, 10) + "-0"
	}
	return ms + "-" + strconv.FormatUint(n+1, 10)
}
