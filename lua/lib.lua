-- lib: the prelude of every flight script. lua.go puts this file in front of acquire, start,
-- heartbeat, complete, fail, cancel and handover. It reads the clock, the meta and the fence,
-- and answers tasks: it builds their terminal events and either writes them here, together
-- with the acknowledgement of their stream entries (answer mode "write", for one Redis node),
-- or hands events, acknowledgements and releases back to the caller, who writes them in that
-- order (mode "return", for Redis Cluster, where the streams live in other slots).
--
-- Flight keys (every flight script):
--   KEYS[1] -> ai:flight:meta:{K}     hash: the state machine
--   KEYS[2] -> ai:flight:result:{K}   string: the result
--   KEYS[3] -> ai:flight:fence:{K}    string: the last token issued, "<token>", with ":c" or
--                                     ":x" once that token's run is closed (cancelled, or
--                                     expired for good): no result of it is accepted then
--   KEYS[4] -> ai:flight:waiters:{K}  hash: parked entry "<entry id> <task stream>" ->
--                                     "<parked at, Unix ms> <task id>"
--   KEYS[5] -> ai:results:<stage>     (answer mode write) the stage's result stream
--   KEYS[6..] -> the stage's task streams (answer mode write; declared, not required)
--
-- Answer block, ARGV[1..12], of the scripts that answer tasks (acquire, complete, fail, cancel):
--   ARGV[1]  -> mode: none | return | write
--   ARGV[2]  -> prefix of the event entries' _watermill_message_uuid ("<prefix>-<n>")
--   ARGV[3]  -> result stream MAXLEN ~ (0: no cap)
--   ARGV[4]  -> consumer group of the task streams
--   ARGV[5]  -> parking consumer: parked entries are moved to it (XCLAIM)
--   ARGV[6]  -> finishedAt of the events (RFC 3339)
--   ARGV[7]  -> the answering consumer (the events' consumer field)
--   ARGV[8]  -> the caller's task id ("" for in-process callers: no event of their own)
--   ARGV[9]  -> the caller's stream entry "<entry id> <task stream>" ("" for none)
--   ARGV[10] -> the caller's queuedMs
--   ARGV[11] -> runMs of the events
--   ARGV[12] -> largest result inlined in events (bytes)
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

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local nowUs = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

local function fmt(n) return string.format('%.0f', n) end
local function num(v, d) return tonumber(v or '') or d end

-- loadMeta returns the meta as a table, or nil when there is none.
local function loadMeta()
  local raw = redis.call('HGETALL', KEYS[1])
  if #raw == 0 then return nil end
  local m = {}
  for i = 1, #raw, 2 do m[raw[i]] = raw[i + 1] end
  return m
end

-- readFence returns the last token issued (nil without a fence) and the closing mark of that
-- token's run: '' open, 'c' cancelled, 'x' expired for good.
local function readFence()
  local v = redis.call('GET', KEYS[3])
  if not v then return nil, '' end
  local tok, mark = string.match(v, '^(%d+):?(%a?)$')
  return tonumber(tok or '0') or 0, mark or ''
end

-- writeFence records tok with its closing mark; the fence lives at least ttl ms more.
local function writeFence(tok, mark, ttl)
  local left = redis.call('PTTL', KEYS[3])
  if left > ttl then ttl = left end
  local v = fmt(tok)
  if mark ~= '' then v = v .. ':' .. mark end
  redis.call('SET', KEYS[3], v, 'PX', ttl)
end

-- newToken issues the next token: max(previous + 1, now in µs), recorded open in the fence.
local function newToken(fenceTTL)
  local prev = readFence() or 0
  local tok = nowUs
  if tok <= prev then tok = prev + 1 end
  writeFence(tok, '', fenceTTL)
  return tok
end

-- fenceAdmits judges a token that finds no meta: 'stale' when a larger token was issued, or
-- when there is no fence and the token is older than fenceTTL (its fence could have expired,
-- so nothing proves it was not superseded); the closing mark 'c' or 'x' when its own run was
-- closed; 'ok' otherwise (the meta was lost: the token's owner may write it back).
local function fenceAdmits(tok, fenceTTL)
  local f, mark = readFence()
  if f == nil then
    if tok < nowUs - fenceTTL * 1000 then return 'stale' end
    return 'ok'
  end
  if tok < f then return 'stale' end
  if tok == f and mark ~= '' then return mark end
  return 'ok'
end

-- Answers ------------------------------------------------------------------------------------

local A = nil
local out = { n = 0, events = {}, acks = {}, released = {}, park = '', waited = {} }

-- initAnswers reads the answer block (ARGV[1..12]).
local function initAnswers()
  A = { mode = ARGV[1], uuid = ARGV[2], maxlen = num(ARGV[3], 0), group = ARGV[4],
    parking = ARGV[5], at = ARGV[6], consumer = ARGV[7], task = ARGV[8], entry = ARGV[9],
    queued = num(ARGV[10], 0), run = num(ARGV[11], 0), inline = num(ARGV[12], 0) }
end

local function splitRef(ref)
  return string.match(ref, '^(%S+) (%S+)$')
end

-- outcomeOf returns the body of the events of one outcome: every field but taskId, shared and
-- queuedMs. result is the result bytes of a SUCCEEDED flight (inlined when the meta says they
-- are compact JSON no larger than the caller's cap).
local function outcomeOf(meta, status, result, etype, ecode, emsg)
  local s = '"requestKey":' .. cjson.encode(meta.requestKey or '') ..
    ',"stage":' .. cjson.encode(meta.stage or '') ..
    ',"tenant":' .. cjson.encode(meta.tenant or '') ..
    ',"status":"' .. status .. '","ownerToken":' .. fmt(num(meta.ownerToken, 0)) ..
    ',"attempts":' .. fmt(num(meta.attempts, 0)) .. ',"runMs":' .. fmt(A.run) ..
    ',"finishedAt":' .. cjson.encode(A.at) .. ',"consumer":' .. cjson.encode(A.consumer)
  if status == 'SUCCEEDED' then
    if result and meta.inline == '1' and #result <= A.inline then s = s .. ',"result":' .. result end
    s = s .. ',"resultRef":' .. cjson.encode(KEYS[2])
  else
    if (etype or '') ~= '' then s = s .. ',"errorType":' .. cjson.encode(etype) end
    if (ecode or '') ~= '' then s = s .. ',"errorCode":' .. cjson.encode(ecode) end
    if (emsg or '') ~= '' then s = s .. ',"error":' .. cjson.encode(emsg) end
  end
  return s
end

-- failureOf returns the body of the events of a FAILED, CANCELLED or EXPIRED meta.
local function failureOf(meta)
  local st = meta.status
  if st == 'CANCELLED' then
    return outcomeOf(meta, st, nil, 'cancelled', 'cancelled', meta.cancelReason or meta.error)
  end
  return outcomeOf(meta, st, nil, meta.errorType, meta.errorCode, meta.error)
end

local function emit(taskId, shared, queued, body)
  local p = '{"taskId":' .. cjson.encode(taskId) .. ',"shared":"' .. shared .. '","queuedMs":' ..
    fmt(queued) .. ',' .. body .. '}'
  out.n = out.n + 1
  if A.mode == 'write' then
    local id = A.uuid .. '-' .. out.n
    if A.maxlen > 0 then
      redis.call('XADD', KEYS[5], 'MAXLEN', '~', A.maxlen, '*', '_watermill_message_uuid', id, 'payload', p)
    else
      redis.call('XADD', KEYS[5], '*', '_watermill_message_uuid', id, 'payload', p)
    end
  else
    out.events[#out.events + 1] = p
  end
end

-- answer gives the caller's task (when it has one) the event body with shared callerShared, and
-- every parked task the same body with shared "follower", then acknowledges all their entries
-- and releases the parked ones.
local function answer(body, callerShared)
  if A.task ~= '' then emit(A.task, callerShared, A.queued, body) end
  if A.entry ~= '' then out.acks[#out.acks + 1] = A.entry end
  local w = redis.call('HGETALL', KEYS[4])
  for i = 1, #w, 2 do
    local field = w[i]
    if field ~= A.entry then
      local at, taskId = string.match(w[i + 1], '^(%d+) (.+)$')
      if taskId then
        emit(taskId, 'follower', 0, body)
        out.waited[#out.waited + 1] = now - (tonumber(at) or now)
      end
      out.acks[#out.acks + 1] = field
    end
    out.released[#out.released + 1] = field
  end
end

-- park moves the caller's entry to the parking consumer (mode write) or asks the caller to.
local function park()
  if A.entry == '' then return end
  if A.mode == 'write' then
    local id, stream = splitRef(A.entry)
    if id then redis.call('XCLAIM', stream, A.group, A.parking, 0, id, 'JUSTID') end
  else
    out.park = A.entry
  end
end

-- tail finishes an answering script: in mode write it acknowledges the entries and deletes the
-- released waiter fields; it appends the answer tail to reply and returns it.
local function tail(reply)
  if A == nil then initAnswers() end
  if A.mode == 'write' then
    local byStream, order = {}, {}
    for _, ref in ipairs(out.acks) do
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
        redis.call('XACK', stream, A.group, unpack(ids, i, math.min(i + 99, #ids)))
      end
    end
    for i = 1, #out.released, 100 do
      redis.call('HDEL', KEYS[4], unpack(out.released, i, math.min(i + 99, #out.released)))
    end
    reply[#reply + 1] = out.n
    reply[#reply + 1] = 0
    reply[#reply + 1] = 0
    reply[#reply + 1] = ''
  else
    reply[#reply + 1] = out.n
    for _, p in ipairs(out.events) do reply[#reply + 1] = p end
    reply[#reply + 1] = #out.acks
    for _, r in ipairs(out.acks) do reply[#reply + 1] = r end
    reply[#reply + 1] = #out.released
    for _, r in ipairs(out.released) do reply[#reply + 1] = r end
    reply[#reply + 1] = out.park
  end
  reply[#reply + 1] = #out.waited
  for _, ms in ipairs(out.waited) do reply[#reply + 1] = ms end
  return reply
end

-- settleCaller answers a caller whose token is not the flight's: from the flight's outcome
-- when it has one, else by parking the caller's task on it (the current owner answers it).
-- It returns 'answered' or 'parked'.
local function settleCaller(meta)
  if A.mode == 'write' and A.entry ~= '' then
    -- An entry no longer pending was answered by whoever acknowledged it (the owner that
    -- took over): a zombie writes nothing more.
    local id, stream = splitRef(A.entry)
    local ok, p = pcall(redis.call, 'XPENDING', stream, A.group, id, id, 1)
    if ok and not p[1] then return 'answered' end
  end
  local st = meta.status
  local attempts = num(meta.attempts, 0)
  local maxA = num(meta.maxAttempts, 3)
  if st == 'SUCCEEDED' then
    local result = redis.call('GET', KEYS[2])
    if result then
      answer(outcomeOf(meta, st, result), 'follower')
      return 'answered'
    end
  elseif st == 'CANCELLED' or (st == 'FAILED' and (meta.retryable ~= '1' or attempts >= maxA))
    or (st == 'EXPIRED' and attempts >= maxA) then
    answer(failureOf(meta), 'follower')
    return 'answered'
  end
  if A.entry ~= '' then
    if redis.call('HEXISTS', KEYS[4], A.entry) == 0 then
      redis.call('HSET', KEYS[4], A.entry, fmt(now) .. ' ' .. A.task)
      local ttl = redis.call('PTTL', KEYS[1])
      if ttl > 0 then redis.call('PEXPIRE', KEYS[4], ttl) end
    end
    park()
  end
  return 'parked'
end
