-- session_lock: one heavy task per interview session at a time across the fleet, with a fencing
-- token and a lease (DESIGN.md sections 2 and 7). One script, three operations.
--
-- KEYS[1] -> ai:session:lock:{S}   (string "<token>|<holder>", TTL = lease)
-- KEYS[2] -> ai:session:fence:{S}  (string: last fencing token issued; outlives the lock)
-- ARGV[1] -> op: acquire | renew | release
-- ARGV[2] -> acquire: the holder (non-empty; may hold '|'); renew, release: the caller's token
-- ARGV[3] -> lease in ms (acquire, renew)
-- ARGV[4] -> TTL of the fence key in ms (acquire, renew); far longer than the lease
--
-- Output:
--   acquire: { 'OK', token }                  the caller holds the lock with token for one lease;
--                                              a holder that already held it keeps its token
--            { 'BUSY', token, holder, pttl }  another holder has it (token 0: corrupt value)
--   renew:   { 'OK', token }                  the lease restarts at ARGV[3]
--            { 'LOST', token, holder, pttl }  the token does not hold the lock; the current
--                                              holder, or 0, '', -2 when the lock is free
--   release: { 'OK' }                         the lock was deleted
--            { 'LOST' }                       the token does not hold the lock; nothing written
--   other:   { 'BAD_OP', op }
-- Times come from Redis TIME. Tokens are max(fence + 1, now in microseconds), so they grow
-- strictly per session, also after the lock and the fence counter expired.

local op = ARGV[1]
local lease, fenceTTL = tonumber(ARGV[3]), tonumber(ARGV[4])

local function fmt(n) return string.format('%.0f', n) end

-- current returns the lock's token string, token number, holder and raw value (nil when free).
-- A value without '|' is corrupt: its token string is '' and its token 0.
local function current()
  local v = redis.call('GET', KEYS[1])
  if not v then return nil end
  local i = string.find(v, '|', 1, true)
  if not i then return '', 0, v, v end
  local ts = string.sub(v, 1, i - 1)
  return ts, tonumber(ts) or 0, string.sub(v, i + 1), v
end

-- keepFence makes sure the fence counter is at least tok and lives fenceTTL more.
local function keepFence(tok)
  local prev = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if prev < tok then prev = tok end
  redis.call('SET', KEYS[2], fmt(prev), 'PX', fenceTTL)
end

if op == 'acquire' then
  local holder = ARGV[2]
  local ts, tok, h = current()
  if ts then
    if ts ~= '' and h == holder then
      redis.call('PEXPIRE', KEYS[1], lease)
      keepFence(tok)
      return { 'OK', tok }
    end
    return { 'BUSY', tok, h, redis.call('PTTL', KEYS[1]) }
  end
  local t = redis.call('TIME')
  local nowUs = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local prev = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  local newTok = nowUs
  if newTok <= prev then newTok = prev + 1 end
  redis.call('SET', KEYS[2], fmt(newTok), 'PX', fenceTTL)
  redis.call('SET', KEYS[1], fmt(newTok) .. '|' .. holder, 'PX', lease)
  return { 'OK', newTok }
end

if op == 'renew' then
  local ts, tok, h = current()
  if not ts then return { 'LOST', 0, '', -2 } end
  if ts == '' or ts ~= ARGV[2] then return { 'LOST', tok, h, redis.call('PTTL', KEYS[1]) } end
  redis.call('PEXPIRE', KEYS[1], lease)
  keepFence(tok)
  return { 'OK', tok }
end

if op == 'release' then
  local ts = current()
  if not ts or ts == '' or ts ~= ARGV[2] then return { 'LOST' } end
  redis.call('DEL', KEYS[1])
  return { 'OK' }
end

return { 'BAD_OP', tostring(op) }
