package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/topics"
)

// Ledger windows: the last hour, read from the per-minute stats hashes, and the last day, read
// from the hourly ones.
const (
	WindowHour = "hour"
	WindowDay  = "day"
)

// maxLedgerTenants bounds the tenant rows one ledger read reports per stage, the least busy
// tenants past it counting together under "*". Consumers count at most
// topics.MaxLedgerTenants each, but a fleet has many consumers, and anyone who may write to
// Redis may add fields.
const maxLedgerTenants = 1000

// LedgerRow is what the savings ledger counted for one stage and tenant in the window.
type LedgerRow struct {
	// Tenant is the tenant, or "*" for the tenants a consumer counted together once it had
	// counted topics.MaxLedgerTenants apart.
	Tenant string `json:"tenant"`
	topics.LedgerCounts
	// Tasks counts the tasks answered by every path, and Shared those answered without a
	// model call of their own.
	Tasks  int64 `json:"tasks"`
	Shared int64 `json:"shared"`
	// HitRate is Shared over Tasks, 0 without tasks.
	HitRate float64 `json:"hitRate"`
	// SpentUSD and AvoidedUSD are SpentNanoUSD and AvoidedNanoUSD in US dollars.
	SpentUSD   float64 `json:"spentUSD"`
	AvoidedUSD float64 `json:"avoidedUSD"`
}

// StageLedger is one stage's ledger: its total and its tenants, the busiest first.
type StageLedger struct {
	Stage   string      `json:"stage"`
	Total   LedgerRow   `json:"total"`
	Tenants []LedgerRow `json:"tenants"`
}

// LedgerReport is the fleet's savings ledger over a window.
type LedgerReport struct {
	// Window is WindowHour or WindowDay. From is the first minute's or hour's start, in Unix
	// seconds of the Redis clock; the window ends now, its last minute or hour partial.
	Window string        `json:"window"`
	From   int64         `json:"from"`
	Stages []StageLedger `json:"stages"`
	// Total adds every stage up.
	Total LedgerRow `json:"total"`
}

// ErrBadWindow reports a ledger window other than WindowHour and WindowDay. It is an
// ErrBadRequest.
var ErrBadWindow = fmt.Errorf("%w: ledger window: want hour or day", ErrBadRequest)

// Ledger reads the fleet's savings ledger for the given stages, or every stage when none are
// given, over window: the last hour (the current minute and the 59 before it) or the last day
// (the current hour and the 23 before it). It sums what every consumer added to the stats
// hashes.
func (in *Inspector) Ledger(ctx context.Context, stages []string, window string) (LedgerReport, error) {
	if window == "" {
		window = WindowHour
	}
	if window != WindowHour && window != WindowDay {
		return LedgerReport{}, fmt.Errorf("%w: %q", ErrBadWindow, window)
	}
	known := in.Stages(ctx)
	if len(stages) == 0 {
		stages = known
	}
	for _, s := range stages {
		if !slices.Contains(known, s) {
			return LedgerReport{}, fmt.Errorf("admin: ledger: %w: stage %q", ErrNotFound, s)
		}
	}
	now, err := in.rdb.Time(ctx).Result()
	if err != nil {
		return LedgerReport{}, fmt.Errorf("admin: ledger: %w", err)
	}
	unit, n, key := int64(60), int64(60), in.ks.Stats
	if window == WindowDay {
		unit, n, key = 3600, 24, in.ks.StatsHour
	}
	last := now.Unix() / unit
	first := last - n + 1
	cmds := make([][]*redis.MapStringStringCmd, len(stages))
	_, err = in.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range stages {
			for t := first; t <= last; t++ {
				cmds[i] = append(cmds[i], p.HGetAll(ctx, key(s, t)))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return LedgerReport{}, fmt.Errorf("admin: ledger: %w", err)
	}
	rep := LedgerReport{Window: window, From: first * unit, Stages: make([]StageLedger, 0, len(stages))}
	var total topics.LedgerCounts
	for i, s := range stages {
		sl := sumLedger(s, cmds[i])
		total.Add(sl.Total.LedgerCounts)
		rep.Stages = append(rep.Stages, sl)
	}
	rep.Total = ledgerRow("", total)
	return rep, nil
}

// sumLedger adds up one stage's ledger fields of the hashes cmds read.
func sumLedger(stage string, cmds []*redis.MapStringStringCmd) StageLedger {
	index := make(map[string]int, len(topics.LedgerNames))
	for i, name := range topics.LedgerNames {
		index[name] = i
	}
	tenants := map[string]*topics.LedgerCounts{}
	for _, c := range cmds {
		for f, v := range c.Val() {
			tenant, name, ok := topics.ParseLedgerField(f)
			if !ok {
				continue
			}
			i, ok := index[name]
			n, err := strconv.ParseInt(v, 10, 64)
			if !ok || err != nil || n <= 0 {
				continue
			}
			tc := tenants[tenant]
			if tc == nil {
				tc = &topics.LedgerCounts{}
				tenants[tenant] = tc
			}
			*tc.Counter(i) += n
		}
	}
	rows := make([]LedgerRow, 0, len(tenants))
	var total topics.LedgerCounts
	for t, c := range tenants {
		total.Add(*c)
		rows = append(rows, ledgerRow(t, *c))
	}
	sort.Slice(rows, func(i, j int) bool {
		a, b := rows[i], rows[j]
		if a.Tasks != b.Tasks {
			return a.Tasks > b.Tasks
		}
		return a.Tenant < b.Tenant
	})
	if len(rows) > maxLedgerTenants {
		// The busiest tenants keep their rows; the others count together under "*", in the
		// totals as everywhere.
		var other topics.LedgerCounts
		kept := rows[:0]
		for _, r := range rows {
			if len(kept) < maxLedgerTenants-1 && r.Tenant != topics.LedgerOther {
				kept = append(kept, r)
				continue
			}
			other.Add(r.LedgerCounts)
		}
		rows = append(kept, ledgerRow(topics.LedgerOther, other))
	}
	return StageLedger{Stage: stage, Tenants: rows, Total: ledgerRow("", total)}
}

// ledgerRow completes c's derived figures.
func ledgerRow(tenant string, c topics.LedgerCounts) LedgerRow {
	r := LedgerRow{Tenant: tenant, LedgerCounts: c, Tasks: c.Tasks(), Shared: c.Shared(),
		SpentUSD: float64(c.SpentNanoUSD) / 1e9, AvoidedUSD: float64(c.AvoidedNanoUSD) / 1e9}
	if r.Tasks > 0 {
		r.HitRate = float64(r.Shared) / float64(r.Tasks)
	}
	return r
}
