package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/admin"
	"github.com/flightdeck-ai/flightdeck/archive/postgres"
	"github.com/flightdeck-ai/flightdeck/client"
	"github.com/flightdeck-ai/flightdeck/flight"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/internal/redisconn"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// maxShownResult caps the stored result inspect prints.
const maxShownResult = 2 << 10

func (a *app) tail(ctx context.Context, args []string) error {
	fs := a.newFlagSet("tail", "[--stages a,b] [--from $|0|ID] [--format table|json]")
	stagesFlag := fs.String("stages", "", "comma-separated `stages` to follow (default: every registered stage when tail starts, else the four built-in ones)")
	from := fs.String("from", "$", "where to start: `$` (new events only), 0 (everything) or a stream id")
	formatArg := formatFlag(fs)
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	format, err := a.eventFormat(*formatArg)
	if err != nil {
		return err
	}
	printer := newEventPrinter(a.stdout, format)
	stages := splitList(*stagesFlag)
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case len(stages) == 0 && *stagesFlag != "":
		return usagef("--stages is empty")
	}
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	if len(stages) == 0 {
		reg, _, err := broker.ReadStages(ctx, rdb, c.Keyspace())
		if err != nil {
			return err
		}
		for _, s := range reg {
			stages = append(stages, s.Name)
		}
		if len(stages) == 0 {
			stages = splitList(defaultStages)
		}
	}
	ch, err := c.Subscribe(ctx, stages, *from)
	if err != nil {
		return err
	}
	for se := range ch { // closed when a signal ends ctx
		if se.Err != nil {
			fmt.Fprintf(a.stderr, "producer: skipping malformed entry %s of %s: %v\n", se.ID, se.Stream, se.Err)
			continue
		}
		if err := printer.event(se.Event); err != nil {
			return err
		}
	}
	return nil
}

// inspection is what inspect prints. TTLs are in milliseconds as Redis PTTL answers them:
// -1 for a key without expiry, -2 for a missing key.
type inspection struct {
	RequestKey  string   `json:"requestKey"`
	Status      string   `json:"status"`
	Stage       string   `json:"stage"`
	Tenant      string   `json:"tenant"`
	SessionID   string   `json:"sessionId,omitempty"`
	OwnerID     string   `json:"ownerId"`
	OwnerTaskID string   `json:"ownerTaskId"`
	OwnerToken  int64    `json:"ownerToken"`
	Attempts    int      `json:"attempts"`
	CreatedAt   string   `json:"createdAt,omitempty"`
	UpdatedAt   string   `json:"updatedAt,omitempty"`
	HeartbeatAt string   `json:"heartbeatAt,omitempty"`
	ProgressAt  string   `json:"progressAt,omitempty"`
	ExpireAt    string   `json:"expireAt,omitempty"`
	Progress    string   `json:"progress,omitempty"`
	Retryable   bool     `json:"retryable"`
	ErrorType   string   `json:"errorType,omitempty"`
	ErrorCode   string   `json:"errorCode,omitempty"`
	Error       string   `json:"error,omitempty"`
	ResultRef   string   `json:"resultRef,omitempty"`
	Parked      []string `json:"parked"`
	TTLMs       struct {
		Meta   int64 `json:"meta"`
		Result int64 `json:"result"`
		Fence  int64 `json:"fence"`
	} `json:"ttlMs"`
	// Result is the stored result when it is JSON of at most 2 KB. Otherwise ResultText
	// holds it, cut to its first 2 KB.
	shownResult
	// Archived is the key's row in the durable archive of --archive or $FLIGHTDECK_ARCHIVE_URL.
	// It is absent without an archive, and null when the archive holds no row.
	Archived *archivedRow `json:"archived,omitempty"`
	// ArchiveError says why the archive could not be read.
	ArchiveError string `json:"archiveError,omitempty"`
	// Claim is the key's takeover claim in the archive, when it holds one.
	Claim *claimRow `json:"claim,omitempty"`
}

// claimRow is a key's takeover claim in the archive, as inspect prints it. It holds the token
// of the last owner that took the flight over. After a Redis data loss, older owners' writes
// are refused.
type claimRow struct {
	OwnerToken int64  `json:"ownerToken"`
	ClaimedAt  string `json:"claimedAt"`
	ExpiresAt  string `json:"expiresAt"`
	Expired    bool   `json:"expired"`
}

// shownResult is a result as inspect prints it: Result when it is JSON of at most 2 KB,
// else ResultText, cut to its first 2 KB, and its size.
type shownResult struct {
	Result          json.RawMessage `json:"result,omitempty"`
	ResultText      string          `json:"resultText,omitempty"`
	ResultBytes     int             `json:"resultBytes,omitempty"`
	ResultTruncated bool            `json:"resultTruncated,omitempty"`
}

// show returns res as inspect prints it.
func show(res []byte) shownResult {
	var out shownResult
	switch {
	case len(res) == 0:
	case len(res) <= maxShownResult && json.Valid(res):
		out.Result = res
	default:
		out.ResultBytes = len(res)
		shown := res
		if len(shown) > maxShownResult {
			shown = shown[:maxShownResult]
			for len(shown) > 0 && !utf8.Valid(shown) { // do not cut a rune in half
				shown = shown[:len(shown)-1]
			}
			out.ResultTruncated = true
		}
		out.ResultText = string(shown)
	}
	return out
}

