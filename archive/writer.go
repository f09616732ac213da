package archive

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/flightdeck-ai/flightdeck/flight"
)

// WriterConfig configures a Writer.
type WriterConfig struct {
	// Store is the archive, such as archive/postgres's Store. Required.
	Store Store
	// SpoolDir and Name place the spool of outcomes the archive could not take yet:
	// <SpoolDir>/archive-<Name>.jsonl. Required. Spools of stopped processes found in
	// SpoolDir are adopted and written back.
	SpoolDir, Name string
	// Batch is the most outcomes one write carries. Defaults to 500.
	Batch int
	// Queue is how many outcomes may wait in memory for a write. When it is full, Record
	// spools with fsync instead. Defaults to 10,000.
	Queue int
	// Retry is how often the spool is written back while the archive is away. Defaults to 1 s.
	Retry time.Duration
	// WriteTimeout bounds one write. Defaults to 5 s.
	WriteTimeout time.Duration
	// PurgeInterval is how often rows past their retention are deleted, at most PurgeBatch
	// per statement and 10 statements per round. Defaults to 1 min and 1,000. A negative
	// interval turns the purge off.
	PurgeInterval time.Duration
	PurgeBatch    int
	// Logger receives the writer's warnings. Defaults to none.
	Logger *zerolog.Logger
	// Registry receives the archive metrics. Defaults to none.
	Registry prometheus.Registerer
}

// Writer archives outcomes off the owner's critical path and answers lookups. It
// implements flight.Archive. Create it with NewWriter, run it with Run, and Close it after
// Run returned.
//
// Record queues an outcome. Run writes queued outcomes in batches of one statement each.
// While the archive does not answer, Run spools them to disk with fsync, and it writes the
// spool back when the archive answers again. Run also purges expired rows.
type Writer struct {
	cfg     WriterConfig
	store   Store
	spool   *spool
	metrics *Metrics
	log     zerolog.Logger
	in      chan flight.Archived
	lookups chan lookup
	down    atomic.Bool  // the last write or lookup failed, so writes go to the spool
	probeAt atomic.Int64 // unix ns of the next lookup allowed while down
	lastErr atomic.Value // the last error as a string, for Health
	running atomic.Bool  // Run is running, so lookups are answered
	closing atomic.Bool  // Close began, so records go to the spool directly
	closeMu sync.Mutex
	closed  bool
}

var _ flight.Fencer = (*Writer)(nil)

// NewWriter opens the writer's spool and registers its metrics.
func NewWriter(cfg WriterConfig) (*Writer, error) {
	if cfg.Store == nil || cfg.SpoolDir == "" || cfg.Name == "" {
		return nil, errors.New("archive: writer: Store, SpoolDir and Name are required")
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 500
	}
	if cfg.Queue <= 0 {
		cfg.Queue = 10000
	}
	if cfg.Retry <= 0 {
		cfg.Retry = time.Second
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 5 * time.Second
	}
	if cfg.PurgeInterval == 0 {
		cfg.PurgeInterval = time.Minute
	}
	if cfg.PurgeBatch <= 0 {
		cfg.PurgeBatch = 1000
	}
	log := zerolog.Nop()
	if cfg.Logger != nil {
		log = *cfg.Logger
	}
	sp, err := openSpool(cfg.SpoolDir, cfg.Name)
	if err != nil {
		return nil, err
	}
	w := &Writer{cfg: cfg, store: cfg.Store, spool: sp, log: log, in: make(chan flight.Archived, cfg.Queue),
		lookups: make(chan lookup, 1024)}
	if w.metrics, err = newMetrics(cfg.Registry, func() float64 { return float64(sp.len()) }); err != nil {
		_ = sp.close()
		return nil, fmt.Errorf("archive: metrics: %w", err)
	}
	return w, nil
}

// Metrics returns the writer's metrics, for the caller to count rehydrates.
func (w *Writer) Metrics() *Metrics { return w.metrics }

// Record queues a for the archive without blocking on it. When the queue is full, a goes
// to the spool with one fsync.
func (w *Writer) Record(a flight.Archived) {
	if w.closing.Load() {
		w.spoolBatch([]flight.Archived{a})
		return
	}
	select {
	case w.in <- a:
	default:
		w.spoolBatch([]flight.Archived{a})
	}
}

