-- primary_record: sluice's record, kept in the primary itself, of when
-- each master_replid of it was first seen by any sluice (README "Locks
-- across a failover"), so that a sluice that starts learns what the
-- others saw. Run only on a node that says role:master.
--   KEYS[1]  the record: a hash, replid -> ms by this Redis's clock
--   ARGV[1]  the primary's master_replid
-- Returns {ms when ARGV[1] was first seen, now in ms}: both now when this
-- call is the first to see it. Keeps the 16 newest replids.
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local seen = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
if seen == nil then
    redis.call('HSET', KEYS[1], ARGV[1], now)
    seen = now
    if redis.call('HLEN', KEYS[1]) > 16 then
        local all, oldest, at = redis.call('HGETALL', KEYS[1]), nil, nil
        for i = 1, #all, 2 do
            local v = tonumber(all[i + 1]) or 0
            if oldest == nil or v < at then oldest, at = all[i], v end
        end
        redis.call('HDEL', KEYS[1], oldest)
    end
end
return {seen, now}
