package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/flightdeck-ai/flightdeck/handlers"
	"github.com/flightdeck-ai/flightdeck/internal/broker"
	"github.com/flightdeck-ai/flightdeck/topics"
)

// chaosStages are the stages the run uses. Key i goes to chaosStages[i%2].
var chaosStages = []string{"interview-evaluation", "interview-followup"}

// keySpec is what a key's tasks ask of the simulated model. It is part of the input, so it
// is fixed per key.
type keySpec struct {
	LatencyMs    int64  `json:"latencyMs"`
	Fail         string `json:"fail,omitempty"`
	FailAttempts int    `json:"failAttempts,omitempty"`
}

// maxLatency is the longest simulated model call. The stages' runningTTL in runner.go stays
// above it by a second, so that an attempt expires only when its owner stopped.
const maxLatency = 3 * time.Second

// specFor draws key id's behaviour from the seed alone. Most keys answer in 50-900 ms. Some
// take 1.5-3 s, longer than the lease, so only heartbeats keep them owned. A few fail
// retryably once, giving a retry run, and a very few fail for good with FAILED events.
func specFor(seed uint64, id int) keySpec {
	r := rand.New(rand.NewPCG(seed, 0x6b6579<<20|uint64(id)))
	switch p := r.Float64(); {
	case p < 0.03:
		return keySpec{LatencyMs: 100 + r.Int64N(300), Fail: "final"}
	case p < 0.08:
		return keySpec{LatencyMs: 100 + r.Int64N(400), Fail: "retryable", FailAttempts: 1}
	case p < 0.25:
		return keySpec{LatencyMs: 1500 + r.Int64N(maxLatency.Milliseconds()-1500)}
	default:
		return keySpec{LatencyMs: 50 + r.Int64N(850)}
	}
}

// taskFor builds task taskID for key id.
func taskFor(seed uint64, id int, taskID string, now time.Time) topics.Task {
	in, _ := json.Marshal(map[string]any{
		"question": fmt.Sprintf("chaos question %d", id),
		"answer":   fmt.Sprintf("answer of seed %d key %d", seed, id),
		"sim":      specFor(seed, id),
	})
	return topics.Task{TaskID: taskID, Stage: chaosStages[id%len(chaosStages)], Tenant: "chaos", Input: in,
		EnqueuedAt: topics.FormatTime(now)}
}

// producer sends tasks at a rate over a sliding window of keys. At any time Keys keys are
// live, each for KeyLife, so every key gets several duplicates, some in bursts, while new
// keys keep the model busy throughout the run.
type producer struct {
	w       broker.Writer
	rng     *rand.Rand
	seed    uint64
	keys    int
	keyLife time.Duration
	rate    float64

	mu       sync.Mutex
	enqueues []Enqueue
	keyNames map[int]string
	maxKey   int
	seq      int
}

// window returns lo, the lowest key id live at elapsed. Ids lo to lo+keys-1 are live.
func (p *producer) window(elapsed time.Duration) int {
	step := p.keyLife / time.Duration(p.keys)
	if step <= 0 {
		step = time.Millisecond
	}
	return int(elapsed / step)
}

func (p *producer) run(ctx context.Context, start time.Time, until time.Time) {
	interval := time.Duration(float64(time.Second) / p.rate)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		now := time.Now()
		if now.After(until) {
			return
		}
		id := p.window(now.Sub(start)) + p.rng.IntN(p.keys)
		n := 1
		if p.rng.Float64() < 0.1 { // a burst of duplicates
			n = 2 + p.rng.IntN(3)
		}
		p.send(ctx, id, n, nil)
	}
}

// resend sends the tasks named again, each under a new id with Enqueue.Resends naming the
// old one, as their clients do when a task's stream entry was lost with Redis. It returns
// how many it sent.
func (p *producer) resend(ctx context.Context, taskIDs []string) int {
	if len(taskIDs) == 0 {
		return 0
	}
	p.mu.Lock()
	idOf := make(map[string]int, len(p.keyNames))
	for id, k := range p.keyNames {
		idOf[k] = id
	}
	keyOf := make(map[string]string, len(p.enqueues))
	for _, e := range p.enqueues {
		keyOf[e.TaskID] = e.Key
	}
	byKey := map[int][]string{}
	var order []int
	for _, t := range taskIDs {
		id, ok := idOf[keyOf[t]]
		if !ok {
			continue
		}
		if byKey[id] == nil {
			order = append(order, id)
		}
		byKey[id] = append(byKey[id], t)
	}
	p.mu.Unlock()
	n := 0
	for _, id := range order {
		p.send(ctx, id, len(byKey[id]), byKey[id])
		n += len(byKey[id])
	}
	return n
}

// ask sends one task of each key named, as users asking for an answer again later do. Only
// keys the producer sent before count. It returns how many it sent.
func (p *producer) ask(ctx context.Context, keys []string) int {
	p.mu.Lock()
	idOf := make(map[string]int, len(p.keyNames))
	for id, k := range p.keyNames {
		idOf[k] = id
	}
	p.mu.Unlock()
	n := 0
	for _, k := range keys {
		if id, ok := idOf[k]; ok {
			p.send(ctx, id, 1, nil)
			n++
		}
	}
	return n
}

// send enqueues n tasks of key id in one pipeline and records them. resends, when given,
// has n entries and names the task each one sends again.
func (p *producer) send(ctx context.Context, id, n int, resends []string) {
	now := time.Now()
	p.mu.Lock()
	tasks := make([]topics.Task, n)
	for i := range tasks {
		p.seq++
		tasks[i] = taskFor(p.seed, id, fmt.Sprintf("t%06d", p.seq), now)
	}
	key, ok := p.keyNames[id]
	if !ok {
		k, err := handlers.TaskKey(tasks[0])
		if err != nil {
			p.mu.Unlock()
			panic(err) // the task is built here, so a bad key is a bug of this file
		}
		key = k
		p.keyNames[id] = key
	}
	p.maxKey = max(p.maxKey, id)
	p.mu.Unlock()

	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	ids, err := p.w.EnqueueTasks(cctx, tasks)
	cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, t := range tasks {
		// The leading len(ids) XADDs are known to be done. The rest may or may not be.
		e := Enqueue{TaskID: t.TaskID, Key: key, Stage: t.Stage, At: now, Unsure: err != nil && i >= len(ids)}
		if resends != nil {
			e.Resends = resends[i]
		}
		p.enqueues = append(p.enqueues, e)
	}
}

// recentKeys returns the keys of the last n key ids sent.
func (p *producer) recentKeys(n int) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for id := p.maxKey; id >= 0 && id > p.maxKey-n; id-- {
		if k, ok := p.keyNames[id]; ok {
			out = append(out, k)
		}
	}
	return out
}

func (p *producer) history() ([]Enqueue, []string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	keys := make([]string, 0, len(p.keyNames))
	for _, k := range p.keyNames {
		keys = append(keys, k)
	}
	return append([]Enqueue(nil), p.enqueues...), keys
}
