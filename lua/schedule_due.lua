-- schedule_due: take the due tasks of a stage's scheduled set, and of the set a version
-- without the index filled, for appending to its task stream. The caller appends each to the
-- stream, then calls schedule_done with the members.
--
-- KEYS[1] -> ai:scheduled:{<stage>}:due        zset: scheduled id -> due, Unix ms
-- KEYS[2] -> ai:scheduled:{<stage>}:appending  zset: scheduled id -> taken at, Unix ms
-- KEYS[3] -> ai:scheduled:{<stage>}:tasks      hash: scheduled id -> "<request key> <payload>"
-- KEYS[4] -> ai:scheduled:{<stage>}            zset: payload -> due (versions without the index)
-- KEYS[5] -> ai:scheduled:{<stage>}:moving     zset: payload -> taken at (the same)
-- ARGV[1] -> most members to take
-- ARGV[2] -> ms after which a member still in a moving set was left there by a caller that
--            died before removing it: it is put back as due now (appended again at least once)
-- ARGV[3] -> ms: members due further ahead than this are taken now too (past the stage's
--            schedule horizon: appended for the consumer to refuse); 0 takes none early
--
-- Output: { member, payload, request key, ... } for each member taken (moved to its moving
-- set, scored with Redis time): a scheduled id with its payload and key ("" and "" when its
-- payload is missing: nothing to append), or a payload member with itself and "".

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local limit = tonumber(ARGV[1])
local ahead = tonumber(ARGV[3])
local out = {}
local taken = 0

-- take moves up to the members left of the limit from set to moving, and adds them to out.
local function take(set, moving)
  local stuck = redis.call('ZRANGEBYSCORE', moving, '-inf', now - tonumber(ARGV[2]), 'LIMIT', 0, limit)
  for _, m in ipairs(stuck) do
    redis.call('ZREM', moving, m)
    redis.call('ZADD', set, 'NX', now, m) -- a newer schedule of the same task keeps its time
  end
  if taken >= limit then return end
  local due = redis.call('ZRANGEBYSCORE', set, '-inf', now, 'LIMIT', 0, limit - taken)
  if ahead > 0 and #due < limit - taken then
    local far = redis.call('ZRANGEBYSCORE', set, '(' .. (now + ahead), '+inf', 'LIMIT', 0, limit - taken - #due)
    for _, m in ipairs(far) do due[#due + 1] = m end
  end
  for _, m in ipairs(due) do
    redis.call('ZREM', set, m)
    redis.call('ZADD', moving, now, m)
    local payload, key = m, ''
    if string.sub(m, 1, 1) == '#' then
      local v = redis.call('HMGET', KEYS[3], m)[1]
      payload = ''
      if v then
        local sp = string.find(v, ' ', 1, true)
        if sp then key, payload = string.sub(v, 1, sp - 1), string.sub(v, sp + 1) end
      end
    end
    out[#out + 1] = m
    out[#out + 1] = payload
    out[#out + 1] = key
    taken = taken + 1
  end
end

take(KEYS[1], KEYS[2])
take(KEYS[4], KEYS[5])
return out
