-- schedule_add: keep a task aside in its stage's scheduled set until it is due, indexed by its
-- request key. A task already there (the same payload: the same id) is due at the new time.
--
-- KEYS[1] -> ai:scheduled:{<stage>}:due          zset: scheduled id -> due, Unix ms
-- KEYS[2] -> ai:scheduled:{<stage>}:tasks        hash: scheduled id -> "<request key> <payload>"
-- KEYS[3] -> ai:scheduled:{<stage>}:key:<key>    hash: scheduled id -> task id (the key's index)
-- ARGV[1] -> scheduled id ("#" and the hex SHA-256 of the payload, topics.ScheduledID)
-- ARGV[2] -> due, Unix ms
-- ARGV[3] -> request key (the flight key: no whitespace, no braces)
-- ARGV[4] -> task id
-- ARGV[5] -> task payload
--
-- Output: 1.

redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3] .. ' ' .. ARGV[5])
redis.call('HSET', KEYS[3], ARGV[1], ARGV[4])
return 1
