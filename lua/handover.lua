-- handover: the owner gives its flight up without having failed (the consumer is shutting
-- down, or the run lost its session lock). The attempt is not spent: the next acquire takes
-- over at once with reason handover and the same attempt count.
--
-- KEYS[1..3] -> the flight keys (lib.lua)
-- ARGV[1] -> ownerToken
--
-- Output: { code, status }
--   OK          the flight is marked for handover (its heartbeat lapsed)
--   GONE        no flight: nothing to hand over
--   STALE_TOKEN another owner holds the flight: nothing written
--   STATE       the flight is not PENDING or RUNNING (second element): nothing written

register('handover', function()
  local m = load(false)
  if not m then return { 'GONE', '' } end
  local status = m.status
  if m.token ~= V[1] then return { 'STALE_TOKEN', status } end
  if status ~= 'PENDING' and status ~= 'RUNNING' then return { 'STATE', status } end
  m.flags, m.heartbeatAt = flagged(m.flags, 'h', ''), '0'
  store(m, nil, nil)
  return { 'OK', status }
end)
