-- limit_take, limit_settle: a named limiter shared by the fleet (DESIGN.md section 10). It
-- holds a request bucket and a token bucket (token buckets refilled continuously at the
-- per-minute rate, each holding at most burst's worth), a set of running calls whose entries
-- expire, a hold set by a provider's 429, an adaptive factor on the rates, and each active
-- tenant's recent use when fairness is on.
--
-- KEYS[1] -> <prefix>limit:{<name>}          hash: r rt (requests: level, updated at), t tt
--                                               (tokens), hold (ms), f (factor), W (sum of
--                                               the active tenants' weights) and per tenant
--                                               u:<t> v:<t> ut:<t> (requests and tokens used,
--                                               decayed over a minute, and when), q:<t> (its
--                                               queue of waiting calls; q without fairness),
--                                               w:<t> (its weight while active)
-- KEYS[2] -> <prefix>limit:{<name>}:running  zset: reservation id -> expires at (ms)
-- KEYS[3] -> <prefix>limit:{<name>}:tenants  zset: tenant -> last asked at (ms) while active,
--                                               minus that once it left (its use is kept)
--
-- The limits block, V[1..6], of both functions:
--   V[1] requests per minute (0: none), V[2] tokens per minute (0: none), V[3] concurrent
--   calls (0: none), V[4] burst in ms (each bucket holds this much of its rate, at least one
--   request and one call's tokens), V[5] "fair" or "none", V[6] idle TTL of the keys in ms
-- limit_take: V[7] tenant, V[8] tenant weight, V[9] tokens reserved, V[10] reservation id,
--   V[11] reservation TTL in ms (a call that never settles frees its slot then)
--   Output: { 1, 0, '' } taken, or { 0, waitMs, why } with why held | concurrency | requests |
--   tokens | share (the tenant used its fair share of the last minute while others wait)
-- limit_settle: V[7] tenant, V[8] reservation id ('' for none), V[9] tokens reserved,
--   V[10] tokens used (-1: unknown, the reservation stands), V[11] outcome ok | limited |
--   error, V[12] hold ms (limited: the provider's Retry-After, 0 for none), V[13] requests
--   the provider says remain (-1: not said), V[14] tokens the provider says remain (-1)
--   Output: { factor in thousandths }

local TENANT_WINDOW = 5000 -- ms: a tenant that asked this recently shares the limiter
local USE_WINDOW = 60000 -- ms: the time constant of a tenant's decayed use
local USE_KEPT = 300000 -- ms: how long a tenant that left is remembered, its use with it
local MAX_HOLD = 60000 -- ms: the longest hold a 429 sets
local MAX_QUEUE = 60000 -- ms: the longest a tenant's queue of waiting calls reaches ahead
local MIN_FACTOR, DOWN, UP = 0.1, 0.5, 0.05

-- limRate is a per-minute limit scaled by the factor, per ms.
local function limRate(limit, f) return limit * f / 60000 end

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

-- limDecay is v recorded at at, decayed to now.
local function limDecay(v, at) return num(v, 0) * math.exp(-(nowMs() - num(at, nowMs())) / USE_WINDOW) end

-- limCost is what the fair shares count of a tenant's u (requests) and v (tokens) fields.
local function limCost(u, v)
  if num(V[1], 0) == 0 then return v end
  return u
end

-- limFields reads the hash fields of the limiter and of tenant t.
local function limFields(t)
  local names = { 'r', 'rt', 't', 'tt', 'hold', 'f', 'W', 'U', 'Ut', 'u:' .. t, 'v:' .. t, 'ut:' .. t, 'q:' .. t, 'q' }
  local vals = redis.call('HMGET', K[1], unpack(names))
  local h = {}
  for i, n in ipairs(names) do h[n] = vals[i] end
  return h
end

-- limPrune lets tenants that stopped asking go from the active ones (at most 16 a call):
-- their weights and their use leave the sums W and U. Their own use is kept, decaying, for
-- USE_KEPT (a score of minus the time they last asked marks them), then forgotten.
local function limPrune()
  local now = nowMs()
  local gone = redis.call('ZRANGEBYSCORE', K[3], 0, now - TENANT_WINDOW, 'LIMIT', 0, 16)
  if #gone > 0 then
    local sums = redis.call('HMGET', K[1], 'U', 'Ut', 'W')
    local total, weights = limDecay(sums[1], sums[2]), num(sums[3], 0)
    for _, t in ipairs(gone) do
      local v = redis.call('HMGET', K[1], 'w:' .. t, 'u:' .. t, 'v:' .. t, 'ut:' .. t)
      total = total - limDecay(limCost(v[2], v[3]), v[4])
      weights = weights - num(v[1], 1)
      redis.call('ZADD', K[3], -num(redis.call('ZSCORE', K[3], t), now), t)
      redis.call('HDEL', K[1], 'w:' .. t, 'q:' .. t)
    end
    redis.call('HSET', K[1], 'U', tostring(math.max(0, total)), 'Ut', nowStr, 'W', tostring(math.max(0, weights)))
  end
  local old = redis.call('ZRANGEBYSCORE', K[3], -(now - USE_KEPT), '(0', 'LIMIT', 0, 16)
  for _, t in ipairs(old) do
    redis.call('HDEL', K[1], 'u:' .. t, 'v:' .. t, 'ut:' .. t)
    redis.call('ZREM', K[3], t)
  end
end

-- limJoin marks tenant t active with weight w: a tenant that was not adds its weight and its
-- use, as far as it is remembered, to the sums.
local function limJoin(t, w)
  limPrune()
  local was = num(redis.call('ZSCORE', K[3], t), -1)
  redis.call('ZADD', K[3], nowMs(), t)
  if was > 0 then return end
  local v = redis.call('HMGET', K[1], 'U', 'Ut', 'u:' .. t, 'v:' .. t, 'ut:' .. t)
  local total = limDecay(v[1], v[2]) + limDecay(limCost(v[3], v[4]), v[5])
  redis.call('HSET', K[1], 'w:' .. t, w, 'U', tostring(total), 'Ut', nowStr)
  redis.call('HINCRBYFLOAT', K[1], 'W', w)
end

local function limExpire()
  for i = 1, 3 do redis.call('PEXPIRE', K[i], V[6]) end
end

-- limUse returns tenant t's requests and tokens used, decayed to now.
local function limUse(h, t)
  return limDecay(h['u:' .. t], h['ut:' .. t]), limDecay(h['v:' .. t], h['ut:' .. t])
end

-- limTotal returns the active tenants' use together, decayed to now.
local function limTotal(h) return limDecay(h.U, h.Ut) end

register('limit_take', function()
  local t, w, need, id, ttl = V[7], num(V[8], 1), num(V[9], 0), V[10], num(V[11], 60000)
  local rpm, tpm, conc = num(V[1], 0), num(V[2], 0), num(V[3], 0)
  local fair = V[5] == 'fair'
  if fair then limJoin(t, w) end
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
  local rr, tr = limRate(rpm, f), limRate(tpm, f)
  local r, tk, tc = 0, 0, 0
  local ur, ut = limUse(h, t)
  local total = limTotal(h)
  local wait, why = 0, ''
  local function consider(ms, reason)
    if ms > wait then wait, why = ms, reason end
  end
  -- Under fairness a heavy tenant, one whose use of the last minute per weight is above the
  -- active tenants' average, leaves the upper half of each bucket to the others: a tenant
  -- that comes later, or uses less, is served first, until the uses even out. Alone, a
  -- tenant that spent more than a burst of late is heavy too: it keeps the limiter's rate
  -- but leaves half the burst for whoever comes next. The floor never stops a call when the
  -- bucket is full.
  local heavy = false
  local cost, mine = 1, ur
  if rpm == 0 then cost, mine = need, ut end
  if fair then
    local weights = num(h.W, w)
    if weights > w then
      heavy = mine / w > total / weights
    else
      heavy = (rpm > 0 and ur > limCap(rr, 1)) or (rpm == 0 and tpm > 0 and ut > limCap(tr, 0))
    end
  end
  if rpm > 0 then
    local rc
    r, rc = limLevel(h, 'r', 'rt', rr, 1)
    local floor = 0
    if heavy then floor = math.max(0, math.min(rc / 2, rc - 1)) end
    consider(limWait(r - floor, 1, rr), 'requests')
  end
  if tpm > 0 then
    -- A call larger than the bucket passes once the bucket is full (it leaves a debt).
    tk, tc = limLevel(h, 't', 'tt', tr, 0)
    local floor = 0
    if heavy then floor = tc / 2 end
    consider(limWait(tk - floor, math.min(need, tc - floor), tr), 'tokens')
    -- Tokens come back when calls settle for less than they reserved: such a wait is
    -- checked again within a second.
    if why == 'tokens' then wait = math.min(wait, 1000) end
  end
  if heavy and wait > 0 then why = 'share' end
  if wait > 0 then
    -- The tenant's waiting calls (all calls' without fairness) queue behind each other at
    -- the request rate, so that they come back spread out rather than all at once, at most
    -- MAX_QUEUE ahead: past it they ask again and queue anew.
    local qf = 'q'
    if fair then qf = 'q:' .. t end
    local step = 0
    if rr > 0 then step = 1 / rr end
    local q = math.min(math.max(num(h[qf], now), now) + step, now + MAX_QUEUE)
    redis.call('HSET', K[1], qf, fmt(q))
    return refuse(math.max(wait, q - now), why)
  end
  local set = {}
  local function put(name, v) set[#set + 1] = name; set[#set + 1] = tostring(v) end
  if rpm > 0 then put('r', r - 1); put('rt', nowStr) end
  if tpm > 0 then put('t', tk - need); put('tt', nowStr) end
  if fair then
    put('u:' .. t, ur + 1); put('v:' .. t, ut + need); put('ut:' .. t, nowStr)
    put('U', total + cost); put('Ut', nowStr)
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
    local tr = limRate(tpm, f)
    local level = limLevel(h, 't', 'tt', tr, 0)
    if used >= 0 then level = level + reserved - used end
    if remT >= 0 then level = math.min(level, remT) end
    put('t', level); put('tt', nowStr)
    if used >= 0 and h['ut:' .. t] then
      local ur, ut = limUse(h, t)
      put('u:' .. t, ur); put('v:' .. t, math.max(0, ut + used - reserved)); put('ut:' .. t, nowStr)
      if rpm == 0 and num(redis.call('ZSCORE', K[3], t), 0) > 0 then -- the shares count tokens
        put('U', math.max(0, limTotal(h) + used - reserved)); put('Ut', nowStr)
      end
    end
  end
  if rpm > 0 and (remR >= 0 or outcome == 'limited') then
    local level = limLevel(h, 'r', 'rt', limRate(rpm, f), 1)
    if remR >= 0 then level = math.min(level, remR) end
    if outcome == 'limited' then level = math.min(level, 0) end
    put('r', level); put('rt', nowStr)
  end
  if outcome == 'limited' then
    -- One hold lowers the rates once, however many calls meet it; a hold lasts at most
    -- MAX_HOLD, whatever the provider's Retry-After says.
    local held = num(h.hold, 0)
    if held <= nowMs() then f = math.max(MIN_FACTOR, f * DOWN) end
    if holdMs <= 0 then holdMs = 1000 end
    put('hold', fmt(math.max(held, nowMs() + math.min(holdMs, MAX_HOLD))))
  elseif outcome == 'ok' and f < 1 then
    f = math.min(1, f + UP)
  end
  put('f', f)
  redis.call('HSET', K[1], unpack(set))
  limExpire()
  return { math.floor(f * 1000 + 0.5) }
end)
