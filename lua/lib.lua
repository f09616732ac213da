-- lib: the head of the flightdeck function library (Redis Functions, FUNCTION LOAD). lua.go
-- puts it in front of acquire, start, heartbeat, complete, fail, cancel and handover, each of
-- which registers one function with register(). Its helpers are defined once, when the library
-- loads; every call only sets the per-call state (keys K, arguments V, the clock) and runs its
-- body. The helpers read the clock, the meta and the fence,
-- and answers tasks: it builds their terminal events and either writes them here, together
-- with the acknowledgement of their stream entries (answer mode "write", for one Redis node),
-- or hands events, acknowledgements and releases back to the caller, who writes them in that
-- order (mode "return", for Redis Cluster, where the streams live in other slots).
--
-- Flight keys (every flight script):
--   K[1] -> ai:flight:meta:{K}     hash: the state machine; the owner's policy is pinned in
--                                     the field policy: "<lease> <runningTTL> <stall>
--                                     <resultTTL> <failureTTL> <maxAttempts>" (ms, and a count)
--   K[2] -> ai:flight:result:{K}   string: the result
--   K[3] -> ai:flight:fence:{K}    string: the last token issued, "<token>", with ":c" or
--                                     ":x" once that token's run is closed (cancelled, or
--                                     expired for good): no result of it is accepted then
--   K[4] -> ai:flight:waiters:{K}  hash: parked entry "<entry id> <task stream>" ->
--                                     "<parked at, Unix ms> <task id>"
--   K[5] -> ai:results:<stage>     (answer mode write) the stage's result stream
--   K[6..] -> the stage's task streams (answer mode write; declared, not required)
--
-- Answer block, V[1..11], of the scripts that answer tasks (acquire, complete, fail, cancel):
--   V[1]  -> mode: none | return | write
--   V[2]  -> result stream MAXLEN ~ (0: no cap)
--   V[3]  -> consumer group of the task streams
--   V[4]  -> parking consumer: parked entries are moved to it (XCLAIM)
--   V[5]  -> the events' finishedAt and consumer fields, JSON-encoded by the caller:
--               '"finishedAt":"<RFC 3339>","consumer":"<name>"'
--   V[6]  -> (complete) the body of the caller's SUCCEEDED event, built by the caller; ""
--   V[7]  -> the caller's task id ("" for in-process callers: no event of their own)
--   V[8]  -> the caller's stream entry "<entry id> <task stream>" ("" for none)
--   V[9]  -> the caller's queuedMs
--   V[10] -> runMs of the events
--   V[11] -> largest result inlined in the events of tasks other than the caller's own
--            (followers, joined and parked tasks, hits), in bytes; the caller's own event in
--            complete is the body V[6], built by the caller with its own, larger cap
-- An event written here (mode write) has the message uuid "<task id>-<Redis time, µs>-<n>".
--
-- Answer tail, appended to the replies of the answering scripts:
--   { nEvents, payloads..., nAcks, entry refs..., nReleased, waiter fields..., park,
--     nWaited, waited ms... }   (waited: how long each answered parked task waited)
--   mode write: the lists are empty (all was done here) and nEvents counts the events written.
--   mode return: the caller appends the payloads to the result stream, then acknowledges the
--   entries, deletes the released waiter fields and moves park (an entry ref, or "") to the
--   parking consumer, in that order; a crash in between leaves the entries pending, and the
--   waiters in place, for the next caller to answer again.
-- Times come from Redis TIME. Tokens are max(previous + 1, now in microseconds).

-- Cost matters here: an owner makes two calls per task. The helpers are defined once, when the
-- library loads; a call allocates only what its path needs (the answer state is made on first
-- use), passes strings rather than numbers to Redis where it can (a number is formatted at
-- each call), and reads its arguments from V by position.

-- FUNCTION_PREFIX is replaced by lua.go with the library's versioned prefix.
local FUNCTION_PREFIX = '{{prefix}}'

