-- lock_renew: set the remaining time of a lock the owner holds.
--   KEYS[1]  the lock hash
--   ARGV[1]  owner token
--   ARGV[2]  ttl in milliseconds
--   ARGV[3]  replicas that must be online (absent or 0: no check; 'all':
--            every one online, at least one: "OK <count>")
-- Returns OK, a NOTOWNER error when the owner does not hold the lock, or
-- a NOREPLICAS error when fewer replicas are online (nothing written).
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'hash' or redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then
    return redis.error_reply('NOTOWNER the lock is not held by this owner')
end
local need, online = tonumber(ARGV[3]) or 0, nil
if ARGV[3] == 'all' then
    need = 1
end
if need > 0 then
    online = 0
    for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do
        online = online + 1
    end
    if online < need then
        return redis.error_reply('NOREPLICAS ' .. online .. ' replicas online')
    end
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if ARGV[3] == 'all' then
    return redis.status_reply('OK ' .. online)
end
return redis.status_reply('OK')
