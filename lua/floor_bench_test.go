package lua_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/flightdeck-ai/flightdeck/internal/testkit/redistest"
)

// floorLibrary holds two owner cycles reduced to their Redis commands, with no logic around
// them: acquire of a fresh key (clock, meta, fence, the meta's 16 fields and TTL, a reply
// of 21 elements) and complete (clock, the meta's token, result, meta fields and TTL, fence,
// waiters, the owner's event, the acknowledgement). "today" keeps the result and the fence
// in keys of their own, as the flight library does; "onehash" keeps them as fields of the
// meta, as a layout with one key per flight would.
const floorLibrary = `#!lua name=fdfloor
local EV = '{"taskId":"t-1","shared":"owner","queuedMs":3,"requestKey":"ai:s:v1:acme:' ..
  'aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa","stage":"s","tenant":"acme","status":"SUCCEEDED","ownerToken":1764512345678901,"attempts":1,"runMs":0,' ..
  '"finishedAt":"2026-11-30T16:00:00.123Z","consumer":"c1","result":{"score":7},"resultRef":"x"}'
local RESULT = '{"score":7,"feedback":"a short answer of a few words"}'
local function now()
  local t = redis.call('TIME')
  return t[1] .. string.sub(t[2], 1, 3)
end
local function acquire(keys, fence)
  local n = now()
  redis.call('HGETALL', keys[1])
  if fence then redis.call('GET', keys[3]) end
  redis.call('HSET', keys[1], 'status', 'RUNNING', 'stage', 's', 'tenant', 'acme', 'sessionId', '',
    'requestKey', 'ai:s:v1:acme:k', 'ownerId', 'c1', 'ownerToken', n .. '001', 'taskId', 't-1',
    'entry', '1-0 ai:tasks:s', 'attempts', '1', 'createdAt', n, 'updatedAt', n, 'heartbeatAt', n,
    'expireAt', n, 'policy', '5000 120000 0 600000 60000 3')
  redis.call('PEXPIRE', keys[1], 180000)
  return { 'OWNER', 'new', n, '1', 'c1', 't-1', 'RUNNING', '', '', '', '', n, 5000, n, n, '', 0, 0, 0, '', 0 }
end
local function complete(keys, args, onehash)
  local n = now()
  redis.call('HMGET', keys[1], 'status', 'ownerToken', 'handover')
  if onehash then
    redis.call('HSET', keys[1], 'status', 'SUCCEEDED', 'updatedAt', n, 'result', RESULT, 'inline', '1', 'fence', n)
    redis.call('PEXPIRE', keys[1], 600000)
  else
    redis.call('SET', keys[2], RESULT, 'PX', 600000)
    redis.call('HSET', keys[1], 'status', 'SUCCEEDED', 'updatedAt', n, 'resultRef', keys[2], 'inline', '1')
    redis.call('PEXPIRE', keys[1], 600000)
    redis.call('SET', keys[3], n, 'PX', 1560000)
  end
  redis.call('HGETALL', keys[4])
  redis.call('XADD', keys[5], 'MAXLEN', '~', '1000000', '*', '_watermill_message_uuid', args[1], 'payload', EV)
  redis.call('XACK', keys[6], 'flightdeck', '1-0')
  return { 'OK', 'SUCCEEDED', 0, 'answered', 1, 0, 0, '', 0 }
end
redis.register_function('fdfloor_acquire_today', function(keys, args) return acquire(keys, true) end)
redis.register_function('fdfloor_complete_today', function(keys, args) return complete(keys, args, false) end)
redis.register_function('fdfloor_acquire_onehash', function(keys, args) return acquire(keys, false) end)
redis.register_function('fdfloor_complete_onehash', function(keys, args) return complete(keys, args, true) end)
`

// BenchmarkOwnerCycleFloor measures the least an owner cycle of a fresh key can cost in
// Redis with a given key layout: the commands of acquire and complete in two functions with
// no logic around them, one call per round trip, on fresh keys (fcall-us/op: server-side time,
// INFO commandstats). layout=today is the flight library's key layout (meta, result, fence);
// layout=onehash the result and the fence as fields of the meta. The flight library's own
// cycle is BenchmarkOwnerPathRedis in flight.
func BenchmarkOwnerCycleFloor(b *testing.B) {
	r := redistest.New(b)
	ctx := context.Background()
	if err := r.Client.FunctionLoadReplace(ctx, floorLibrary).Err(); err != nil {
		b.Fatal(err)
	}
	for _, layout := range []string{"today", "onehash"} {
		b.Run("layout="+layout, func(b *testing.B) {
			base := r.Prefix + ":floor:" + layout + ":" + strconv.Itoa(b.N) + ":"
			before := fcallUsec(b, r.Client)
			b.ResetTimer()
			for i := range b.N {
				k := base + "{" + strconv.Itoa(i) + "}"
				keys := []string{k + ":m", k + ":r", k + ":f", k + ":w", r.Prefix + ":floor:results", r.Prefix + ":floor:tasks"}
				if err := r.Client.FCall(ctx, "fdfloor_acquire_"+layout, keys).Err(); err != nil {
					b.Fatal(err)
				}
				if err := r.Client.FCall(ctx, "fdfloor_complete_"+layout, keys, "t-"+strconv.Itoa(i)).Err(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric((fcallUsec(b, r.Client)-before)/float64(b.N), "fcall-us/op")
			b.ReportMetric(0, "ns/op")
		})
	}
}
