-- lock_acquire: take the lock KEYS[1] for the owner token ARGV[1].
--   KEYS[1]  the lock: a hash {owner token -> hold count} with a ms expiry
--   KEYS[2]  the fence of this lock name (same hash slot): a string, the
--            last fence, then ":" and the highest epoch seen when not 0
--   ARGV[1]  owner token
--   ARGV[2]  ttl in milliseconds
--   ARGV[3]  "1": reentrant (an explicit OWNER may take it again)
--   ARGV[4]  "1": return a fence number
--   ARGV[5]  fence epoch from sluice (0, or a time in seconds after a failover)
--   ARGV[6]  "1": cluster mode: this node's config epoch counts, if higher
--   ARGV[7]  replicas that must be online (0: no check; 'all': every one
--            online, at least one, and their count is a fourth value)
-- A fence is max(f + 1, epoch * unit + 1): it only goes up, also on a
-- promoted replica that lost f, as long as its epoch is higher. The unit
-- is 2^32 for a cluster's config epoch (small numbers: 4 billion fences
-- per key per epoch) and 2^20 for a clock in seconds (a key is never
-- taken a million times a second), both below 2^53, a Lua number's limit.
-- Returns {1, holds, fence or 0} when taken, {0, pttl} when another owner
-- holds it, {-1, seen epoch} when ARGV's epoch is lower than one this key
-- has seen (nothing written), a NOREPLICAS error when fewer replicas are
-- online (nothing written), or a WRONGTYPE error.
local wrongtype = 'WRONGTYPE Operation against a key holding the wrong kind of value'
local kind = redis.call('TYPE', KEYS[1])['ok']
if kind ~= 'none' and kind ~= 'hash' then
    return redis.error_reply(wrongtype)
end
local need, online = tonumber(ARGV[7]) or 0, nil
if ARGV[7] == 'all' then
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
local epoch, seen, last, fkind = 0, 0, 0, 'none'
if ARGV[4] == '1' then
    epoch = tonumber(ARGV[5]) or 0
    if ARGV[6] == '1' then
        local mine = string.match(redis.call('CLUSTER', 'INFO'), 'cluster_my_epoch:(%d+)')
        if mine and tonumber(mine) > epoch then
            epoch = tonumber(mine)
        end
    end
    fkind = redis.call('TYPE', KEYS[2])['ok']
    if fkind == 'string' then
        local f, e = string.match(redis.call('GET', KEYS[2]), '^(%d+):?(%d*)$')
        last = tonumber(f) or 0
        seen = tonumber(e) or 0
    elseif fkind ~= 'none' then
        return redis.error_reply(wrongtype)
    end
    if epoch < seen then
        return {-1, seen}
    end
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
    fence = last + 1
    local unit = 1048576
    if ARGV[6] == '1' then
        unit = 4294967296
    end
    if epoch * unit + 1 > fence then
        fence = epoch * unit + 1
    end
    local value = string.format('%.0f', fence)
    if epoch > 0 then
        value = value .. ':' .. string.format('%.0f', epoch)
    end
    redis.call('SET', KEYS[2], value)
end
if ARGV[7] == 'all' then
    return {1, holds, fence, online}
end
return {1, holds, fence}