// archivedRow is the archive's row of a key, as inspect prints it.
type archivedRow struct {
	Status     string `json:"status"`
	Stage      string `json:"stage"`
	Tenant     string `json:"tenant"`
	OwnerToken int64  `json:"ownerToken"`
	Attempts   int    `json:"attempts"`
	ErrorType  string `json:"errorType,omitempty"`
	ErrorCode  string `json:"errorCode,omitempty"`
	Error      string `json:"error,omitempty"`
	FinishedAt string `json:"finishedAt"`
	ExpiresAt  string `json:"expiresAt"`
	// Expired is true once the retention ran out: the row no longer answers the key.
	Expired bool `json:"expired"`
	shownResult
}

// archivedOf is the archive's row as the dashboard's read model gives it, as inspect prints it.
func archivedOf(a *admin.ArchivedView) *archivedRow {
	if a == nil {
		return nil
	}
	return &archivedRow{Status: a.Status, Stage: a.Stage, Tenant: a.Tenant, OwnerToken: a.Token,
		Attempts: a.Attempts, ErrorType: a.ErrorType, ErrorCode: a.ErrorCode, Error: a.Error,
		FinishedAt: stamp(time.UnixMilli(a.FinishedAt)), ExpiresAt: stamp(time.UnixMilli(a.ExpiresAt)),
		Expired: a.Expired, shownResult: show([]byte(a.Result))}
}

func (a *app) inspect(ctx context.Context, args []string) error {
	fs := a.newFlagSet("inspect", "KEY [--archive URL [--archive-deployment D]]\n       producer inspect --task ID [--stage S] [--scan N]")
	archiveURL := fs.String("archive", os.Getenv("FLIGHTDECK_ARCHIVE_URL"), "PostgreSQL `URL` of the durable archive: its row of the key is shown beside the Redis state (default $FLIGHTDECK_ARCHIVE_URL)")
	deployment := fs.String("archive-deployment", os.Getenv("FLIGHTDECK_ARCHIVE_DEPLOYMENT"), "the consumers' archive `deployment`, whose rows are shown (default $FLIGHTDECK_ARCHIVE_DEPLOYMENT, else --prefix)")
	taskID := fs.String("task", "", "look a task up by its `id`: its stream entry, its event and its flight")
	stageFlag := fs.String("stage", "", "with --task: the task's `stage` (default: every registered stage)")
	scan := fs.Int("scan", 10000, "with --task: how many of the newest entries of each stream to search")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	acfg := postgres.Config{URL: *archiveURL, Deployment: *deployment}
	if acfg.Deployment == "" {
		acfg.Deployment = a.prefix
	}
	if acfg.Deployment == "" {
		acfg.Deployment = topics.DefaultPrefix
	}
	if *taskID != "" {
		if len(pos) != 0 {
			return usagef("--task takes no request key")
		}
		return a.inspectTask(ctx, *taskID, *stageFlag, *scan, acfg)
	}
	if len(pos) != 1 {
		return usagef("want exactly one request key (or --task ID), got %d arguments", len(pos))
	}
	key := pos[0]
	if err := checkKeyArg(key); err != nil {
		return err
	}
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	out, err := flightInspection(ctx, rdb, c.Keyspace(), key, acfg)
	if err != nil {
		return err
	}
	if out == nil {
		// No flight yet: its tasks may wait in the stage's scheduled set, from --in or notBefore.
		if sched, err := c.Scheduled(ctx, key); isTaskKey(key) && err == nil && len(sched) > 0 {
			return a.printIndented(struct {
				RequestKey string                 `json:"requestKey"`
				Scheduled  []client.ScheduledTask `json:"scheduled"`
			}{key, sched})
		}
		return fmt.Errorf("no flight for key %q under prefix %q", key, a.prefix)
	}
	return a.printIndented(out)
}

// printIndented prints v as indented JSON.
func (a *app) printIndented(v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(a.stdout, "%s\n", b)
	return err
}