-- Per-call state: set by register's wrapper before every call (Redis runs one at a time).
local K, V = nil, nil -- the call's keys and arguments (KEYS and ARGV in the headers)
local nowStr, nowUsStr = '', '' -- Redis TIME in ms and µs, as decimal strings
local nowN, nowUsN = nil, nil -- the same as numbers, parsed on first use (nowMs, nowMicros)
local A = nil -- the answer block as a table, made by initAnswers on first use
local out = nil -- what the call answered, made by answered() on first use
local J = nil -- (complete) the index in V of the first joined task, nil for none
local JAgain = false -- (complete, fail) the caller's and joined tasks may have been answered before (a retry)

local PAD = { '00000', '0000', '000', '00', '0', '' } -- left padding of TIME's microseconds

-- DEFAULT_POLICY stands in for a meta without a pinned policy and no other fallback.
local DEFAULT_POLICY = '5000 120000 0 600000 60000 3'

local function fmt(n) return string.format('%.0f', n) end

-- nowMs and nowMicros return Redis TIME as numbers (parsing costs: only paths that compare
-- or add times call them).
local function nowMs()
  if nowN == nil then nowN = tonumber(nowStr) end
  return nowN
end
local function nowMicros()
  if nowUsN == nil then nowUsN = tonumber(nowUsStr) end
  return nowUsN
end
local function num(v, d) return tonumber(v or '') or d end

-- MAX_TOKEN is the largest fencing token (2^53): Lua compares tokens as doubles, exact up to
-- it, and tokens come from Redis's clock in µs, far below. A larger one is forged: it is
-- never admitted, and a fence or meta holding one is not counted when a token is issued.
local MAX_TOKEN = 9007199254740992

-- loadMeta returns the meta as a table, or nil when there is none.
local function loadMeta()
  local raw = redis.call('HGETALL', K[1])
  if #raw == 0 then return nil end
  local m = {}
  for i = 1, #raw, 2 do m[raw[i]] = raw[i + 1] end
  return m
end

-- readFence returns the last token issued (nil without a fence) and the closing mark of that
-- token's run: '' open, 'c' cancelled, 'x' expired for good.
local function readFence()
  local v = redis.call('GET', K[3])
  if not v then return nil, '' end
  local tok, mark = string.match(v, '^(%d+):?(%a?)$')
  return tonumber(tok or '0') or 0, mark or ''
end

-- writeFence records tok (a number or its decimal string) with its closing mark; the fence
-- lives ttl ms more.
local function writeFence(tok, mark, ttl)
  local v = tok
  if type(tok) == 'number' then v = fmt(tok) end
  if mark ~= '' then v = v .. ':' .. mark end
  redis.call('SET', K[3], v, 'PX', ttl)
end

-- parsePolicy reads a pinned policy string: lease, runningTTL, stall, resultTTL, failureTTL,
-- maxAttempts; nothing when s is not one.
local function parsePolicy(s)
  local l, r, st, res, f, m = string.match(s or '', '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
  if not l then return nil end
  return tonumber(l), tonumber(r), tonumber(st), tonumber(res), tonumber(f), tonumber(m)
end

-- pinned returns the policy pinned in the meta (lease, runningTTL, stall, resultTTL,
-- failureTTL, maxAttempts); for a meta without one, the policy string fallback, else
-- DEFAULT_POLICY.
local function pinned(meta, fallback)
  local l, r, st, res, f, m = parsePolicy(meta.policy)
  if l then return l, r, st, res, f, m end
  l, r, st, res, f, m = parsePolicy(fallback)
  if l then return l, r, st, res, f, m end
  return parsePolicy(DEFAULT_POLICY)
end

-- fenceTTLOf returns how long the fence of meta's flight must live from now, in ms: ttl (the
-- caller's fence TTL) or, when longer, the fence TTL of the policy pinned in meta (twice its
-- runningTTL + failureTTL + resultTTL), so that the fence outlives every run of the flight's
-- own owners, whatever policy the caller that closes it has.
local function fenceTTLOf(meta, ttl)
  local _, r, _, res, f = pinned(meta, nil)
  return math.max(num(ttl, 0), 2 * (r + f + res))
end

