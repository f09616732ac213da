-- limit_take, limit_settle: a named limiter shared by the fleet (DESIGN.md section 10). It
-- holds a request bucket and a token bucket (token buckets refilled continuously at the
-- per-minute rate, each holding at most burst's worth), a set of running calls whose entries
-- expire, a hold set by a provider's 429, an adaptive factor on the rates, and per-tenant
-- share buckets when fairness is on.
--
-- KEYS[1] -> <prefix>limit:{<name>}          hash: r rt (requests: level, updated at), t tt
--                                               (tokens), hold (ms), f (factor), W (sum of
--                                               the active tenants' weights) and per tenant
--                                               r:<t> rt:<t> t:<t> tt:<t> q:<t> w:<t>
-- KEYS[2] -> <prefix>limit:{<name>}:running  zset: reservation id -> expires at (ms)
-- KEYS[3] -> <prefix>limit:{<name>}:tenants  zset: tenant -> last asked at (ms)
--
-- The limits block, V[1..6], of both functions:
--   V[1] requests per minute (0: none), V[2] tokens per minute (0: none), V[3] concurrent
--   calls (0: none), V[4] burst in ms (each bucket holds this much of its rate, at least one
--   request and one call's tokens), V[5] "fair" or "none", V[6] idle TTL of the keys in ms
-- limit_take: V[7] tenant, V[8] tenant weight, V[9] tokens reserved, V[10] reservation id,
--   V[11] reservation TTL in ms (a call that never settles frees its slot then)
--   Output: { 1, 0, '' } taken, or { 0, waitMs, why } with why held | concurrency | requests |
--   tokens | share (the tenant's fair share is spent)
-- limit_settle: V[7] tenant, V[8] reservation id ('' for none), V[9] tokens reserved,
--   V[10] tokens used (-1: unknown, the reservation stands), V[11] outcome ok | limited |
--   error, V[12] hold ms (limited: the provider's Retry-After, 0 for none), V[13] requests
--   the provider says remain (-1: not said), V[14] tokens the provider says remain (-1)
--   Output: { factor in thousandths }

local TENANT_WINDOW = 10000 -- ms: a tenant that asked this recently shares the limiter
local MIN_FACTOR, DOWN, UP = 0.1, 0.5, 0.05

-- limRate is a per-minute limit scaled by the factor and a share, per ms.
local function limRate(limit, f, share) return limit * f * share / 60000 end

-- limCap is what a bucket of the rate holds: burst ms of it, and at least floor.
local function limCap(rate, floor) return math.max(rate * num(V[4], 10000), floor) end

-- limLevel returns the bucket's level refilled up to now, and its capacity.
local function limLevel(h, lf, af, rate, floor)
  local cap = limCap(rate, floor)
  local level, at = num(h[lf], cap), num(h[af], nowMs())
  return math.min(cap, level + (nowMs() - at) * rate), cap
end

-- limWait is how long until a bucket at level holds need.
local function limWait(level, need, rate)
  if level >= need then return 0 end
  if rate <= 0 then return 60000 end
  return math.ceil((need - level) / rate)
end

-- limFields reads the hash fields of the limiter and of tenant t.
local function limFields(t)
  local names = { 'r', 'rt', 't', 'tt', 'hold', 'f', 'W', 'r:' .. t, 'rt:' .. t, 't:' .. t, 'tt:' .. t, 'q:' .. t }
  local vals = redis.call('HMGET', K[1], unpack(names))
  local h = {}
  for i, n in ipairs(names) do h[n] = vals[i] end
  return h
end

-- limPrune lets tenants that stopped asking go (at most 16 a call), their weights with them.
local function limPrune()
  local gone = redis.call('ZRANGEBYSCORE', K[3], '-inf', nowMs() - TENANT_WINDOW, 'LIMIT', 0, 16)
  for _, t in ipairs(gone) do
    local w = num(redis.call('HGET', K[1], 'w:' .. t), 1)
    redis.call('HINCRBYFLOAT', K[1], 'W', -w)
    redis.call('HDEL', K[1], 'w:' .. t, 'r:' .. t, 'rt:' .. t, 't:' .. t, 'tt:' .. t, 'q:' .. t)
    redis.call('ZREM', K[3], t)
  end
end

-- limJoin marks tenant t active with weight w and returns its share of the limiter.
local function limJoin(t, w)
  limPrune()
  if redis.call('ZADD', K[3], nowMs(), t) == 1 then
    redis.call('HSET', K[1], 'w:' .. t, w)
    redis.call('HINCRBYFLOAT', K[1], 'W', w)
  end
  local total = num(redis.call('HGET', K[1], 'W'), w)
  if total <= 0 then return 1 end
  return math.min(1, w / total)
end

local function limExpire()
  for i = 1, 3 do redis.call('PEXPIRE', K[i], V[6]) end
end

register('limit_take', function()
  local t, w, need, id, ttl = V[7], num(V[8], 1), num(V[9], 0), V[10], num(V[11], 60000)
  local rpm, tpm, conc = num(V[1], 0), num(V[2], 0), num(V[3], 0)
  local h = limFields(t)
  local now = nowMs()
  local function refuse(wait, why)
    limExpire()
    return { 0, math.max(1, math.floor(wait)), why }
  end
  local hold = num(h.hold, 0)
  if hold > now then return refuse(hold - now, 'held') end
  if conc > 0 then
    redis.call('ZREMRANGEBYSCORE', K[2], '-inf', now)
    if redis.call('ZCARD', K[2]) >= conc then
      local first = redis.call('ZRANGE', K[2], 0, 0, 'WITHSCORES')
      return refuse(math.min(250, num(first[2], now + 250) - now), 'concurrency')
    end
  end
  local f = num(h.f, 1)
  local share = 1
  if V[5] == 'fair' then share = limJoin(t, w) end
  local rr, tr = limRate(rpm, f, 1), limRate(tpm, f, 1)
  local srr, str = limRate(rpm, f, share), limRate(tpm, f, share)
  local r, rc = 0, 0
  local tk, tc = 0, 0
  local sr, st = 0, 0
  local wait, why = 0, ''
  local function consider(ms, reason)
    if ms > wait then wait, why = ms, reason end
  end
  if rpm > 0 then
    r = limLevel(h, 'r', 'rt', rr, 1)
    consider(limWait(r, 1, rr), 'requests')
    if V[5] == 'fair' then
      sr = limLevel(h, 'r:' .. t, 'rt:' .. t, srr, 1)
      consider(limWait(sr, 1, srr), 'share')
    end
  end
  if tpm > 0 then
    -- A call larger than the bucket passes once the bucket is full (it leaves a debt).
    tk, tc = limLevel(h, 't', 'tt', tr, 0)
    consider(limWait(tk, math.min(need, tc), tr), 'tokens')
    if V[5] == 'fair' then
      local scap
      st, scap = limLevel(h, 't:' .. t, 'tt:' .. t, str, 0)
      consider(limWait(st, math.min(need, scap), str), 'share')
    end
  end
  if wait > 0 then
    -- Tokens come back when calls settle for less than they reserved: such a wait is checked
    -- again within a second.
    if why == 'tokens' or why == 'share' and rpm == 0 then wait = math.min(wait, 1000) end
    -- The tenant's waiting calls queue behind each other at its share of the request rate,
    -- so that they come back spread out rather than all at once.
    local step = 0
    if srr > 0 then step = 1 / srr end
    local q = math.max(num(h['q:' .. t], now), now) + step
    redis.call('HSET', K[1], 'q:' .. t, fmt(q))
    return refuse(math.max(wait, q - now), why)
  end
  local set = {}
  if rpm > 0 then
    set[#set + 1] = 'r'; set[#set + 1] = tostring(r - 1); set[#set + 1] = 'rt'; set[#set + 1] = nowStr
    if V[5] == 'fair' then
      set[#set + 1] = 'r:' .. t; set[#set + 1] = tostring(sr - 1); set[#set + 1] = 'rt:' .. t; set[#set + 1] = nowStr
    end
  end
  if tpm > 0 then
    set[#set + 1] = 't'; set[#set + 1] = tostring(tk - need); set[#set + 1] = 'tt'; set[#set + 1] = nowStr
    if V[5] == 'fair' then
      set[#set + 1] = 't:' .. t; set[#set + 1] = tostring(st - need); set[#set + 1] = 'tt:' .. t; set[#set + 1] = nowStr
    end
  end
  if #set > 0 then redis.call('HSET', K[1], unpack(set)) end
  if conc > 0 and id ~= '' then redis.call('ZADD', K[2], now + ttl, id) end
  limExpire()
  return { 1, 0, '' }
end)

register('limit_settle', function()
  local t, id, reserved, used = V[7], V[8], num(V[9], 0), num(V[10], -1)
  local outcome, holdMs, remR, remT = V[11], num(V[12], 0), num(V[13], -1), num(V[14], -1)
  local rpm, tpm = num(V[1], 0), num(V[2], 0)
  if id ~= '' then redis.call('ZREM', K[2], id) end
  local h = limFields(t)
  local f = num(h.f, 1)
  local set = {}
  local function put(name, v) set[#set + 1] = name; set[#set + 1] = tostring(v) end
  if tpm > 0 and (used >= 0 or remT >= 0) then
    local tr = limRate(tpm, f, 1)
    local level = limLevel(h, 't', 'tt', tr, 0)
    if used >= 0 then level = level + reserved - used end
    if remT >= 0 then level = math.min(level, remT) end
    put('t', level); put('tt', nowStr)
    if used >= 0 and h['tt:' .. t] then
      local share = math.min(1, num(redis.call('HGET', K[1], 'w:' .. t), 1) / math.max(num(h.W, 1), 1e-9))
      local str = limRate(tpm, f, share)
      put('t:' .. t, limLevel(h, 't:' .. t, 'tt:' .. t, str, 0) + reserved - used); put('tt:' .. t, nowStr)
    end
  end
  if rpm > 0 and (remR >= 0 or outcome == 'limited') then
    local level = limLevel(h, 'r', 'rt', limRate(rpm, f, 1), 1)
    if remR >= 0 then level = math.min(level, remR) end
    if outcome == 'limited' then level = math.min(level, 0) end
    put('r', level); put('rt', nowStr)
  end
  if outcome == 'limited' then
    f = math.max(MIN_FACTOR, f * DOWN)
    if holdMs <= 0 then holdMs = 1000 end
    put('hold', fmt(math.max(num(h.hold, 0), nowMs() + holdMs)))
  elseif outcome == 'ok' and f < 1 then
    f = math.min(1, f + UP)
  end
  put('f', f)
  redis.call('HSET', K[1], unpack(set))
  limExpire()
  return { math.floor(f * 1000 + 0.5) }
end)
