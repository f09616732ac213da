package lua_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// BenchmarkRedisCallCost measures what Redis spends on what the flight functions do, called
// from Lua as the functions do it: each op is one script running a loop of costLoop calls,
// and us/call is the script's server-side time (INFO commandstats, no network) per call. The
// rows compare the flight record's commands (one SET NX PX of a record, a GETRANGE, a SET PX)
// with the hash the flight kept before (a 16-field HSET and a TTL), and show what Lua itself
// costs: a pattern with captures, a string made of pieces. fcall-args-5 and fcall-args-25 call a
// function that returns at once with 5 and 25 arguments of 20 bytes: what each argument
// costs. scripts/redis-instr.sh counts the same runs in instructions, which a busy machine does
// not move (docs/BENCHMARKS.md section 11).
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
		{"set-nx-px-record-new-key", "redis.call('SET', p .. 's' .. i, rec, 'NX', 'PX', '180000')"},
		{"getrange-record", "redis.call('GETRANGE', p .. 'rec', 0, 4095)"},
		{"set-px-record-same-key", "redis.call('SET', p .. 'rec', rec, 'PX', '600000')"},
		{"hset-16-fields-new-key", "redis.call('HSET', p .. 'h' .. i, " + meta + ")"},
		{"pexpire-new-ttl", "redis.call('PEXPIRE', p .. 'h' .. i, '600000')"},
		{"xadd-event", "redis.call('XADD', p .. 'x', 'MAXLEN', '~', '1000000', '*', '_watermill_message_uuid', 't-' .. i, 'payload', ev)"},
		{"match-4-captures", "string.find(rec, '^f1\\t(%u+)\\t(%d+)\\t(%d+)\\t(%a*)\\t%d*\\t')"},
		{"concat-record", "local x = 'f1\\tSUCCEEDED\\t' .. i .. '\\t1\\t' .. rec"},
	} {
		b.Run(c.name, func(b *testing.B) {
			prefix := r.Prefix + ":cost:" + c.name + ":" + strconv.Itoa(b.N) + ":"
			script := "local p, ev, rec = ARGV[1], ARGV[2], ARGV[5] redis.call('SET', p .. 'rec', rec) " +
				"for i = ARGV[3], ARGV[4] do " + c.call + " end return 1"
			ev := `{"taskId":"t-1","shared":"owner","queuedMs":0,"requestKey":"ai:s:v1:acme:` + strings.Repeat("a", 64) +
				`","stage":"s","tenant":"acme","status":"SUCCEEDED","ownerToken":1764512345678901,"attempts":1,"runMs":0}`
			rec := "f1\tRUNNING\t1764512345678901\t1\t\t1764512345678\t\t1764512345678\t1764512345678\t\t\t\t1764512345678\t\n" +
				"ai:s:v1:acme:" + strings.Repeat("a", 64) + "\ts\tacme\t\t5000 120000 0 600000 60000 3\tc1\tt-1\t1-0 ai:tasks:s\t\t\t\t\n\n"
			before := evalUsec(b, r.Client)
			b.ResetTimer()
			for n := range b.N {
				from := n * costLoop
				if err := r.Client.Eval(ctx, script, nil, prefix, ev, from, from+costLoop-1, rec).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((evalUsec(b, r.Client)-before)/float64(b.N*costLoop), "us/call")
			b.ReportMetric(0, "ns/op")
		})
	}
	if err := r.Client.FunctionLoadReplace(ctx, "#!lua name=fdcost_empty\n"+
		"redis.register_function('fdcost_empty', function(keys, args) return 1 end)").Err(); err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{5, 25} {
		b.Run("fcall-args-"+strconv.Itoa(n), func(b *testing.B) {
			args := make([]any, n)
			for i := range args {
				args[i] = strings.Repeat("x", 20)
			}
			before := fcallUsec(b, r.Client)
			b.ResetTimer()
			for range b.N {
				if err := r.Client.FCall(ctx, "fdcost_empty", []string{r.Prefix + ":cost:{empty}"}, args...).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((fcallUsec(b, r.Client)-before)/float64(b.N), "us/call")
		})
	}
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
