-- lock_renew: set the remaining time of a lock the owner holds.
--   KEYS[1]  the lock hash
--   ARGV[1]  owner token
--   ARGV[2]  ttl in milliseconds
-- Returns OK, or a NOTOWNER error when the owner does not hold the lock.
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return redis.error_reply('NOTOWNER the lock is not held by this owner')
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return redis.status_reply('OK')
