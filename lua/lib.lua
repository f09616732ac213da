-- lib: the head of the flightdeck function library (Redis Functions, FUNCTION LOAD). lua.go
-- puts it in front of acquire, start, heartbeat, complete, fail, cancel, handover and the
-- limiter, each of which registers one function with register() (acquire.lua also hit). Its
-- helpers are defined once, when the library loads; every call only sets the per-call state
-- (keys K, arguments V, the clock) and runs its body. batch runs several calls in one FCALL under one clock.
--
-- A flight is one string key, its record (DESIGN.md section 2):
--
--   line 1: f1 <status> <token> <attempts> <flags> <updatedAt> <usage> <heartbeatAt>
--           <startedAt> <progressAt> <progress> <retryAt> <createdAt> <restoredAt>
--                                                                             (tab-separated)
--   line 2: <requestKey> <stage> <tenant> <sessionId> <policy> <ownerId> <taskId> <entry>
--           <errorType> <errorCode> <error> <trace>                           (tab-separated)
--   line 3: the attempt log, one entry per earlier attempt, separated by \30
--   then:   the result bytes (a SUCCEEDED record), else nothing
--
-- Times are Unix ms of Redis TIME, as decimal strings; "" is a field never set. flags holds
-- letters: h handed over, f free (a limiter's wait, the attempt not spent), r retryable, i the
-- result is compact JSON events may inline, a the owner's label is "archive", m the flight
-- issued more than one token since its record was created (its end writes the fence). policy
-- is the owner's pinned "<lease> <runningTTL> <stall> <resultTTL> <failureTTL> <maxAttempts>"
-- (ms, and a count); an attempt expires at startedAt + runningTTL. entry is the owner's task
-- entry "<entry id> <task stream>". errorType, errorCode and error are JSON strings, or "".
-- usage is what the owner's call reported it used, "<prompt tokens> <completion tokens>
-- <model>", on a SUCCEEDED record whose call reported it, else "". trace is the W3C
-- traceparent of the owner's model-call span, or "" when the owner does not trace.
-- No field holds a tab or a newline.
--
-- Flight keys (every flight script):
--   K[1] -> <p>:flight:{K}          string: the record
--   K[2] -> <p>:flight:waiters:{K}  hash: parked entry "<entry id> <task stream>" ->
--                                      "<parked at, Unix ms> <task id>"
--   K[3] -> <p>:flight:fence:{K}    string: the last token of an ended run whose flight had
--                                      more than one token, "<token>", with ":c" or ":x" once
--                                      a run was closed (cancelled, or expired for good); no
--                                      result of a closed run is accepted
-- The streams a call answers into (the stage's result stream, the task streams of the entries
-- it acknowledges or parks) are not among its keys: answer mode write, which writes them, runs
-- on a single Redis node only, where a script may reach any key; on Redis Cluster they live in
-- other slots, and the caller writes them (mode return).
--
-- Answer context of the scripts that answer tasks (acquire, hit, complete, fail, cancel):
--   V[1] -> "<mode> <result stream MAXLEN ~, 0: none> <group> <parking consumer> <result
--           stream>"; mode: write (events and acknowledgements here, one Redis node) or
--           return (handed back: Redis Cluster)
--   V[2] -> the caller: "<task id>\t<entry ref>\t<queuedMs>\t<runMs>\t<inline cap>\t<tail>";
--           task id "" for in-process callers, entry ref "" for none; inline cap: the largest
--           result inlined in the events built here for other tasks than the caller's own;
--           tail: the events' '"finishedAt":"<RFC 3339>","consumer":"<name>"'
-- An event written here (mode write) has the message uuid "<task id>-<Redis time, µs>-<n>".
--
-- Answer tail, appended to the replies of the answering scripts:
--   mode write:  { nEvents, nWaited, waited ms... } (all was written here)
--   mode return: { nEvents, payloads..., nAcks, entry refs..., nReleased, waiter fields...,
--                  park, nWaited, waited ms... }; the caller appends the payloads to the
--                  result stream, then acknowledges the entries, deletes the released waiter
--                  fields and moves park (an entry ref, or "") to the parking consumer, in
--                  that order; a crash in between leaves the entries pending and the waiters
--                  in place, for the next caller to answer again.
-- waited: how long each answered parked task waited. Tokens are max(previous + 1, now in µs).

-- Cost matters here: a task's owner makes two calls. Every argument, every redis.call, every
-- element of a reply and every string a call makes costs about a microsecond, so the common
-- paths read one field with one pattern, write one SET, and reply with few elements; the rare
-- paths parse the whole record.

-- FUNCTION_PREFIX is replaced by lua.go with the library's versioned prefix.
local FUNCTION_PREFIX = '{{prefix}}'

-- Per-call state: set by begin before every call (Redis runs one at a time).
local K, V = nil, nil -- the call's keys and arguments (KEYS and ARGV in the headers)
local nowStr, nowUsStr = '', '' -- Redis TIME in ms and µs, as decimal strings
local nowN, nowUsN = nil, nil -- the same as numbers, parsed on first use (nowMs, nowMicros)
local C = nil -- the answer context V[1] and the caller V[2], parsed by ctx() on first use
local out = nil -- what the call answered, made by answered() on first use
local J = nil -- (complete) the joined tasks, a list of { id, ref, queued }, or nil
local JAgain = false -- (complete, fail) the caller's and joined tasks may have been answered before (a retry)

local PAD = { '00000', '0000', '000', '00', '0', '' } -- left padding of TIME's microseconds
local LOG_SEP = '\30' -- separates the entries of the attempt log

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
-- never admitted, and a fence or record holding one is not counted when a token is issued.
local MAX_TOKEN = 9007199254740992

-- A cache keeps values parsed from text, by that text, so that text many calls share (a
-- stage's answer context, a pinned policy) is parsed once: a lookup costs less than a pattern
-- with captures. It starts over when it holds 64.
local function newCache() return { t = {}, n = 0 } end

-- remember keeps v for the text k in cache c.
local function remember(c, k, v)
  if c.n >= 64 then c.t, c.n = {}, 0 end
  c.t[k], c.n = v, c.n + 1
end

-- contexts holds the answer contexts parsed before.
local contexts = newCache()

-- answerCtx returns the answer context V[1] parsed: { mode, maxlen, group, parking, results }.
local function answerCtx()
  local a = contexts.t[V[1]]
  if a == nil then
    local mode, maxlen, group, parking, results = string.match(V[1], '^(%S+) (%S+) (%S+) (%S+) (%S+)$')
    a = { mode = mode, maxlen = maxlen, group = group, parking = parking, results = results }
    remember(contexts, V[1], a)
  end
  return a
end

-- ctx returns the answer context and the caller, parsed on first use.
local function ctx()
  if C == nil then
    local a = answerCtx()
    local task, entry, queued, run, inline, tail = string.match(V[2], '^([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t([^\t]*)\t(.*)$')
    C = { mode = a.mode, maxlen = a.maxlen, group = a.group, parking = a.parking, results = a.results, task = task or '',
      entry = entry or '', queued = queued or '0', run = run or '0', inline = num(inline, 0), tail = tail or '' }
  end
  return C
end

-- Records ------------------------------------------------------------------------------------

local LINE1 = '^f1\t(%u+)\t(%d*)\t(%d*)\t(%a*)\t(%d*)\t([^\t\n]*)\t(%d*)\t(%d*)\t(%d*)\t([^\t\n]*)\t(%d*)\t(%d*)\t(%d*)\n()'
local LINE2 = '^([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\n([^\n]*)\n()'
-- LINE1_V0 and LINE2_V0 read the lines as the release before usage and trace wrote them, so
-- that a flight an older consumer started is read, and answered, during a rolling deploy.
local LINE1_V0 = '^f1\t(%u+)\t(%d*)\t(%d*)\t(%a*)\t(%d*)\t(%d*)\t(%d*)\t(%d*)\t([^\t\n]*)\t(%d*)\t(%d*)\t(%d*)\n()'
local LINE2_V0 = '^([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\n([^\n]*)\n()'

-- parse returns the record v as a table, or nil when v is not one. The result is m.result
-- when want, else left in v from m.resultAt.
local function parse(v, want)
  local st, tok, att, flags, upd, usage, hb, started, progAt, prog, retryAt, created, restored, p2 = string.match(v, LINE1)
  if not st then
    usage = ''
    st, tok, att, flags, upd, hb, started, progAt, prog, retryAt, created, restored, p2 = string.match(v, LINE1_V0)
    if not st then return nil end
  end
  local rk, stage, tenant, sess, pol, owner, task, entry, et, ec, em, trace, log, p4 = string.match(v, LINE2, p2)
  if not rk then
    trace = ''
    rk, stage, tenant, sess, pol, owner, task, entry, et, ec, em, log, p4 = string.match(v, LINE2_V0, p2)
    if not rk then return nil end
  end
  local m = { status = st, token = tok, attempts = att, flags = flags, updatedAt = upd, usage = usage, heartbeatAt = hb,
    startedAt = started, progressAt = progAt, progress = prog, retryAt = retryAt, createdAt = created,
    restoredAt = restored, requestKey = rk, stage = stage, tenant = tenant, sessionId = sess, policy = pol,
    ownerId = owner, taskId = task, entry = entry, errorType = et, errorCode = ec, error = em, trace = trace, log = log,
    resultAt = p4 }
  if want then m.result = string.sub(v, p4) end
  return m
end

-- HEAD is how much of a record a call reads first: its header lines, and a small result.
-- HEAD_LAST is its last offset as a string: a number passed to redis.call is formatted with
-- snprintf, about 2,000 instructions each, a string is not.
local HEAD = 4096
local HEAD_LAST = '4095'

-- read returns the record's text, or nil when there is none: its first HEAD bytes when that is
-- all of it, else all of it.
local function read()
  local v = redis.call('GETRANGE', K[1], '0', HEAD_LAST)
  if v == '' then return nil end
  if #v == HEAD then v = redis.call('GET', K[1]) end
  return v
end

local BRIEF = '^f1\t(%u+)\t(%d*)\t(%d*)\t(%a*)\t%d*\t([^\t\n]*)\t[^\n]*\n([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t[^\t\n]*\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t([^\t\n]*)\t[^\n]*\t([^\t\n]*)\n[^\n]*\n()'

-- brief returns the fields of record v that answering from its outcome needs (status, token,
-- attempts, flags, usage, requestKey, stage, tenant, policy, ownerId, taskId, entry, trace, and where the
-- result starts), or nil when v is not a record. Every capture makes a string, and Lua hashes
-- each byte of every string it makes: the duplicates of a finished key read this, not parse.
local function brief(v)
  local st, tok, att, flags, usage, rk, stage, tenant, pol, owner, task, entry, trace, p4 = string.match(v, BRIEF)
  if not st then return nil end
  -- A record of the release before usage and trace has heartbeatAt where usage is (a usage
  -- holds spaces, a time none), and its error, empty on the SUCCEEDED records read here,
  -- where trace is.
  if usage ~= '' and not string.find(usage, ' ', 1, true) then usage = '' end
  return { status = st, token = tok, attempts = att, flags = flags, usage = usage, requestKey = rk, stage = stage, tenant = tenant,
    policy = pol, ownerId = owner, taskId = task, entry = entry, trace = trace, resultAt = p4, heartbeatAt = '0', errorType = '',
    errorCode = '', error = '', brief = true }
end

-- load reads and parses the record; nil when there is none.
local function load(want)
  local v = read()
  if not v then return nil end
  local m = parse(v, want)
  if not m then return { status = 'CORRUPT', flags = '', log = '' } end
  return m
end

-- BIG is the size from which a result is stored without a copy in Lua: Lua hashes every byte
-- of every string it makes.
local BIG = 16384

-- put writes the record head (its three header lines, each ending with a newline) with
-- result for ttl ms; the head is head and rest, when given, joined. A big result goes from
-- the arguments to Redis as it is: SETRANGE on a key that does not exist makes a string of
-- exactly the size asked. One concatenation makes one string, hashed once.
local function put(head, result, ttl, rest)
  if #result <= BIG then
    redis.call('SET', K[1], head .. (rest or '') .. result, 'PX', ttl)
    return
  end
  if rest then head = head .. rest end
  redis.call('DEL', K[1])
  redis.call('SETRANGE', K[1], #head, result)
  redis.call('SETRANGE', K[1], 0, head)
  redis.call('PEXPIRE', K[1], ttl)
end

-- has reports whether flag c is set on m.
local function has(m, c) return string.find(m.flags, c, 1, true) ~= nil end

-- flagged returns flags with the letters of add set and those of drop cleared.
local function flagged(flags, add, drop)
  local f = string.gsub(flags, '[' .. drop .. add .. ']', '')
  return f .. add
end

-- line1 and line2 encode m's fields.
local function line1(m)
  return 'f1\t' .. m.status .. '\t' .. m.token .. '\t' .. m.attempts .. '\t' .. m.flags .. '\t' .. nowStr .. '\t' ..
    (m.usage or '') .. '\t' .. m.heartbeatAt .. '\t' .. m.startedAt .. '\t' .. m.progressAt .. '\t' .. m.progress .. '\t' .. m.retryAt .. '\t' ..
    m.createdAt .. '\t' .. m.restoredAt
end
local function line2(m)
  return m.requestKey .. '\t' .. m.stage .. '\t' .. m.tenant .. '\t' .. m.sessionId .. '\t' .. m.policy .. '\t' ..
    m.ownerId .. '\t' .. m.taskId .. '\t' .. m.entry .. '\t' .. m.errorType .. '\t' .. m.errorCode .. '\t' .. m.error ..
    '\t' .. (m.trace or '')
end

-- store writes m as the record, with result (nil for none), for ttl ms (nil: the TTL it has);
-- updatedAt is now.
local function store(m, ttl, result)
  local head = line1(m) .. '\n' .. line2(m) .. '\n' .. m.log .. '\n'
  if ttl == nil then
    redis.call('SET', K[1], head .. (result or ''), 'KEEPTTL')
  else
    put(head, result or '', ttl)
  end
end

-- policies holds the pinned policies parsed before (the flights of one stage share one): a
-- lookup saves a pattern with six captures and six tonumber.
local policies = newCache()

-- parsePolicy reads a pinned policy string: lease, runningTTL, stall, resultTTL, failureTTL,
-- maxAttempts; nothing when s is not one.
local function parsePolicy(s)
  if s == nil then return nil end
  local p = policies.t[s]
  if p == nil then
    local l, r, st, res, f, m = string.match(s, '^(%d+) (%d+) (%d+) (%d+) (%d+) (%d+)$')
    if not l then return nil end
    p = { tonumber(l), tonumber(r), tonumber(st), tonumber(res), tonumber(f), tonumber(m) }
    remember(policies, s, p)
  end
  return p[1], p[2], p[3], p[4], p[5], p[6]
end

-- DEFAULT_POLICY stands in for a record without a pinned policy.
local DEFAULT_POLICY = '5000 120000 0 600000 60000 3'

-- pinned returns the policy pinned in m (lease, runningTTL, stall, resultTTL, failureTTL,
-- maxAttempts); for one without, the policy string fallback, else DEFAULT_POLICY.
local function pinned(m, fallback)
  local l, r, st, res, f, mx = parsePolicy(m and m.policy)
  if l then return l, r, st, res, f, mx end
  l, r, st, res, f, mx = parsePolicy(fallback)
  if l then return l, r, st, res, f, mx end
  return parsePolicy(DEFAULT_POLICY)
end

-- expireAt is when m's attempt ends: startedAt + the pinned runningTTL.
local function expireAt(m)
  local _, r = pinned(m, nil)
  return num(m.startedAt, 0) + r
end

-- Fences ---------------------------------------------------------------------------------------

-- readFence returns the fence's token (nil without a fence) and the closing mark of that
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

-- fenceTTLOf returns how long the fence of m's flight must live from now, in ms: ttl (the
-- caller's fence TTL) or, when longer, the fence TTL of the policy pinned in m (twice its
-- runningTTL + failureTTL + resultTTL), so that the fence outlives every run of the flight's
-- own owners, whatever policy the caller that closes it has.
local function fenceTTLOf(m, ttl)
  local _, r, _, res, f = pinned(m, nil)
  return math.max(num(ttl, 0), 2 * (r + f + res))
end

-- newToken issues the next token: max(previous + 1, now in µs), previous being the larger of
-- the fence and m's token (m: the current record, or nil). It returns the token's decimal
-- string.
local function newToken(m)
  local prev = 0
  local f = redis.call('GET', K[3])
  if f then prev = tonumber(string.match(f, '^%d+') or '0') or 0 end
  if prev > MAX_TOKEN then prev = 0 end
  if m then
    local t = tonumber(m.token or '')
    if t and t > prev and t <= MAX_TOKEN then prev = t end
  end
  if prev == 0 or nowMicros() > prev then return nowUsStr end
  return fmt(prev + 1)
end

-- endFence writes the fence when m's run ends with token tok: always when mark closes it, else
-- only when m's flight issued more than one token (flag m), whose older owners the fence
-- refuses once the record is gone. A flight with one token needs none: every other token of
-- its key is older than its record, and is refused by an earlier fence or by its age.
local function endFence(m, tok, mark, ttl)
  if mark ~= '' or has(m, 'm') then writeFence(tok, mark, ttl) end
end

-- fenceAdmits judges a token that finds no record: 'stale' when it is outside 1..MAX_TOKEN,
-- when a larger token was issued, or when there is no fence and the token is older than
-- fenceTTL (its fence could have expired, so nothing proves it was not superseded); the
-- closing mark 'c' or 'x' when its own run was closed; 'ok' otherwise (the record was lost:
-- the token's owner may write it back).
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

-- takeoverDue reports whether m lets an acquire take it over now: a live flight (PENDING,
-- RUNNING) whose owner's lease lapsed, whose attempt ran out or (RUNNING) whose progress
-- stalled, by its pinned policy; an EXPIRED one always. An owner that asks ("ask" of complete,
-- fail and heartbeat) hears LAPSED instead of writing on such a record: it may be a rollback
-- that lost the acquire of the owner that took over (a failover), and a fence kept outside
-- Redis decides before it calls again without asking.
local function takeoverDue(m)
  local status = m.status
  if status == 'EXPIRED' then return true end
  if status ~= 'PENDING' and status ~= 'RUNNING' then return false end
  local lease, running, stall = pinned(m, nil)
  local now, exp = nowMs(), num(m.startedAt, 0) + running
  if now > exp then return true end
  if stall > 0 and status == 'RUNNING' and now - num(m.progressAt, exp - running) > stall then return true end
  return now - num(m.heartbeatAt, 0) > lease
end

-- Answers ------------------------------------------------------------------------------------

-- answered returns what the call answered so far, made on first use.
local function answered()
  if out == nil then out = { n = 0, events = {}, acks = {}, released = {}, park = '', waited = {}, caller = '', joined = 0 } end
  return out
end

local function splitRef(ref)
  return string.match(ref, '^(%S+) (%S+)$')
end

-- outcomeOf returns the body of the events of one outcome of m's flight: every field but
-- taskId, shared and queuedMs. result is the result of a SUCCEEDED flight, inlined when m
-- says it is compact JSON no larger than the caller's cap. requestKey, stage and tenant are
-- written as they are: their charsets (validated when the flight was created) need no escape;
-- the error fields are JSON strings already.
local function outcomeOf(m, status, result, etype, ecode, emsg)
  local c = ctx()
  local s = '"requestKey":"' .. m.requestKey .. '","stage":"' .. m.stage .. '","tenant":"' .. m.tenant ..
    '","status":"' .. status .. '","ownerToken":' .. (m.token ~= '' and m.token or '0') ..
    ',"attempts":' .. (m.attempts ~= '' and m.attempts or '0') .. ',"runMs":' .. c.run .. ',' .. c.tail
  if status == 'SUCCEEDED' then
    if result and result ~= '' and has(m, 'i') and #result <= c.inline then s = s .. ',"result":' .. result end
    return s .. ',"resultRef":"' .. K[1] .. '"'
  end
  if (etype or '') ~= '' then s = s .. ',"errorType":' .. etype end
  if (ecode or '') ~= '' then s = s .. ',"errorCode":' .. ecode end
  if (emsg or '') ~= '' then s = s .. ',"error":' .. emsg end
  return s
end

-- eventBody returns the body of event ev, a whole event this library's way (every field but
-- taskId, shared and queuedMs): what the other tasks an event's outcome answers get.
local function eventBody(ev)
  return string.match(ev, '^{"taskId":"[^"]*","shared":"[^"]*","queuedMs":%d+,(.*)}$') or ev
end

-- failureOf returns the body of the events of a FAILED, CANCELLED or EXPIRED record.
local function failureOf(m)
  return outcomeOf(m, m.status, nil, m.errorType, m.errorCode, m.error)
end

-- SMALL holds the decimal strings of 0..64: Lua formats a number it concatenates with
-- sprintf, and redis.call a number argument with snprintf, about 2,000 instructions each.
local SMALL = {}
for i = 0, 64 do SMALL[i] = '' .. i end

-- decimal returns n, an integer, as a decimal string.
local function decimal(n) return SMALL[n] or fmt(n) end

-- xadd appends event payload p of task taskId, the call's n-th, to results (mode write). The
-- call's first event trims the stream (approximate MAXLEN); the others, of the same call, leave
-- it to the next call: each argument costs a call about 870 instructions.
local function xadd(results, maxlen, taskId, n, p)
  local id = taskId .. '-' .. nowUsStr .. '-' .. decimal(n)
  if maxlen ~= '0' and n == 1 then
    redis.call('XADD', results, 'MAXLEN', '~', maxlen, '*', '_watermill_message_uuid', id, 'payload', p)
  else
    redis.call('XADD', results, '*', '_watermill_message_uuid', id, 'payload', p)
  end
end

-- emit answers one task with a built payload.
local function emit(taskId, p)
  local o = answered()
  local c = ctx()
  o.n = o.n + 1
  if c.mode == 'write' then
    xadd(c.results, c.maxlen, taskId, o.n, p)
  else
    o.events[#o.events + 1] = p
  end
end

-- emitBody answers one task with the event body. Task ids are [A-Za-z0-9._:-] (validated
-- before they reach a script), so they are written as they are.
local function emitBody(taskId, shared, queued, body)
  emit(taskId, '{"taskId":"' .. taskId .. '","shared":"' .. shared .. '","queuedMs":' .. queued .. ',' .. body .. '}')
end

-- answeredBefore reports whether the entry ref is no longer pending (mode write: it was
-- acknowledged, so its task was answered); in mode return it cannot tell (false).
local function answeredBefore(ref)
  local c = ctx()
  if c.mode ~= 'write' then return false end
  local id, stream = splitRef(ref)
  if not id then return false end
  local ok, p = pcall(redis.call, 'XPENDING', stream, c.group, id, id, 1)
  return ok and not p[1]
end

-- answer gives the caller's task (when it has one) its event: the whole payload own when
-- given, else the body with shared callerShared; and every joined task (complete: the
-- caller's in-process followers, J) and parked task the body others (body when nil; a
-- function is called for it when a task needs it) with shared "follower" (or "owner" for the
-- entry ownerRef, when given: the last owner's task, parked by the call that ends its
-- attempt). Then it acknowledges all their entries and releases the parked ones.
local function answer(body, callerShared, ownerRef, others, own)
  local o = answered()
  local c = ctx()
  local task, entry = c.task, c.entry
  local function ob()
    if type(others) == 'function' then others = others() end
    return others or body
  end
  -- A retried owner call (ALREADY) whose task was answered by the first call (its entry is
  -- acknowledged) answers it no more.
  if task ~= '' and not (JAgain and entry ~= '' and answeredBefore(entry)) then
    if own and own ~= '' then emit(task, own) else emitBody(task, callerShared, c.queued, body) end
    o.caller = callerShared
  end
  if entry ~= '' then o.acks[#o.acks + 1] = entry end
  -- A joined task's entry may be in the waiters too (the previous owner's task, recorded by a
  -- takeover, joined the new owner in its consumer): it is answered once, as joined.
  local joined = nil
  if J then
    joined = {}
    for _, t in ipairs(J) do
      joined[t.ref] = true
      if not (JAgain and answeredBefore(t.ref)) then
        emitBody(t.id, 'follower', t.queued, ob())
        o.acks[#o.acks + 1] = t.ref
      end
      o.joined = o.joined + 1
    end
  end
  local w = redis.call('HGETALL', K[2])
  for i = 1, #w, 2 do
    local field = w[i]
    if field ~= entry and not (joined and joined[field]) then
      local at, taskId = string.match(w[i + 1], '^(%d+) (.+)$')
      if taskId then
        local shared = 'follower'
        if ownerRef and ownerRef ~= '' and field == ownerRef then shared = 'owner' end
        emitBody(taskId, shared, '0', ob())
        o.waited[#o.waited + 1] = nowMs() - (tonumber(at) or nowMs())
      end
      o.acks[#o.acks + 1] = field
    end
    o.released[#o.released + 1] = field
  end
end

-- park moves the caller's entry to the parking consumer (mode write) or asks the caller to.
local function park()
  local c = ctx()
  local entry = c.entry
  if entry == '' then return end
  if c.mode == 'write' then
    local id, stream = splitRef(entry)
    if id then redis.call('XCLAIM', stream, c.group, c.parking, 0, id, 'JUSTID') end
  else
    answered().park = entry
  end
end

-- ackAll acknowledges the answered entries, one XACK per stream (mode write).
local function ackAll(acks)
  local group = ctx().group
  if #acks == 1 then
    local id, stream = splitRef(acks[1])
    if id then redis.call('XACK', stream, group, id) end
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
      redis.call('XACK', stream, group, unpack(ids, i, math.min(i + 99, #ids)))
    end
  end
end

-- isWrite reports whether the call answers in mode write, without parsing the context.
local function isWrite()
  if C then return C.mode == 'write' end
  return string.byte(V[1], 1) == 119 -- 'w'
end

-- tail finishes an answering script: in mode write it acknowledges the entries and deletes the
-- released waiter fields; it appends the answer tail to reply and returns it.
local function tail(reply)
  local o = out
  local n = #reply
  if o == nil then
    if isWrite() then
      reply[n + 1], reply[n + 2] = 0, 0
    else
      reply[n + 1], reply[n + 2], reply[n + 3], reply[n + 4], reply[n + 5] = 0, 0, 0, '', 0
    end
    return reply
  end
  if ctx().mode == 'write' then
    if #o.acks > 0 then ackAll(o.acks) end
    local rel = o.released
    for i = 1, #rel, 100 do
      redis.call('HDEL', K[2], unpack(rel, i, math.min(i + 99, #rel)))
    end
    reply[n + 1] = o.n
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

-- waitersFollow gives the waiters hash the record's TTL, when it exists.
local function waitersFollow(ttl)
  if redis.call('EXISTS', K[2]) == 1 then redis.call('PEXPIRE', K[2], ttl) end
end

-- settleCaller answers a caller whose token is not the flight's: from the flight's outcome
-- when it has one, else by parking the caller's task on it (the current owner answers it).
-- It returns 'answered' or 'parked'.
local function settleCaller(m)
  local _, _, _, _, _, maxA = pinned(m, nil)
  local c = ctx()
  local entry = c.entry
  if c.mode == 'write' and entry ~= '' then
    -- An entry no longer pending was answered by whoever acknowledged it (the owner that
    -- took over): a zombie writes nothing more.
    local id, stream = splitRef(entry)
    local ok, p = pcall(redis.call, 'XPENDING', stream, c.group, id, id, 1)
    if ok and not p[1] then return 'answered' end
  end
  local st = m.status
  local attempts = num(m.attempts, 0)
  if st == 'SUCCEEDED' then
    answer(outcomeOf(m, st, m.result), 'follower')
    return 'answered'
  elseif st == 'CANCELLED' or (st == 'FAILED' and not has(m, 'f') and (not has(m, 'r') or attempts >= maxA))
    or (st == 'EXPIRED' and attempts >= maxA) then
    answer(failureOf(m), 'follower')
    return 'answered'
  end
  if entry ~= '' then
    if redis.call('HEXISTS', K[2], entry) == 0 then
      redis.call('HSET', K[2], entry, nowStr .. ' ' .. c.task)
      local ttl = redis.call('PTTL', K[1])
      if ttl > 0 then redis.call('PEXPIRE', K[2], ttl) end
    end
    park()
  end
  return 'parked'
end

-- Calls ---------------------------------------------------------------------------------------

-- bodies holds each registered function's body by name, for batch.
local bodies = {}

-- begin sets a call's keys and arguments and clears the per-call state.
local function begin(keys, args)
  K, V, C, out, J, JAgain = keys, args, nil, nil, nil, false
end

-- clock reads Redis TIME into nowStr (ms) and nowUsStr (µs).
local function clock()
  local t = redis.call('TIME')
  local sec, us = t[1], t[2]
  us = PAD[#us] .. us
  nowUsStr = sec .. us
  nowStr = sec .. string.sub(us, 1, 3)
  nowN, nowUsN = nil, nil
end

-- register registers body as the library function <prefix><name> (the prefix carries the
-- library's version, so that consumers of two versions can run side by side). Before each call
-- it sets the call's keys, arguments and clock, and clears the answer state.
local function register(name, body)
  bodies[name] = body
  redis.register_function(FUNCTION_PREFIX .. name, function(keys, args)
    begin(keys, args)
    clock()
    return body()
  end)
end

-- errorOf turns what pcall caught into an error reply: a Redis error keeps its message.
local function errorOf(e)
  if type(e) == 'table' and e.err then return redis.error_reply(e.err) end
  return redis.error_reply(tostring(e))
end

-- COUNT maps the decimal strings of 0..64 to their numbers: a lookup costs less than
-- tonumber's strtod.
local COUNT = {}
for i = 0, 64 do COUNT[SMALL[i]] = i end

-- batch runs several calls of the library's functions in one FCALL, in order, under one clock:
-- one call for the acquires of a read batch, one for the completes that are ready together.
-- ARGV[1] -> n, the number of calls; ARGV[2..1+3n] -> each call's function name (without the
-- prefix), key count and argument count; then each call's arguments, in order. KEYS holds each
-- call's keys, in order. The reply is an array of the calls' replies; a call that raised an
-- error has that error as its reply, and the calls after it still run.
redis.register_function(FUNCTION_PREFIX .. 'batch', function(keys, args)
  clock()
  local n = tonumber(args[1])
  local ki, ai = 0, 1 + 3 * n
  local replies = {}
  for c = 1, n do
    local h = 3 * c - 1
    local body, nk, na = bodies[args[h]], COUNT[args[h + 1]] or tonumber(args[h + 1]), COUNT[args[h + 2]] or tonumber(args[h + 2])
    -- A table constructor over unpack sizes the table once; filling it one by one would grow it
    -- step by step.
    local k, v = { unpack(keys, ki + 1, ki + nk) }, { unpack(args, ai + 1, ai + na) }
    ki, ai = ki + nk, ai + na
    if body == nil then
      replies[c] = redis.error_reply('ERR batch: no function ' .. tostring(args[h]))
    else
      begin(k, v)
      local ok, r = pcall(body)
      if ok then replies[c] = r else replies[c] = errorOf(r) end
    end
  end
  return replies
end)
