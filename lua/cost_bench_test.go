package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
	"github.com/flightdeck-ai/flightdeck/lua"
)

// BenchmarkRedisCallCost measures what Redis spends on the commands the flight functions run,
// called from Lua as the functions call them: each op is one script running a loop of
// costLoop calls, and us/call is the script's server-side time (INFO commandstats, no network)
// per call. "new key" calls create a key (with a TTL for SET PX and PEXPIRE), as an owner's
// acquire and complete create the meta, the result and the fence of a fresh key. fcall-entry
// is the cost of entering the flight library's acquire with the arguments a consumer sends
// (6 keys, 25 arguments), measured on a call that its deadline turns away before any write;
// fcall-empty the cost of calling a function that returns at once, with the same arguments.
func BenchmarkRedisCallCost(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	meta := "'status','RUNNING','stage','s','tenant','acme','sessionId','','requestKey','k','ownerId','c1'," +
		"'ownerToken','1764512345678901','taskId','t1','entry','1-0 ai:tasks:s','attempts','1'," +
		"'createdAt','1764512345678','updatedAt','1764512345678','heartbeatAt','1764512345678'," +
		"'expireAt','1764512345678','policy','5000 120000 0 600000 60000 3'"
	for _, c := range []struct{ name, call string }{
		{"time", "redis.call('TIME')"},
		{"get-missing", "redis.call('GET', p .. 'none')"},
		{"hgetall-missing", "redis.call('HGETALL', p .. 'none')"},
		{"hset-16-fields-new-key", "redis.call('HSET', p .. 'h' .. i, " + meta + ")"},
		{"hset-16-fields-same-key", "redis.call('HSET', p .. 'h', " + meta + ")"},
		{"pexpire-new-ttl", "redis.call('PEXPIRE', p .. 'h' .. i, '600000')"},
		{"set-px-new-key", "redis.call('SET', p .. 's' .. i, '1764512345678901', 'PX', '600000')"},
		{"xadd-event", "redis.call('XADD', p .. 'x', 'MAXLEN', '~', '1000000', '*', '_watermill_message_uuid', 't-' .. i, 'payload', ev)"},
	} {
		b.Run(c.name, func(b *testing.B) {
			prefix := r.Prefix + ":cost:" + c.name + ":" + strconv.Itoa(b.N) + ":"
			script := "local p, ev = ARGV[1], ARGV[2] for i = ARGV[3], ARGV[4] do " + c.call + " end return 1"
			ev := `{"taskId":"t-1","shared":"owner","queuedMs":0,"requestKey":"ai:s:v1:acme:` + strings.Repeat("a", 64) +
				`","stage":"s","tenant":"acme","status":"SUCCEEDED","ownerToken":1764512345678901,"attempts":1,"runMs":0}`
			before := evalUsec(b, r.Client)
			b.ResetTimer()
			for n := range b.N {
				from := n * costLoop
				if err := r.Client.Eval(ctx, script, nil, prefix, ev, from, from+costLoop-1).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((evalUsec(b, r.Client)-before)/float64(b.N*costLoop), "us/call")
			b.ReportMetric(0, "ns/op")
		})
	}
	b.Run("fcall-empty", func(b *testing.B) {
		// A function that returns at once, called with the same keys and arguments: what
		// entering any function costs, whatever it does.
		if err := r.Client.FunctionLoadReplace(ctx, "#!lua name=fdcost_empty\n"+
			"redis.register_function('fdcost_empty', function(keys, args) return 1 end)").Err(); err != nil {
			b.Fatal(err)
		}
		k := r.Prefix + ":cost:{empty}"
		keys := []string{k + ":m", k + ":r", k + ":f", k + ":w", r.Prefix + ":results:s", r.Prefix + ":tasks:s"}
		args := []any{"write", "1000000", "flightdeck", "~parked", `"finishedAt":"2026-11-30T16:00:00.123Z","consumer":"c1"`,
			"", "", "", 0, 0, 65536, "c1", "s", "acme", "", "k", 5000, 120000, "5000 120000 0 600000 60000 3",
			180000, 0, 1560000, 1, 1, 0}
		before := fcallUsec(b, r.Client)
		b.ResetTimer()
		for range b.N {
			if err := r.Client.FCall(ctx, "fdcost_empty", keys, args...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric((fcallUsec(b, r.Client)-before)/float64(b.N), "us/call")
	})
	b.Run("fcall-entry", func(b *testing.B) {
		if err := lua.EnsureLibrary(ctx, r.Client); err != nil {
			b.Fatal(err)
		}
		k := r.Prefix + ":cost:{entry}"
		keys := []string{k + ":m", k + ":r", k + ":f", k + ":w", r.Prefix + ":results:s", r.Prefix + ":tasks:s"}
		args := []any{"write", "1000000", "flightdeck", "~parked", `"finishedAt":"2026-11-30T16:00:00.123Z","consumer":"c1"`,
			"", "", "", 0, 0, 65536, "c1", "s", "acme", "", "k", 5000, 120000, "5000 120000 0 600000 60000 3",
			180000, 0, 1560000, 1, 1, 0} // no task, deadline 1 ms after the epoch: answered EXPIRED, nothing written
		before := fcallUsec(b, r.Client)
		b.ResetTimer()
		for range b.N {
			if err := lua.Acquire.Run(ctx, r.Client, keys, args...).Err(); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric((fcallUsec(b, r.Client)-before)/float64(b.N), "us/call")
	})
}

// costLoop is the number of calls one script of BenchmarkRedisCallCost makes.
const costLoop = 1000

func evalUsec(b *testing.B, rdb redis.UniversalClient) float64 {
	return cmdUsec(b, rdb, "cmdstat_eval")
}
func fcallUsec(b *testing.B, rdb redis.UniversalClient) float64 {
	return cmdUsec(b, rdb, "cmdstat_fcall")
}

// cmdUsec is the time Redis spent in one command so far (INFO commandstats), in µs.
func cmdUsec(b *testing.B, rdb redis.UniversalClient, line string) float64 {
	b.Helper()
	n, err := redistest.InfoNumber(context.Background(), rdb, "commandstats", line, "usec")
	if err != nil {
		b.Fatal(err)
	}
	return n
}