// Lookup returns the outcome archived for key within its retention, read with
// Store.GetMany. While the archive is away or Run is not running, it fails at once with
// ErrUnavailable. While the archive is away, one probe per Retry interval is let through.
func (w *Writer) Lookup(ctx context.Context, key string) (flight.Archived, bool, error) {
	if err := w.available("lookup", key, true); err != nil {
		return flight.Archived{}, false, err
	}
	// Concurrent lookups share statements. Run's lookup loops answer whatever is waiting
	// with one query each.
	l := lookup{key: key, ctx: ctx, reply: make(chan lookupReply, 1)}
	select {
	case w.lookups <- l:
	case <-ctx.Done():
		return flight.Archived{}, false, fmt.Errorf("archive: lookup %s: %w", key, ctx.Err())
	}
	select {
	case r := <-l.reply:
		return r.a, r.ok, r.err
	case <-ctx.Done():
		return flight.Archived{}, false, fmt.Errorf("archive: lookup %s: %w", key, ctx.Err())
	}
}

// available fails at once with ErrUnavailable while the archive is away, except for one
// probe per Retry interval. When queued is set, because the call waits for Run's loops, it
// also fails while Run is not running.
func (w *Writer) available(op, key string, queued bool) error {
	if queued && !w.running.Load() {
		return fmt.Errorf("archive: %s %s: %w (the writer is not running)", op, key, ErrUnavailable)
	}
	if w.down.Load() {
		next := w.probeAt.Load()
		now := time.Now().UnixNano()
		if now < next || !w.probeAt.CompareAndSwap(next, now+w.cfg.Retry.Nanoseconds()) {
			return fmt.Errorf("archive: %s %s: %w", op, key, ErrUnavailable)
		}
	}
	return nil
}

// lookup is one Lookup waiting for a lookup loop.
type lookup struct {
	key   string
	ctx   context.Context
	reply chan lookupReply
}

type lookupReply struct {
	a   flight.Archived
	ok  bool
	err error
}

// lookupWorkers is how many lookup statements may be out at once.
const lookupWorkers = 2

// lookupLoop answers the waiting lookups, up to a batch per statement, until ctx ends.
func (w *Writer) lookupLoop(ctx context.Context) {
	for {
		var first lookup
		select {
		case <-ctx.Done():
			return
		case first = <-w.lookups:
		}
		batch := []lookup{first}
	more:
		for len(batch) < w.cfg.Batch {
			select {
			case l := <-w.lookups:
				batch = append(batch, l)
			default:
				break more
			}
		}
		keys := make([]string, 0, len(batch))
		for _, l := range batch {
			if l.ctx.Err() == nil {
				keys = append(keys, l.key)
			}
		}
		var found map[string]flight.Archived
		var err error
		if len(keys) > 0 {
			lctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
			found, err = w.store.GetMany(lctx, keys)
			cancel()
			if err != nil {
				w.metrics.errors.WithLabelValues("lookup").Inc()
				w.markDown(err)
			}
		}
		for _, l := range batch {
			a, ok := found[l.key]
			l.reply <- lookupReply{a: a, ok: ok, err: err}
		}
	}
}

// ErrUnavailable means the archive did not answer lately, so the call was not tried.
var ErrUnavailable = errors.New("archive unavailable")

// Health is the archive's state for readiness: "ok", or "down" with the number of spooled
// outcomes and the last error. It never fails a probe on its own.
func (w *Writer) Health() string {
	if !w.down.Load() {
		return "ok"
	}
	msg, _ := w.lastErr.Load().(string)
	return fmt.Sprintf("down (%d outcomes spooled): %s", w.spool.len(), msg)
}

// Spooled returns how many outcomes wait in the spool.
func (w *Writer) Spooled() int { return w.spool.len() }

func (w *Writer) markDown(err error) {
	w.lastErr.Store(err.Error())
	if !w.down.Swap(true) {
		w.probeAt.Store(time.Now().Add(w.cfg.Retry).UnixNano())
		w.log.Warn().Err(err).Msg("archive unavailable: outcomes are spooled until it answers")
	}
}

// Run writes queued outcomes until ctx ends. Close then writes or spools what is left.
func (w *Writer) Run(ctx context.Context) {
	retry := time.NewTicker(w.cfg.Retry)
	defer retry.Stop()
	var purge <-chan time.Time
	if w.cfg.PurgeInterval > 0 {
		t := time.NewTicker(w.cfg.PurgeInterval)
		defer t.Stop()
		purge = t.C
	}
	var lookups sync.WaitGroup
	for range lookupWorkers {
		lookups.Add(1)
		go func() { defer lookups.Done(); w.lookupLoop(ctx) }()
	}
	w.running.Store(true)
	defer func() {
		w.running.Store(false)
		lookups.Wait()
		for { // answer the lookups left waiting
			select {
			case l := <-w.lookups:
				l.reply <- lookupReply{err: fmt.Errorf("archive: lookup %s: %w", l.key, ErrUnavailable)}
				continue
			default:
			}
			return
		}
	}()
	w.writeSpool(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case a := <-w.in:
			w.write(ctx, w.collect(a))
		case <-retry.C:
			w.writeSpool(ctx)
		case <-purge:
			w.purge(ctx)
		}
	}
}

