-- lock_acquire: take the lock KEYS[1] for the owner token ARGV[1].
--   KEYS[1]  the lock: a hash {owner token -> hold count} with a ms expiry
--   KEYS[2]  the fence counter of this lock name (same hash slot)
--   ARGV[1]  owner token
--   ARGV[2]  ttl in milliseconds
--   ARGV[3]  "1": reentrant (an explicit OWNER may take it again)
--   ARGV[4]  "1": return a fence number
-- Returns {1, holds, fence or 0} when taken, {0, pttl} when another owner
-- holds it, or a WRONGTYPE error when KEYS[1] is not a hash.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply('WRONGTYPE Operation against a key holding the wrong kind of value')
end
local holds = 1
if kind == 'hash' then
    if ARGV[3] ~= '1' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
        return {0, redis.call('PTTL', KEYS[1])}
    end
    holds = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
else
    redis.call('HSET', KEYS[1], ARGV[1], 1)
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
local fence = 0
if ARGV[4] == '1' then
    fence = redis.call('INCR', KEYS[2])
end
return {1, holds, fence}
