-- lock_release: give back one hold (or all, on disconnect) of KEYS[1].
--   KEYS[1]  the lock hash
--   ARGV[1]  owner token
--   ARGV[2]  "all": drop every hold of this owner
-- Returns the holds left (0: released, the key is gone), or a NOTOWNER
-- error when the owner does not hold the lock (expired, or someone else's).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return redis.error_reply('NOTOWNER the lock is not held by this owner')
end
local left = 0
if ARGV[2] ~= 'all' then
    left = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
end
if left <= 0 then
    redis.call('HDEL', KEYS[1], ARGV[1])
    if redis.call('HLEN', KEYS[1]) == 0 then
        redis.call('DEL', KEYS[1])
    end
    return 0
end
return left