// linger is how long a write waits for more outcomes to share its statement. Records are
// off the owners' path, so waiting costs no task any time, and it saves the database
// statements.
const linger = 5 * time.Millisecond

// collect returns first with what else is queued within linger, up to a batch.
func (w *Writer) collect(first flight.Archived) []flight.Archived {
	batch := []flight.Archived{first}
	timer := time.NewTimer(linger)
	defer timer.Stop()
	for len(batch) < w.cfg.Batch {
		select {
		case a := <-w.in:
			batch = append(batch, a)
		case <-timer.C:
			return batch
		}
	}
	return batch
}

// write stores a batch, or spools it while the archive is away.
func (w *Writer) write(ctx context.Context, batch []flight.Archived) {
	if w.down.Load() {
		w.spoolBatch(batch)
		return
	}
	if err := w.put(ctx, batch); err != nil {
		w.markDown(err)
		w.spoolBatch(batch)
	}
}

func (w *Writer) put(ctx context.Context, batch []flight.Archived) error {
	wctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
	defer cancel()
	start := time.Now()
	n, err := w.store.Put(wctx, batch)
	if errors.Is(err, ErrInvalid) {
		// Not the archive's fault. Drop what cannot be stored and keep the rest.
		w.log.Error().Err(err).Msg("archive: outcome dropped")
		var ok []flight.Archived
		for _, a := range batch {
			if Check(a) == nil {
				ok = append(ok, a)
			}
		}
		n, err = w.store.Put(wctx, ok)
		batch = ok
	}
	if err != nil {
		w.metrics.errors.WithLabelValues("write").Inc()
		return err
	}
	w.metrics.writeTime.Observe(time.Since(start).Seconds())
	w.metrics.writes.WithLabelValues("written").Add(float64(n))
	w.metrics.writes.WithLabelValues("refused").Add(float64(len(NewestPerKey(batch)) - n))
	return nil
}

func (w *Writer) spoolBatch(batch []flight.Archived) {
	if err := w.spool.add(batch); err != nil {
		w.log.Error().Err(err).Int("outcomes", len(batch)).Msg("archive: outcomes lost: neither the archive nor the spool took them")
		return
	}
	w.metrics.writes.WithLabelValues("spooled").Add(float64(len(batch)))
}

// writeSpool writes the spool back, a batch at a time from its head. Success brings the
// archive back up. While the archive is away, one ping is all it costs.
func (w *Writer) writeSpool(ctx context.Context) {
	if w.down.Load() {
		pctx, cancel := context.WithTimeout(ctx, w.cfg.Retry)
		err := w.store.Ping(pctx)
		cancel()
		if err != nil {
			return
		}
	}
	written := 0
	for ctx.Err() == nil {
		outs, done, err := w.spool.take(w.cfg.Batch)
		if err != nil {
			w.log.Error().Err(err).Msg("archive: read spool")
			return
		}
		if len(outs) == 0 {
			break
		}
		if err := w.put(ctx, outs); err != nil {
			w.markDown(err)
			return
		}
		if err := done(true); err != nil {
			w.log.Error().Err(err).Msg("archive: rewrite spool")
			return
		}
		written += len(outs)
	}
	if written > 0 {
		w.log.Info().Int("outcomes", written).Msg("archive: spooled outcomes written back")
	}
	w.up()
}

func (w *Writer) up() {
	if w.down.Swap(false) {
		w.log.Info().Msg("archive answers again")
	}
}

// purge deletes outcomes and claims past their retention in bounded rounds.
func (w *Writer) purge(ctx context.Context) {
	for _, del := range []func(context.Context, int) (int64, error){w.store.Purge, w.store.PurgeClaims} {
		for range 10 {
			pctx, cancel := context.WithTimeout(ctx, w.cfg.WriteTimeout)
			n, err := del(pctx, w.cfg.PurgeBatch)
			cancel()
			if err != nil {
				w.metrics.errors.WithLabelValues("purge").Inc()
				break
			}
			if n < int64(w.cfg.PurgeBatch) {
				break
			}
		}
	}
}

// Close writes what is still queued within ctx, spools the rest, and releases the spool.
// Call it after Run returned. A Record after Close goes to the spool file directly.
func (w *Writer) Close(ctx context.Context) error {
	w.closeMu.Lock()
	defer w.closeMu.Unlock()
	if w.closed {
		return nil
	}
	w.closed = true
	w.closing.Store(true)
	var batch []flight.Archived
	for {
		select {
		case a := <-w.in:
			batch = append(batch, a)
			continue
		default:
		}
		break
	}
	if len(batch) > 0 {
		if w.down.Load() || w.put(ctx, batch) != nil {
			w.spoolBatch(batch)
		}
	}
	return w.spool.close()
}
