//go:build browser

// The Savings panel's browser test: a known mix of ledger counts seeded in the stats hashes
// shows exactly, for the last hour and the last day. The helpers it shares with the
// dashboard's test live in browser_test.go.
package admin_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// TestBrowserSavings: the Savings panel shows the fleet's savings ledger, exactly: empty while
// nothing was counted, then, for a known mix of counts in the stats hashes, the fleet's figures
// and a row per stage and tenant, of the last hour and, once toggled (a click, then the
// keyboard back), of the last day. The pipeline runs no task, so what it shows is the mix.
func TestBrowserSavings(t *testing.T) {
	chrome := chromiumPath(t)
	const stage = "interview-evaluation"
	p := startPipeline(t, []string{stage}, "fd-node-a")
	b := openBrowser(t, chrome, p, 2*time.Minute)
	b.run("open the dashboard",
		chromedp.EmulateViewport(1440, 900),
		prefersColorScheme("dark"),
		chromedp.Navigate(p.srv.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.ID("auth-token")),
	)
	b.submitToken(testReadToken)
	b.waitJS("the empty savings", `document.getElementById('savings-panel').dataset.window === 'hour' &&
		!document.getElementById('savings-empty').hidden && document.getElementById('savings-body').hidden &&
		document.getElementById('savings-window').querySelector('[aria-pressed="true"]').dataset.window === 'hour'`, 15*time.Second)

	// The mix, in the minute and the hour before the current ones.
	now, err := p.r.Client.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	seedLedger(t, p, p.ks.Stats(stage, now.Unix()/60-1), topics.StatsRetention, map[string]map[string]int64{
		"ledger-a": {"owner": 100, "joined": 50, "follower": 350, "hit": 500, "calls": 100, "promptTokens": 10000,
			"completionTokens": 2000, "avoidedPromptTokens": 90000, "avoidedCompletionTokens": 18000,
			"spentNanoUSD": 14000000, "avoidedNanoUSD": 126000000},
		"ledger-b": {"owner": 1, "hit": 4, "calls": 1, "rateLimited": 2, "limiterWaits": 3, "promptTokens": 100,
			"completionTokens": 20, "avoidedPromptTokens": 400, "avoidedCompletionTokens": 80,
			"spentNanoUSD": 140000, "avoidedNanoUSD": 560000},
	})
	seedLedger(t, p, p.ks.StatsHour(stage, now.Unix()/3600-1), topics.StatsHourRetention, map[string]map[string]int64{
		"ledger-a": {"owner": 2000, "joined": 1000, "follower": 7000, "hit": 10900, "archive": 100, "calls": 2100,
			"rateLimited": 5, "limiterWaits": 40, "promptTokens": 210000, "completionTokens": 42000,
			"avoidedPromptTokens": 1800000, "avoidedCompletionTokens": 360000,
			"spentNanoUSD": 294000000, "avoidedNanoUSD": 2520000000},
		"ledger-c": {"owner": 3, "local": 4, "archive": 3, "calls": 7, "promptTokens": 700, "completionTokens": 140,
			"avoidedPromptTokens": 300, "avoidedCompletionTokens": 60, "spentNanoUSD": 980000, "avoidedNanoUSD": 420000},
		topics.LedgerOther: {"owner": 1, "follower": 1, "hit": 2, "calls": 1, "promptTokens": 50, "completionTokens": 10,
			"spentNanoUSD": 65000},
	})

	hour := ledgerView{Window: "hour",
		Figures: map[string]any{"savings-spent": "$0.0141", "savings-avoided": "$0.1266", "savings-tokens": 12120,
			"savings-avoided-tokens": 108480, "savings-hit-rate": "90.0%", "savings-calls": 101,
			"savings-rate-limited": 2, "savings-limiter-waits": 3},
		Rows: []ledgerViewRow{
			{stage, "", map[string]any{"tenant": stage, "tasks": 1005, "owner": 101, "joined": 50, "follower": 350, "hit": 504,
				"archive": 0, "local": 0, "hitRate": "90.0%", "calls": 101, "rateLimited": 2, "limiterWaits": 3,
				"tokens": 12120, "avoidedTokens": 108480, "spentUSD": "$0.0141", "avoidedUSD": "$0.1266"}},
			{stage, "ledger-a", map[string]any{"tenant": "ledger-a", "tasks": 1000, "owner": 100, "joined": 50, "follower": 350,
				"hit": 500, "archive": 0, "local": 0, "hitRate": "90.0%", "calls": 100, "rateLimited": 0, "limiterWaits": 0,
				"tokens": 12000, "avoidedTokens": 108000, "spentUSD": "$0.0140", "avoidedUSD": "$0.1260"}},
			{stage, "ledger-b", map[string]any{"tenant": "ledger-b", "tasks": 5, "owner": 1, "joined": 0, "follower": 0,
				"hit": 4, "archive": 0, "local": 0, "hitRate": "80.0%", "calls": 1, "rateLimited": 2, "limiterWaits": 3,
				"tokens": 120, "avoidedTokens": 480, "spentUSD": "$0.0001", "avoidedUSD": "$0.0006"}},
		}}
	day := ledgerView{Window: "day",
		Figures: map[string]any{"savings-spent": "$0.2950", "savings-avoided": "$2.5204", "savings-tokens": 252900,
			"savings-avoided-tokens": 2160360, "savings-hit-rate": "90.4%", "savings-calls": 2108,
			"savings-rate-limited": 5, "savings-limiter-waits": 40},
		Rows: []ledgerViewRow{
			{stage, "", map[string]any{"tenant": stage, "tasks": 21014, "owner": 2004, "joined": 1000, "follower": 7001,
				"hit": 10902, "archive": 103, "local": 4, "hitRate": "90.4%", "calls": 2108, "rateLimited": 5, "limiterWaits": 40,
				"tokens": 252900, "avoidedTokens": 2160360, "spentUSD": "$0.2950", "avoidedUSD": "$2.5204"}},
			{stage, "ledger-a", map[string]any{"tenant": "ledger-a", "tasks": 21000, "owner": 2000, "joined": 1000,
				"follower": 7000, "hit": 10900, "archive": 100, "local": 0, "hitRate": "90.5%", "calls": 2100, "rateLimited": 5,
				"limiterWaits": 40, "tokens": 252000, "avoidedTokens": 2160000, "spentUSD": "$0.2940", "avoidedUSD": "$2.5200"}},
			{stage, "ledger-c", map[string]any{"tenant": "ledger-c", "tasks": 10, "owner": 3, "joined": 0, "follower": 0,
				"hit": 0, "archive": 3, "local": 4, "hitRate": "30.0%", "calls": 7, "rateLimited": 0, "limiterWaits": 0,
				"tokens": 840, "avoidedTokens": 360, "spentUSD": "$0.0010", "avoidedUSD": "$0.0004"}},
			{stage, topics.LedgerOther, map[string]any{"tenant": "other tenants", "tasks": 4, "owner": 1, "joined": 0,
				"follower": 1, "hit": 2, "archive": 0, "local": 0, "hitRate": "75.0%", "calls": 1, "rateLimited": 0,
				"limiterWaits": 0, "tokens": 60, "avoidedTokens": 0, "spentUSD": "$0.0001", "avoidedUSD": "$0.0000"}},
		}}

	// The hour's figures arrive with the panel's next poll (every 10 s).
	b.waitLedger(hour, 20*time.Second)
	b.run("show the last day", chromedp.Click(chromedp.CSS(`#savings-window button[data-window="day"]`)))
	// The toggle reads at once, well before the next poll.
	b.waitLedger(day, 5*time.Second)
	b.shotOf("dashboard-savings-day.png", "#savings-panel")
	b.run("back to the last hour with the keyboard",
		chromedp.Focus(chromedp.CSS(`#savings-window button[data-window="hour"]`)), chromedp.KeyEvent("\r"))
	b.waitLedger(hour, 5*time.Second)
	b.waitJS("the hour's button pressed", `(() => {
		const bs = document.querySelectorAll('#savings-window button');
		return bs[0].getAttribute('aria-pressed') === 'true' && bs[1].getAttribute('aria-pressed') === 'false' &&
			document.activeElement === bs[0];
	})()`, 2*time.Second)
	b.shotOf("dashboard-savings.png", "#savings-panel")

	b.problems.stopped.Store(true)
	b.problems.check(t)
}

