//go:build browser

// The browser test drives the dashboard in headless Chromium (Debian's chromium; `make
// test-ui` installs it) against a running pipeline: the page asks for a token before it reads
// anything, shows a refused one's 401, reads with the read-only token (actions disabled),
// then with the action token cancels a live flight and sees its CANCELLED events, and brings
// the form back when its stored token is refused; the Savings panel shows a known mix of
// ledger counts exactly, for the last hour and the last day. It fails on any console error,
// uncaught exception or failed request. Screenshots go to the test's artifact directory
// (go test -artifacts keeps them; the test logs where they are) and, with
// UPDATE_SCREENSHOTS=1, to docs/img/ for the README and docs/OPERATIONS.md.
package admin_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/cdproto/emulation"
	cdplog "github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// chromiumPath is the browser: $CHROMIUM, else Debian's /usr/bin/chromium.
func chromiumPath(t *testing.T) string {
	p := os.Getenv("CHROMIUM")
	if p == "" {
		p = "/usr/bin/chromium"
	}
	if _, err := exec.LookPath(p); err != nil {
		t.Fatalf("no Chromium at %s (install it with `apt-get install -y chromium`, or run `make test-ui`): %v", p, err)
	}
	return p
}

// pageProblems collects what must not happen on the page: console errors, uncaught
// exceptions (including unhandled rejections), browser log errors (CSP violations, failed
// loads) and failed requests to the server.
type pageProblems struct {
	mu       sync.Mutex
	list     []string
	allowed  []string // substrings of problems a test step provokes on purpose
	urls     map[network.RequestID]string
	stopped  atomic.Bool
	serverTo string
}

func (pp *pageProblems) add(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, a := range pp.allowed {
		if strings.Contains(msg, a) {
			return
		}
	}
	pp.list = append(pp.list, msg)
}

// allow tolerates problems containing substr until the returned func is called.
func (pp *pageProblems) allow(substr string) (done func()) {
	pp.mu.Lock()
	pp.allowed = append(pp.allowed, substr)
	pp.mu.Unlock()
	return func() {
		pp.mu.Lock()
		defer pp.mu.Unlock()
		for i, a := range pp.allowed {
			if a == substr {
				pp.allowed = append(pp.allowed[:i], pp.allowed[i+1:]...)
				break
			}
		}
	}
}

func (pp *pageProblems) listen(ev any) {
	if pp.stopped.Load() {
		return
	}
	switch ev := ev.(type) {
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError {
			var args []string
			for _, a := range ev.Args {
				if a.Description != "" {
					args = append(args, a.Description)
				} else {
					args = append(args, string(a.Value))
				}
			}
			pp.add("console.error: %s", strings.Join(args, " "))
		}
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil && d.Exception.Description != "" {
			msg += " " + d.Exception.Description
		}
		pp.add("uncaught exception at %s:%d: %s", d.URL, d.LineNumber+1, msg)
	case *cdplog.EventEntryAdded:
		// Server errors of the JSON API are judged on the server side (see startPipeline).
		apiStatus := ev.Entry.Source == cdplog.EntrySourceNetwork && strings.Contains(ev.Entry.URL, "/ui/api/") &&
			strings.Contains(ev.Entry.Text, "status of 5")
		if ev.Entry.Level == cdplog.EntryLevelError && !apiStatus {
			pp.add("browser log error (%s) %s: %s", ev.Entry.Source, ev.Entry.URL, ev.Entry.Text)
		}
	case *network.EventRequestWillBeSent:
		pp.mu.Lock()
		pp.urls[ev.RequestID] = ev.Request.URL
		pp.mu.Unlock()
	case *network.EventLoadingFailed:
		pp.mu.Lock()
		u := pp.urls[ev.RequestID]
		pp.mu.Unlock()
		if u == "" || strings.HasPrefix(u, pp.serverTo) {
			pp.add("request failed: %s: %s (canceled %v, blocked %q)", u, ev.ErrorText, ev.Canceled, ev.BlockedReason)
		}
	}
}