// flightInspection reads the flight of key, and its archived row in acfg's deployment when
// acfg names a URL. It returns nil when neither Redis nor the archive knows the key.
func flightInspection(ctx context.Context, rdb redis.UniversalClient, ks topics.Keyspace, key string,
	acfg postgres.Config) (*inspection, error) {
	archiveURL := acfg.URL
	// The dashboard's read model: the same record /ui/api/flight serves, with the archived row
	// when an archive is named.
	var store *postgres.Store
	if archiveURL != "" {
		var err error
		if store, err = postgres.New(acfg); err != nil {
			return nil, err
		}
		defer store.Close()
	}
	insp, err := admin.New(admin.Config{Client: rdb, Keyspace: ks, Archive: store})
	if err != nil {
		return nil, err
	}
	d, err := insp.Flight(ctx, key)
	if errors.Is(err, flight.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	m := d.Meta
	out := inspection{
		RequestKey: key, Status: string(m.Status), Stage: m.Stage, Tenant: m.Tenant,
		SessionID: m.SessionID, OwnerID: m.OwnerID, OwnerTaskID: m.TaskID, OwnerToken: m.OwnerToken,
		Attempts: m.Attempts, CreatedAt: stamp(m.CreatedAt), UpdatedAt: stamp(m.UpdatedAt),
		HeartbeatAt: stamp(m.HeartbeatAt), ProgressAt: stamp(m.ProgressAt), ExpireAt: stamp(m.ExpireAt),
		Progress: m.Progress, Retryable: m.Retryable, ErrorType: m.ErrorType, ErrorCode: m.ErrorCode,
		Error: m.Error, ResultRef: m.ResultRef, Parked: m.Parked,
	}
	if out.Parked == nil {
		out.Parked = []string{}
	}
	out.TTLMs.Meta, out.TTLMs.Result, out.TTLMs.Fence = ttlMs(m.MetaTTL), ttlMs(m.ResultTTL), ttlMs(m.FenceTTL)
	if m.Status == "" { // Redis has no flight for the key, the archive has its row
		out.TTLMs.Meta, out.TTLMs.Result, out.TTLMs.Fence = -2, -2, -2
	}
	out.shownResult = show([]byte(d.Result))
	out.Archived = archivedOf(d.Archived)
	if c := d.Claim; c != nil {
		out.Claim = &claimRow{OwnerToken: c.Token, ClaimedAt: stamp(time.UnixMilli(c.ClaimedAt)),
			ExpiresAt: stamp(time.UnixMilli(c.ExpiresAt)), Expired: c.Expired}
	}
	if d.ArchiveError != "" {
		out.ArchiveError = redisconn.RedactError(errors.New(d.ArchiveError), archiveURL).Error()
	}
	return &out, nil
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return topics.FormatTime(t)
}

// ttlMs turns a go-redis PTTL answer into milliseconds, keeping -1 and -2 as Redis sends them.
func ttlMs(d time.Duration) int64 {
	if d < 0 {
		return int64(d)
	}
	return d.Milliseconds()
}

// checkKeyArg refuses, as a usage mistake, an argument that cannot be a flight key. A
// consumer's keys are ai:<stage>:v<n>:<tenant>:..., an in-process executor's may be any.
func checkKeyArg(key string) error {
	if err := flight.CheckKey(key); err != nil {
		return usagef("%q is not a request key (%v): a consumer's keys are ai:<stage>:v<n>:<tenant>:..., as enqueue prints them", key, err)
	}
	return nil
}

func (a *app) cancel(ctx context.Context, args []string) error {
	fs := a.newFlagSet("cancel", "KEY [--reason R]")
	reason := fs.String("reason", "cancelled by producer CLI", "`reason`, stored as the flight's error and sent in the events")
	pos, err := a.parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want exactly one request key, got %d arguments", len(pos))
	}
	key := pos[0]
	if err := checkKeyArg(key); err != nil {
		return err
	}
	rdb, c, err := a.connect(ctx)
	if err != nil {
		return err
	}
	defer rdb.Close()
	// Tasks of the key still waiting in the scheduled set, with a notBefore ahead or a long
	// retry delay, are cancelled too. They have no flight to cancel yet, or would find it.
	var scheduled int
	if isTaskKey(key) { // only a consumer's keys have tasks in a scheduled set
		var serr error
		if scheduled, serr = c.CancelScheduled(ctx, key, *reason); serr != nil {
			return serr
		}
	}
	if scheduled > 0 {
		fmt.Fprintf(a.stdout, "cancelled %d scheduled task(s) of %s\n", scheduled, key)
	}
	res, err := c.Cancel(ctx, key, *reason)
	if se, ok := errors.AsType[*flight.StateError](err); ok {
		return fmt.Errorf("flight %q already ended with status %s; nothing to cancel", key, se.Status)
	}
	if errors.Is(err, flight.ErrNotFound) {
		if scheduled > 0 {
			return nil
		}
		return fmt.Errorf("no flight and no scheduled task for key %q under prefix %q", key, a.prefix)
	}
	if err != nil {
		return err
	}
	if res.Already {
		fmt.Fprintf(a.stdout, "flight %s was already cancelled (reason: %s); nothing changed", key, res.Reason)
		if res.Answered > 0 {
			fmt.Fprintf(a.stdout, "; answered %d tasks still parked", res.Answered)
		}
		fmt.Fprintln(a.stdout)
		return nil
	}
	fmt.Fprintf(a.stdout, "cancelled %s (was %s): answered %d parked tasks\n", key, res.Previous, res.Answered)
	if res.OwnerTaskID != "" {
		fmt.Fprintf(a.stdout, "the owner's task %s is answered by its owner when its heartbeat sees the cancel\n", res.OwnerTaskID)
	}
	return nil
}

// isTaskKey reports whether key is one a consumer builds for a task with flight.TaskKey.
// Only those have tasks in a scheduled set.
func isTaskKey(key string) bool {
	_, ok := flight.ParseKey(key)
	return ok
}