// seedLedger adds the counts of mix, by tenant and counter name, to the ledger fields of the
// stats hash key, as consumers do, and has it expire after ttl.
func seedLedger(t *testing.T, p *pipeline, key string, ttl time.Duration, mix map[string]map[string]int64) {
	t.Helper()
	ctx := context.Background()
	_, err := p.r.Client.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for tenant, counts := range mix {
			for name, n := range counts {
				if !slices.Contains(topics.LedgerNames[:], name) {
					t.Fatalf("seedLedger: no ledger counter %q", name)
				}
				pl.HIncrBy(ctx, key, topics.LedgerField(tenant, name), n)
			}
		}
		pl.Expire(ctx, key, ttl)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// ledgerView is what the Savings panel shows: its window, the fleet's figures by element id,
// and the table's rows in order, each with its cells by data-field. A number stands for the
// text fmtInt makes of it (in the browser's locale); a string is the exact text.
type ledgerView struct {
	Window  string          `json:"window"`
	Figures map[string]any  `json:"figures"`
	Rows    []ledgerViewRow `json:"rows"`
}

// ledgerViewRow is a row of the Savings table: a stage's total (Tenant "") or one tenant's.
type ledgerViewRow struct {
	Stage  string         `json:"stage"`
	Tenant string         `json:"tenant"`
	Cells  map[string]any `json:"cells"`
}

// ledgerDiff is a page function that lists how the Savings panel differs from a ledgerView,
// "" when it does not.
const ledgerDiff = `(want) => {
	const nf = new Intl.NumberFormat();
	const text = (v) => (typeof v === 'number' ? nf.format(v) : v);
	const panel = document.getElementById('savings-panel');
	if (panel.dataset.window !== want.window) return 'window ' + JSON.stringify(panel.dataset.window);
	if (panel.classList.contains('switching')) return 'switching';
	if (!document.getElementById('savings-empty').hidden || document.getElementById('savings-body').hidden) return 'empty';
	const bad = [];
	for (const [id, v] of Object.entries(want.figures)) {
		const got = document.getElementById(id).textContent;
		if (got !== text(v)) bad.push('#' + id + ' ' + JSON.stringify(got) + ', want ' + JSON.stringify(text(v)));
	}
	const rows = [...document.querySelectorAll('#savings-table tbody tr')];
	const key = (stage, tenant) => stage + '/' + tenant;
	const got = rows.map((r) => key(r.dataset.stage, r.dataset.row === 'total' ? '' : r.dataset.tenant));
	const wanted = want.rows.map((w) => key(w.stage, w.tenant));
	if (got.join(' ') !== wanted.join(' ')) bad.push('rows ' + got.join(' ') + ', want ' + wanted.join(' '));
	want.rows.forEach((w, i) => {
		const row = rows[i];
		if (!row) return;
		for (const [f, v] of Object.entries(w.cells)) {
			const cell = row.querySelector('td[data-field="' + f + '"]');
			const g = cell ? cell.textContent : '(no cell)';
			if (g !== text(v)) bad.push(key(w.stage, w.tenant) + ' ' + f + ' ' + JSON.stringify(g) + ', want ' + JSON.stringify(text(v)));
		}
	});
	return bad.join('; ');
}`

// waitLedger waits until the Savings panel shows want; past timeout it fails with how it
// differs and a screenshot.
func (b *browser) waitLedger(want ledgerView, timeout time.Duration) {
	b.t.Helper()
	js, err := json.Marshal(want)
	if err != nil {
		b.t.Fatal(err)
	}
	expr := "(" + ledgerDiff + ")(" + string(js) + ")"
	deadline := time.Now().Add(timeout)
	for {
		diff, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](expr))
		if err == nil && diff == "" {
			return
		}
		if time.Now().After(deadline) {
			b.problems.check(b.t)
			if png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot()); err == nil {
				saveScreenshot(b.t, "timeout.png", png)
			}
			b.t.Fatalf("timed out after %v waiting for the %s's savings: %s (error: %v)", timeout, want.Window, diff, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