-- newToken issues the next token: max(previous + 1, now in µs), previous being the larger of
-- the fence (written when a flight ends) and the current meta's token. The new token is
-- recorded in the meta; the fence records it when its flight ends (complete, fail, cancel,
-- expiry). Until then the time floor keeps every later token above it. It returns the
-- token's decimal string.
local function newToken(meta)
  local prev = 0
  local f = redis.call('GET', K[3])
  if f then prev = tonumber(string.match(f, '^%d+') or '0') or 0 end
  if prev > MAX_TOKEN then prev = 0 end
  if meta then
    local t = tonumber(meta.ownerToken or '')
    if t and t > prev and t <= MAX_TOKEN then prev = t end
  end
  if prev == 0 or nowMicros() > prev then return nowUsStr end
  return fmt(prev + 1)
end

-- fenceAdmits judges a token that finds no meta: 'stale' when it is outside 1..MAX_TOKEN, when
-- a larger token was issued, or when there is no fence and the token is older than fenceTTL
-- (its fence could have expired, so nothing proves it was not superseded); the closing mark
-- 'c' or 'x' when its own run was closed; 'ok' otherwise (the meta was lost: the token's
-- owner may write it back).
local function fenceAdmits(tok, fenceTTL)
  if tok < 1 or tok > MAX_TOKEN then return 'stale' end
  local f, mark = readFence()
  if f == nil then
    if tok < nowMicros() - fenceTTL * 1000 then return 'stale' end
    return 'ok'
  end
  if tok < f then return 'stale' end
  if tok == f and mark ~= '' then return mark end
  return 'ok'
end

-- takeoverDue reports whether a flight's record lets an acquire take it over now: a live
-- flight (PENDING, RUNNING) whose owner's lease lapsed, whose attempt ran out or (RUNNING)
-- whose progress stalled, by its pinned policy; an EXPIRED one always. An owner that asks
-- ("ask" argument of complete, fail and heartbeat) hears LAPSED instead of writing on such a
-- record: it may be a rollback that lost the acquire of the owner that took over (a failover),
-- and a fence kept outside Redis decides before it calls again without asking.
local function takeoverDue(status, heartbeatAt, expireAt, progressAt, policy)
  if status == 'EXPIRED' then return true end
  if status ~= 'PENDING' and status ~= 'RUNNING' then return false end
  local lease, running, stall = pinned({ policy = policy }, nil)
  local now, exp = nowMs(), num(expireAt, 0)
  if now > exp then return true end
  if stall > 0 and status == 'RUNNING' and now - num(progressAt, exp - running) > stall then return true end
  return now - num(heartbeatAt, 0) > lease
end

-- Answers ------------------------------------------------------------------------------------

-- initAnswers returns the answer block (V[1..11]) as a table, made on first use.
local function initAnswers()
  if A == nil then
    A = { mode = V[1], maxlen = V[2], group = V[3], parking = V[4], tailFields = V[5], body = V[6],
      task = V[7], entry = V[8], queued = V[9], run = V[10], inline = num(V[11], 0) }
  end
  return A
end

-- answered returns what the call answered so far, made on first use.
local function answered()
  if out == nil then out = { n = 0, events = {}, acks = {}, released = {}, park = '', waited = {}, caller = '', joined = 0 } end
  return out
end

local function splitRef(ref)
  return string.match(ref, '^(%S+) (%S+)$')
end