func (pp *pageProblems) check(t *testing.T) {
	t.Helper()
	pp.mu.Lock()
	defer pp.mu.Unlock()
	for _, p := range pp.list {
		t.Error(p)
	}
}

// seed runs a realistic mix through the pipeline: owners with followers, a cache hit, a
// final failure, a retry that succeeds, a dead letter, on two stages and three tenants.
func seed(t *testing.T, p *pipeline) {
	t.Helper()
	ev, fu := "interview-evaluation", "interview-followup"
	migration := input(map[string]any{"question": "Tell me about a migration you led.",
		"answer": "I led the move of our billing service from MySQL to Postgres with zero downtime.",
		"sim":    map[string]any{"latencyMs": 700}})
	mentoring := input(map[string]any{"question": "How do you grow other engineers?",
		"answer": "I mentor two juniors and run a weekly design review.", "sim": map[string]any{"latencyMs": 1200}})
	garbled := input(map[string]any{"answer": "(inaudible)", "sim": map[string]any{"latencyMs": 300, "fail": "final"}})
	flaky := input(map[string]any{"answer": "We cut p99 latency by half with request hedging.",
		"sim": map[string]any{"latencyMs": 200, "fail": "retryable", "failAttempts": 1}})
	followup := input(map[string]any{"transcript": "…and then we rolled back twice.", "sim": map[string]any{"latencyMs": 450}})
	probe := input(map[string]any{"transcript": "I prefer small, reversible changes.",
		"sim": map[string]any{"latencyMs": 900, "progressEveryMs": 100}})
	tasks := []topics.Task{
		{TaskID: "ev-1001", Stage: ev, Tenant: "acme", SessionID: "sess-41", Input: migration},
		{TaskID: "ev-1002", Stage: ev, Tenant: "acme", SessionID: "sess-41", Input: migration},
		{TaskID: "ev-1003", Stage: ev, Tenant: "acme", SessionID: "sess-42", Input: migration},
		{TaskID: "ev-1004", Stage: ev, Tenant: "globex", SessionID: "sess-77", Input: mentoring},
		{TaskID: "ev-1005", Stage: ev, Tenant: "globex", SessionID: "sess-78", Input: mentoring},
		{TaskID: "ev-1006", Stage: ev, Tenant: "acme", SessionID: "sess-43", Input: garbled},
		{TaskID: "ev-1008", Stage: ev, Tenant: "globex", SessionID: "sess-79", Input: flaky},
		{TaskID: "fu-2001", Stage: fu, Tenant: "acme", SessionID: "sess-41", Input: followup},
		{TaskID: "fu-2002", Stage: fu, Tenant: "acme", SessionID: "sess-42", Input: followup},
		{TaskID: "fu-2003", Stage: fu, Tenant: "initech", SessionID: "sess-90", Input: probe},
	}
	for _, task := range tasks {
		p.enqueue(task)
	}
	// A task without a tenant: dead-lettered.
	if err := p.r.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: p.ks.Tasks(ev), Values: []any{
		topics.FieldUUID, "5b0e7c1a-9d2f-4f61-8c55-0e1f2a3b4c5d",
		topics.FieldPayload, `{"taskId":"ev-1099","stage":"interview-evaluation","input":{"answer":"I would shard by customer."}}`,
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the seeded events", func() bool {
		evs := p.events()
		for _, task := range tasks {
			if len(evs[task.TaskID]) == 0 {
				return false
			}
		}
		return true
	})
	// A later duplicate is a result-cache hit.
	p.enqueue(topics.Task{TaskID: "ev-1007", Stage: ev, Tenant: "acme", SessionID: "sess-44", Input: migration})
	eventually(t, 15*time.Second, "the hit", func() bool { return len(p.events()["ev-1007"]) > 0 })
}