-- outcomeOf returns the body of the events of one outcome: every field but taskId, shared and
-- queuedMs. result is the result bytes of a SUCCEEDED flight (inlined when the meta says they
-- are compact JSON no larger than the caller's cap). requestKey, stage and tenant are
-- written as they are: their charsets (validated when the flight was created) need no escape.
local function outcomeOf(meta, status, result, etype, ecode, emsg)
  local a = initAnswers()
  local s = { '"requestKey":"', meta.requestKey or '', '","stage":"', meta.stage or '', '","tenant":"',
    meta.tenant or '', '","status":"', status, '","ownerToken":', meta.ownerToken or '0',
    ',"attempts":', meta.attempts or '0', ',"runMs":', a.run, ',', a.tailFields }
  if status == 'SUCCEEDED' then
    if result and meta.inline == '1' and #result <= a.inline then
      s[#s + 1] = ',"result":'
      s[#s + 1] = result
    end
    s[#s + 1] = ',"resultRef":"'
    s[#s + 1] = K[2]
    s[#s + 1] = '"'
  else
    if (etype or '') ~= '' then s[#s + 1] = ',"errorType":' .. cjson.encode(etype) end
    if (ecode or '') ~= '' then s[#s + 1] = ',"errorCode":' .. cjson.encode(ecode) end
    if (emsg or '') ~= '' then s[#s + 1] = ',"error":' .. cjson.encode(emsg) end
  end
  return table.concat(s)
end

-- failureOf returns the body of the events of a FAILED, CANCELLED or EXPIRED meta.
local function failureOf(meta)
  local st = meta.status
  if st == 'CANCELLED' then
    return outcomeOf(meta, st, nil, 'cancelled', 'cancelled', meta.cancelReason or meta.error)
  end
  return outcomeOf(meta, st, nil, meta.errorType, meta.errorCode, meta.error)
end

-- emit answers one task. Task ids are [A-Za-z0-9._:-] (validated before they reach a
-- script), so they are written as they are.
local function emit(taskId, shared, queued, body)
  local o = answered()
  local p = '{"taskId":"' .. taskId .. '","shared":"' .. shared .. '","queuedMs":' .. queued .. ',' ..
    body .. '}'
  o.n = o.n + 1
  if V[1] == 'write' then
    local id = taskId .. '-' .. nowUsStr .. '-' .. o.n
    if V[2] ~= '0' and V[2] ~= '' then
      redis.call('XADD', K[5], 'MAXLEN', '~', V[2], '*', '_watermill_message_uuid', id, 'payload', p)
    else
      redis.call('XADD', K[5], '*', '_watermill_message_uuid', id, 'payload', p)
    end
  else
    o.events[#o.events + 1] = p
  end
end

-- answeredBefore reports whether the entry ref is no longer pending (mode write: it was
-- acknowledged, so its task was answered); in mode return it cannot tell (false).
local function answeredBefore(ref)
  if V[1] ~= 'write' then return false end
  local id, stream = splitRef(ref)
  if not id then return false end
  local ok, p = pcall(redis.call, 'XPENDING', stream, V[3], id, id, 1)
  return ok and not p[1]
end

-- answer gives the caller's task (when it has one) the event body with shared callerShared, and
-- every joined task (complete: the caller's in-process followers, V[J..]) and parked task the
-- body others (body when nil) with shared "follower" (or "owner" for the entry ownerRef, when
-- given: the last owner's task, parked by the call that ends its attempt), then acknowledges
-- all their entries and releases the parked ones.
local function answer(body, callerShared, ownerRef, others)
  local o = answered()
  local task, entry = V[7], V[8]
  others = others or body
  -- A retried owner call (ALREADY) whose task was answered by the first call (its entry is
  -- acknowledged) answers it no more.
  if task ~= '' and not (JAgain and entry ~= '' and answeredBefore(entry)) then
    emit(task, callerShared, V[9], body)
    o.caller = callerShared
  end
  if entry ~= '' then o.acks[#o.acks + 1] = entry end
  -- A joined task's entry may be in the waiters too (the previous owner's task, recorded by a
  -- takeover, joined the new owner in its consumer): it is answered once, as joined.
  local joined = nil
  if J then
    joined = {}
    for i = J, #V - 2, 3 do
      local ref = V[i + 1]
      joined[ref] = true
      if not (JAgain and answeredBefore(ref)) then
        emit(V[i], 'follower', V[i + 2], others)
        o.acks[#o.acks + 1] = ref
      end
      o.joined = o.joined + 1
    end
  end
  local w = redis.call('HGETALL', K[4])
  for i = 1, #w, 2 do
    local field = w[i]
    if field ~= entry and not (joined and joined[field]) then
      local at, taskId = string.match(w[i + 1], '^(%d+) (.+)$')
      if taskId then
        local shared = 'follower'
        if ownerRef and ownerRef ~= '' and field == ownerRef then shared = 'owner' end
        emit(taskId, shared, '0', others)
        o.waited[#o.waited + 1] = nowMs() - (tonumber(at) or nowMs())
      end
      o.acks[#o.acks + 1] = field
    end
    o.released[#o.released + 1] = field
  end
end

-- park moves the caller's entry to the parking consumer (mode write) or asks the caller to.
local function park()
  local entry = V[8]
  if entry == '' then return end
  if V[1] == 'write' then
    local id, stream = splitRef(entry)
    if id then redis.call('XCLAIM', stream, V[3], V[4], 0, id, 'JUSTID') end
  else
    answered().park = entry
  end
end

-- ackAll acknowledges the answered entries, one XACK per stream (mode write).
local function ackAll(acks)
  if #acks == 1 then
    local id, stream = splitRef(acks[1])
    if id then redis.call('XACK', stream, V[3], id) end
    return
  end
  local byStream, order = {}, {}
  for _, ref in ipairs(acks) do
    local id, stream = splitRef(ref)
    if id then
      if not byStream[stream] then byStream[stream] = {}; order[#order + 1] = stream end
      local ids = byStream[stream]
      ids[#ids + 1] = id
    end
  end
  for _, stream in ipairs(order) do
    local ids = byStream[stream]
    for i = 1, #ids, 100 do
      redis.call('XACK', stream, V[3], unpack(ids, i, math.min(i + 99, #ids)))
    end
  end
end

-- tail finishes an answering script: in mode write it acknowledges the entries and deletes the
-- released waiter fields; it appends the answer tail to reply and returns it.
local function tail(reply)
  local o = out
  local n = #reply
  if o == nil then
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4], reply[n + 5] = 0, 0, 0, '', 0
    return reply
  end
  if V[1] == 'write' then
    if #o.acks > 0 then ackAll(o.acks) end
    local rel = o.released
    for i = 1, #rel, 100 do
      redis.call('HDEL', K[4], unpack(rel, i, math.min(i + 99, #rel)))
    end
    reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4] = o.n, 0, 0, ''
  else
    reply[#reply + 1] = o.n
    for _, p in ipairs(o.events) do reply[#reply + 1] = p end
    reply[#reply + 1] = #o.acks
    for _, r in ipairs(o.acks) do reply[#reply + 1] = r end
    reply[#reply + 1] = #o.released
    for _, r in ipairs(o.released) do reply[#reply + 1] = r end
    reply[#reply + 1] = o.park
  end
  reply[#reply + 1] = #o.waited
  for _, ms in ipairs(o.waited) do reply[#reply + 1] = ms end
  return reply
end

-- settleCaller answers a caller whose token is not the flight's: from the flight's outcome
-- when it has one, else by parking the caller's task on it (the current owner answers it).
-- It returns 'answered' or 'parked'.
local function settleCaller(meta)
  local _, _, _, _, _, maxA = pinned(meta, nil)
  local entry = V[8]
  if V[1] == 'write' and entry ~= '' then
    -- An entry no longer pending was answered by whoever acknowledged it (the owner that
    -- took over): a zombie writes nothing more.
    local id, stream = splitRef(entry)
    local ok, p = pcall(redis.call, 'XPENDING', stream, V[3], id, id, 1)
    if ok and not p[1] then return 'answered' end
  end
  local st = meta.status
  local attempts = num(meta.attempts, 0)
  if st == 'SUCCEEDED' then
    local result = redis.call('GET', K[2])
    if result then
      answer(outcomeOf(meta, st, result), 'follower')
      return 'answered'
    end
  elseif st == 'CANCELLED' or (st == 'FAILED' and meta.free ~= '1' and (meta.retryable ~= '1' or attempts >= maxA))
    or (st == 'EXPIRED' and attempts >= maxA) then
    answer(failureOf(meta), 'follower')
    return 'answered'
  end
  if entry ~= '' then
    if redis.call('HEXISTS', K[4], entry) == 0 then
      redis.call('HSET', K[4], entry, nowStr .. ' ' .. V[7])
      local ttl = redis.call('PTTL', K[1])
      if ttl > 0 then redis.call('PEXPIRE', K[4], ttl) end
    end
    park()
  end
  return 'parked'
end

-- register registers body as the library function <prefix><name> (the prefix carries the
-- library's version, so that consumers of two versions can run side by side). Before each call
-- it sets the call's keys, arguments and clock, and clears the answer state.
local function register(name, body)
  redis.register_function(FUNCTION_PREFIX .. name, function(keys, args)
    K, V, A, out, nowN, nowUsN, J, JAgain = keys, args, nil, nil, nil, nil, nil, false
    local clock = redis.call('TIME')
    local sec, us = clock[1], clock[2]
    us = PAD[#us] .. us
    nowUsStr = sec .. us
    nowStr = sec .. string.sub(us, 1, 3)
    return body()
  end)
end