// seedHistory writes the per-minute stats that an hour of traffic would have left before the
// test started (the minutes before the current one), so that the charts show a whole hour;
// the current minute's stats are the pipeline's own.
func seedHistory(t *testing.T, p *pipeline) {
	t.Helper()
	ctx := context.Background()
	now, err := p.r.Client.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	last := now.Unix()/60 - 1
	_, err = p.r.Client.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for si, stage := range p.stages {
			for i := int64(0); i < 59; i++ {
				x := float64(i)
				ok := int64(40 + 25*math.Sin(x/7+float64(si)) + 10*math.Sin(x/2.3))
				key := p.ks.Stats(stage, last-58+i)
				fields := map[string]int64{"o:owner_SUCCEEDED": ok * 2 / 3, "o:follower_SUCCEEDED": ok / 4,
					"o:hit_SUCCEEDED": ok - ok*2/3 - ok/4, "o:owner_FAILED": i % 7 / 3, "o:follower_CANCELLED": i % 11 / 8,
					"o:owner_EXPIRED": i % 17 / 15, "le:0.5": ok / 5, "le:1": ok / 2, "le:2.5": ok - ok/5 - ok/2 - 2, "le:10": 2}
				if i > 40 && i < 46 { // a slow spell
					fields["le:10"], fields["le:30"] = ok/2, 3
				}
				var n int64
				for f, v := range fields {
					pl.HIncrBy(ctx, key, f, v)
					if strings.HasPrefix(f, "le:") {
						n += v
					}
				}
				pl.HIncrBy(ctx, key, "n", n)
				pl.HIncrBy(ctx, key, "sumMs", n*1200)
				pl.Expire(ctx, key, topics.StatsRetention)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestBrowserDashboard(t *testing.T) {
	chrome := chromiumPath(t)
	p := startPipeline(t, []string{"interview-evaluation", "interview-followup"}, "fd-node-a", "fd-node-b")
	seedHistory(t, p)
	seed(t, p)

	// The flight to cancel: a slow owner and a duplicate parked on it.
	slow := input(map[string]any{"answer": "x", "sim": map[string]any{"latencyMs": 60000}})
	key := p.enqueue(topics.Task{TaskID: "ev-1100", Tenant: "acme", SessionID: "sess-45", Input: slow})
	eventually(t, 30*time.Second, "ev-1100 owning a RUNNING flight", func() bool {
		f, ok := p.flight(key)
		return ok && f.Status == "RUNNING"
	})
	p.enqueue(topics.Task{TaskID: "ev-1101", Tenant: "acme", SessionID: "sess-46", Input: slow})

	b := openBrowser(t, chrome, p, 3*time.Minute)
	tctx, problems, run, waitJS, shot, submitToken := b.ctx, b.problems, b.run, b.waitJS, b.shot, b.submitToken

	row := fmt.Sprintf(`#flights tbody tr[data-key=%q]`, key)
	run("open the dashboard",
		chromedp.EmulateViewport(1440, 900),
		prefersColorScheme("dark"),
		chromedp.Navigate(p.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#flights`)),
	)
	// The token form comes first, and nothing is read before a token is given.
	waitJS("the token form", `!document.getElementById('auth').hidden &&
		document.getElementById('auth-error').hidden &&
		document.getElementById('live').dataset.state === 'locked' &&
		document.querySelectorAll('#flights tbody tr').length === 0`, 10*time.Second)
	refused := problems.allow("status of 401")
	submitToken("not-the-token-0123456789")
	waitJS("the refused token's 401 in the form", `!document.getElementById('auth').hidden &&
		document.getElementById('auth-error').textContent.includes('401')`, 10*time.Second)
	refused()
	if v, err := chromedp.Run(tctx, chromedp.Evaluate[string](`sessionStorage.getItem('flightdeck.token') || ''`)); err != nil || v != "" {
		t.Errorf("a refused token was kept: %q %v", v, err)
	}
	submitToken(testReadToken)
	waitJS("the form closed by the read-only token", `document.getElementById('auth').hidden &&
		document.getElementById('token-button').dataset.access === 'read'`, 10*time.Second)
	waitJS("the slow flight RUNNING with its parked follower",
		fmt.Sprintf(`!!document.querySelector(%q)`, row+`[data-status="RUNNING"][data-parked="1"]`), 30*time.Second)
	waitJS("the seeded events, stages, consumers and dead letter", `
		document.querySelectorAll('#events tbody tr').length >= 11 &&
		document.querySelectorAll('#stages .stage-card').length === 2 &&
		[...document.querySelectorAll('#stages .stage-card .metric.hour .metric-value')].filter((v) =>
			/^[0-9.,\s]*[1-9][0-9.,\s]*$/.test(v.textContent)).length === 2 &&
		document.querySelectorAll('#consumers tbody tr[data-alive="true"]').length === 2 &&
		document.querySelectorAll('#dlq tbody tr').length === 1 &&
		document.getElementById('node-name').textContent === 'fd-node-a' &&
		document.getElementById('node-breaker').dataset.breaker === 'closed' &&
		document.getElementById('live').dataset.state === 'live' &&
		document.getElementById('conn-error').hidden`, 30*time.Second)
	// A Redis that may evict keys is named in a notice, which goes once it may not.
	if p.r.Server != nil { // never reconfigure a shared REDIS_URL
		waitJS("no eviction notice under noeviction", `document.getElementById('eviction-warn').hidden`, 5*time.Second)
		if err := p.r.Client.ConfigSet(context.Background(), "maxmemory-policy", "allkeys-lru").Err(); err != nil {
			t.Fatal(err)
		}
		waitJS("the eviction notice", `!document.getElementById('eviction-warn').hidden &&
			document.getElementById('eviction-policy').textContent === 'allkeys-lru'`, 25*time.Second)
		if err := p.r.Client.ConfigSet(context.Background(), "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatal(err)
		}
		waitJS("the eviction notice gone", `document.getElementById('eviction-warn').hidden`, 25*time.Second)
	}
	// The last hour's charts, from the fleet's per-minute stats: throughput bars, outcome
	// segments and latency points of the evaluation stage.
	hist := `#history .history-row[data-stage="interview-evaluation"]`
	waitJS("the history charts drawn with data", fmt.Sprintf(`(() => {
		const row = document.querySelector(%q);
		return !!row && row.querySelectorAll('svg.chart-throughput rect.bar').length >= 50 &&
			row.querySelectorAll('svg.chart-latency polyline.p50').length > 0 &&
			row.querySelectorAll('svg.chart-outcomes rect.seg[data-status="SUCCEEDED"]').length > 0 &&
			row.querySelectorAll('svg.chart-outcomes rect.seg[data-status="FAILED"]').length > 0 &&
			row.querySelectorAll('svg.chart-latency circle.p99').length > 0 &&
			!row.querySelector('.chart-max').textContent.includes('—');
	})()`, hist), 25*time.Second)
	// The savings ledger of the hour, as the consumers counted the seeded tasks: acme's
	// duplicates and its cache hit on the evaluation stage, the follow-up stage's tenants.
	waitJS("the savings of the seeded tasks", `(() => {
		const ev = '#savings-table tr[data-stage="interview-evaluation"]';
		const fu = '#savings-table tr[data-stage="interview-followup"]';
		const cell = (sel, f) => (document.querySelector(sel + ' td[data-field="' + f + '"]') || {}).textContent || '';
		return document.getElementById('savings-panel').dataset.window === 'hour' &&
			document.getElementById('savings-empty').hidden &&
			/[1-9]/.test(cell(ev + '[data-tenant="acme"]', 'hit')) && /[1-9]/.test(cell(ev + '[data-tenant="acme"]', 'calls')) &&
			/^[0-9.]+%$/.test(cell(ev + '[data-row="total"]', 'hitRate')) &&
			!!document.querySelector(fu + '[data-tenant="initech"]') &&
			/^[0-9.]+%$/.test(document.getElementById('savings-hit-rate').textContent);
	})()`, 25*time.Second)
	// With the read-only token the actions are visible but disabled, and say why.
	waitJS("a disabled Cancel button", fmt.Sprintf(`(() => { const b = document.querySelector(%q);
		return b.disabled && b.title.includes('read-only'); })()`, row+` button[data-action="cancel"]`), 5*time.Second)

	time.Sleep(2500 * time.Millisecond) // let the new-row highlights fade
	shot("dashboard.png", true)

	// The pause toggle stops and resumes the refresh.
	run("pause", chromedp.Click(chromedp.ID("pause")))
	waitJS("the paused state", `document.getElementById('live').dataset.state === 'paused'`, 5*time.Second)
	run("resume", chromedp.Click(chromedp.ID("pause")))
	waitJS("the live state", `document.getElementById('live').dataset.state === 'live'`, 5*time.Second)

	// The detail panel of the running flight: full meta, the parked follower.
	run("open the flight", chromedp.Click(chromedp.CSS(row+` td.key-cell`)))
	waitJS("the detail panel", `!document.getElementById('flight-detail').hidden &&
		document.getElementById('detail-status').dataset.status === 'RUNNING' &&
		!!document.querySelector('#detail-parked tr[data-task-id="ev-1101"]')`, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	shot("dashboard-flight.png", false)
	run("close the panel", chromedp.Click(chromedp.ID("detail-close")))
	waitJS("the panel closed", `document.getElementById('flight-detail').hidden`, 5*time.Second)

	// The action token, entered through the Token button: Cancel, Confirm, and both tasks
	// get their CANCELLED events.
	cancelBtn := row + ` button[data-action="cancel"]`
	if f, _ := p.flight(key); f.Status != "RUNNING" {
		t.Fatalf("the flight changed under the read-only token: %+v", f)
	}
	run("change the token", chromedp.Click(chromedp.ID("token-button")))
	waitJS("the token form again", `!document.getElementById('auth').hidden`, 5*time.Second)
	submitToken(testToken)
	waitJS("an enabled Cancel button", fmt.Sprintf(`document.getElementById('auth').hidden &&
		document.getElementById('token-button').dataset.access === 'act' && !document.querySelector(%q).disabled`, cancelBtn), 10*time.Second)
	run("click Cancel", chromedp.Click(chromedp.CSS(cancelBtn)))
	waitJS("the confirm state", fmt.Sprintf(`document.querySelector(%q).classList.contains('confirming')`, cancelBtn), 5*time.Second)
	run("confirm", chromedp.Click(chromedp.CSS(cancelBtn)))
	waitJS("the CANCELLED events of both tasks", `
		!!document.querySelector('#events tbody tr[data-task-id="ev-1100"][data-status="CANCELLED"]') &&
		!!document.querySelector('#events tbody tr[data-task-id="ev-1101"][data-status="CANCELLED"]')`, 30*time.Second)
	waitJS("the flight CANCELLED", fmt.Sprintf(`!!document.querySelector(%q)`, row+`[data-status="CANCELLED"]`), 10*time.Second)
	if msg, err := chromedp.Run(tctx, chromedp.Evaluate[string](
		`[...document.querySelectorAll('[data-role="action-error"]')].map(e => e.textContent).join(' ')`)); err != nil || strings.TrimSpace(msg) != "" {
		t.Errorf("action errors on the page: %q %v", msg, err)
	}

	// Pause the evaluation stage from its card: a new task waits in the queued list, with its
	// payload (markup shown as text, not run), until the stage is resumed.
	card := `#stages .stage-card[data-stage="interview-evaluation"]`
	run("pause the stage", chromedp.Click(chromedp.CSS(card+` button[data-action="pause-stage"]`)))
	waitJS("the stage paused", fmt.Sprintf(`(() => { const c = document.querySelector(%q);
		return c.dataset.paused === 'true' && !c.querySelector('.badge.paused').hidden &&
			c.querySelector('button[data-action="pause-stage"]').textContent === 'Resume'; })()`, card), 10*time.Second)
	time.Sleep(2 * time.Second) // the subscribers' cached pause state (1 s) and a read already blocking (250 ms)
	p.enqueue(topics.Task{TaskID: "ev-1200", Tenant: "acme", SessionID: "sess-47",
		Input: input(map[string]any{"answer": "<img src=x onerror=alert(1)>", "sim": map[string]any{"latencyMs": 100}})})
	if err := p.r.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: p.ks.Tasks("interview-evaluation"), Values: []any{
		topics.FieldUUID, "raw-markup-1", topics.FieldPayload,
		`{"taskId":"ev-1201","stage":"interview-evaluation","tenant":"acme","input":{"answer":"<img src=x onerror=alert(2)>","sim":{"latencyMs":100}}}`,
	}}).Err(); err != nil {
		t.Fatal(err)
	}
	waitJS("the queued tasks", `!!document.querySelector('#queued tbody tr[data-task-id="ev-1200"]') &&
		[...document.querySelectorAll('#queued tbody tr[data-task-id="ev-1201"] td.payload code')].some(c => c.textContent.includes('<img src=x'))`, 10*time.Second)
	if n, err := chromedp.Run(tctx, chromedp.Evaluate[int](`document.querySelectorAll('#queued img').length`)); err != nil || n != 0 {
		t.Errorf("markup of a queued payload became elements: %d %v", n, err)
	}
	time.Sleep(time.Second)
	if evs := p.events(); len(evs["ev-1200"])+len(evs["ev-1201"]) > 0 {
		t.Fatalf("a paused stage's task was answered: %v", evs["ev-1200"])
	}
	shot("dashboard-paused.png", true)
	run("resume the stage", chromedp.Click(chromedp.CSS(card+` button[data-action="pause-stage"]`)))
	waitJS("the queued tasks answered after the resume", fmt.Sprintf(`document.querySelector(%q).dataset.paused === 'false' &&
		!!document.querySelector('#events tbody tr[data-task-id="ev-1200"][data-status="SUCCEEDED"]') &&
		!!document.querySelector('#events tbody tr[data-task-id="ev-1201"][data-status="SUCCEEDED"]') &&
		!document.querySelector('#queued tbody tr')`, card), 20*time.Second)

	// Requeue the dead letter: it leaves the DLQ, and being still invalid comes back as a
	// new entry with the same uuid.
	oldID, err := chromedp.Run(tctx, chromedp.Evaluate[string](`document.querySelector('#dlq tbody tr').dataset.id`))
	if err != nil {
		t.Fatal(err)
	}
	run("requeue", chromedp.Click(chromedp.CSS(`#dlq tbody tr button[data-action="requeue"]`)))
	waitJS("the dead letter requeued and back", fmt.Sprintf(`(() => {
		const rows = [...document.querySelectorAll('#dlq tbody tr')];
		return rows.length === 1 && rows[0].dataset.id !== %q && rows[0].dataset.uuid === '5b0e7c1a-9d2f-4f61-8c55-0e1f2a3b4c5d';
	})()`, oldID), 15*time.Second)

	// Bulk: two more dead letters, all three selected and requeued at once; still invalid,
	// they come back with new ids. Then the stage's whole DLQ is purged (two clicks).
	for i, u := range []string{"bulk-uuid-1", "bulk-uuid-2"} {
		if err := p.r.Client.XAdd(context.Background(), &redis.XAddArgs{Stream: p.ks.Tasks("interview-evaluation"), Values: []any{
			topics.FieldUUID, u, topics.FieldPayload, fmt.Sprintf(`{"taskId":"ev-13%02d","stage":"interview-evaluation"}`, i),
		}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
	waitJS("three dead letters", `document.querySelectorAll('#dlq tbody tr').length === 3`, 15*time.Second)
	before, err := chromedp.Run(tctx, chromedp.Evaluate[string](`[...document.querySelectorAll('#dlq tbody tr')].map(r => r.dataset.id).join(' ')`))
	if err != nil {
		t.Fatal(err)
	}
	run("select every dead letter", chromedp.Click(chromedp.ID("dlq-all")))
	waitJS("three selected", `document.getElementById('dlq-selected').textContent.startsWith('3') &&
		!document.getElementById('dlq-requeue-selected').disabled`, 5*time.Second)
	run("requeue the selected", chromedp.Click(chromedp.ID("dlq-requeue-selected")))
	waitJS("the three requeued and back", fmt.Sprintf(`(() => {
		const before = new Set(%q.split(' '));
		const rows = [...document.querySelectorAll('#dlq tbody tr')];
		return rows.length === 3 && rows.every(r => !before.has(r.dataset.id)) &&
			document.getElementById('dlq-selected').textContent === '';
	})()`, before), 20*time.Second)
	run("purge all of the stage", chromedp.SetValue(chromedp.ID("dlq-stage"), "interview-evaluation"),
		chromedp.Click(chromedp.ID("dlq-purge-all")))
	waitJS("the purge confirm", `document.getElementById('dlq-purge-all').classList.contains('confirming')`, 5*time.Second)
	run("confirm the purge", chromedp.Click(chromedp.ID("dlq-purge-all")))
	waitJS("the DLQ empty", `document.querySelectorAll('#dlq tbody tr').length === 0 &&
		!document.getElementById('dlq-empty').hidden`, 15*time.Second)
	if n := p.r.Client.XLen(context.Background(), p.ks.DLQ("interview-evaluation")).Val(); n != 0 {
		t.Errorf("the DLQ has %d entries after the purge", n)
	}

	// The API goes away: the banner shows and the indicator says offline; then it recovers.
	p.apiDown.Store(true)
	waitJS("the connection banner", `!document.getElementById('conn-error').hidden &&
		document.getElementById('live').dataset.state === 'offline'`, 10*time.Second)
	time.Sleep(1500 * time.Millisecond) // every read has failed once
	shot("dashboard-offline.png", false)
	p.apiDown.Store(false)
	waitJS("the recovery", `document.getElementById('conn-error').hidden &&
		document.getElementById('live').dataset.state === 'live'`, 10*time.Second)

	time.Sleep(2500 * time.Millisecond)
	shot("dashboard-cancelled.png", true)
	run("light theme", prefersColorScheme("light"))
	time.Sleep(300 * time.Millisecond)
	shot("dashboard-light.png", true)

	// A stored token the server no longer accepts: after a reload the form is back, with
	// the 401, and the token is forgotten.
	refused = problems.allow("status of 401")
	aborted := problems.allow("canceled true") // the reload cancels the polls in flight
	run("store a stale token and reload",
		chromedp.Evaluate[chromedp.Void](`sessionStorage.setItem('flightdeck.token', 'stale-token-0123456789')`),
		chromedp.Reload())
	waitJS("the form with the 401 of the stale token", `!document.getElementById('auth').hidden &&
		document.getElementById('auth-error').textContent.includes('401') &&
		!sessionStorage.getItem('flightdeck.token')`, 10*time.Second)
	refused()
	aborted()
	shot("dashboard-token.png", false)

	problems.stopped.Store(true)
	problems.check(t)
}

// browser is a headless Chromium tab on a pipeline's dashboard, with the steps the browser
// tests take in it and the page problems it collects.
type browser struct {
	t        *testing.T
	ctx      context.Context // the tab, within the test's time
	problems *pageProblems
}

// openBrowser starts Chromium at path chrome with one tab, listening for page problems, for at
// most timeout; the test's end closes it.
func openBrowser(t *testing.T, chrome string, p *pipeline, timeout time.Duration) *browser {
	t.Helper()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome),
		chromedp.Headless,
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1440, 900),
	)
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	t.Cleanup(cancelAlloc)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	t.Cleanup(cancelTab)
	if err := chromedp.Do(ctx); err != nil { // start the browser, with no timeout on its life
		t.Fatalf("start chromium: %v", err)
	}
	problems := &pageProblems{urls: map[network.RequestID]string{}, serverTo: p.srv.URL}
	if err := chromedp.Listen(ctx, problems.listen); err != nil {
		t.Fatal(err)
	}
	tctx, cancel := context.WithTimeout(ctx, timeout)
	t.Cleanup(cancel)
	t.Cleanup(func() { problems.stopped.Store(true) }) // closing the tab cancels polls in flight
	return &browser{t: t, ctx: tctx, problems: problems}
}

// run runs actions in the tab; what says what they do when they fail.
func (b *browser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitJS waits until expr is true on the page; past timeout it fails with a screenshot and
// the page's state.
func (b *browser) waitJS(what, expr string, timeout time.Duration) {
	b.t.Helper()
	t := b.t
	deadline := time.Now().Add(timeout)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](expr))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			b.problems.check(t)
			if png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot()); err == nil {
				saveScreenshot(t, "timeout.png", png)
			}
			state, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`JSON.stringify({
				live: document.getElementById('live').dataset.state,
				banner: document.getElementById('conn-error').hidden ? '' : document.getElementById('conn-error').textContent,
				detail: document.getElementById('flight-detail').hidden ? 'closed' :
					document.getElementById('detail-status').dataset.status + ' ' + document.getElementById('detail-body').innerText.slice(0, 600),
				flights: [...document.querySelectorAll('#flights tbody tr')].map(r => r.dataset.status + ' ' + r.dataset.key + ' parked=' + r.dataset.parked),
			})`))
			t.Fatalf("timed out after %v waiting for %s (last error: %v); page: %s", timeout, what, err, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shot saves a screenshot of the viewport, or of the whole page when full.
func (b *browser) shot(name string, full bool) {
	b.t.Helper()
	action := chromedp.CaptureScreenshot()
	if full {
		action = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(b.ctx, action)
	if err != nil {
		b.t.Fatalf("screenshot %s: %v", name, err)
	}
	saveScreenshot(b.t, name, png)
}

// shotOf saves a screenshot of the element sel finds.
func (b *browser) shotOf(name, sel string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.Screenshot(chromedp.CSS(sel)))
	if err != nil {
		b.t.Fatalf("screenshot %s of %s: %v", name, sel, err)
	}
	saveScreenshot(b.t, name, png)
}

// submitToken types tok into the token form and submits it.
func (b *browser) submitToken(tok string) {
	b.t.Helper()
	b.run("enter the token "+tok[:4]+"…",
		chromedp.Evaluate[chromedp.Void](`(() => { document.getElementById('auth-token').value = ''; })()`),
		chromedp.SendKeys(chromedp.ID("auth-token"), tok), chromedp.Click(chromedp.ID("auth-submit")))
}

// prefersColorScheme emulates the system's light or dark colour scheme.
func prefersColorScheme(scheme string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		_, err := chromedp.Call(ctx, emulation.SetEmulatedMedia, emulation.SetEmulatedMediaParams{
			Features: []*emulation.MediaFeature{{Name: "prefers-color-scheme", Value: scheme}}})
		return err
	})
}

// saveScreenshot writes png to the test's artifact directory and, with UPDATE_SCREENSHOTS=1,
// the screenshots of the README and docs/OPERATIONS.md to docs/img/.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := t.ArtifactDir()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s (%d bytes)", path, len(png))
	if update, _ := strconv.ParseBool(os.Getenv("UPDATE_SCREENSHOTS")); update && (name == "dashboard.png" || name == "dashboard-flight.png" || name == "dashboard-paused.png") {
		docs := filepath.Join("..", "docs", "img")
		if err := os.MkdirAll(docs, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(docs, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
		abs, _ := filepath.Abs(filepath.Join(docs, name))
		t.Logf("updated %s", abs)
	}
}
