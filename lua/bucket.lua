-- bucket: a token bucket kept in Redis, shared by every sluice (rules with
-- scope = shared). The same arithmetic as rules/bucket.c.
--   KEYS[1]  the bucket: a hash {tokens, ts_us}; it expires when it would be
--            full again (plus 1s), and a missing bucket is a full one
--   ARGV[1]  rate: tokens added per second, > 0 (fractional is fine: 30/m = 0.5)
--   ARGV[2]  burst: bucket size, > 0
--   ARGV[3]  cost: tokens to take, 0 < cost <= burst (default 1)
--   ARGV[4]  max_wait_us (default 0): 0 takes only tokens that are there now
--            (action = reject); > 0 reserves tokens that will be there within
--            that many microseconds (action = delay: the count goes negative,
--            so the next request waits one interval longer)
--   ARGV[5]  "1": peek - change nothing, only answer what would happen;
--            "refund": give back cost tokens a request took but did not use
--            (it was refused by another rule, or its client left while it
--            waited, or tokens a sluice leased and did not spend); the
--            bucket never holds more than burst;
--            "lease": take up to cost tokens at once, as many as there are
--            (at least 1); with fewer than 1 there, as a request's ask for
--            1 token with max_wait_us (so a delay rule may reserve it)
--   ARGV[6]  lease: its lifetime in microseconds (default 2000000)
-- The clock is Redis's TIME, so every sluice refills the bucket alike.
-- Returns {allowed, wait_us, tokens_left}:
--   {1, 0, n}   taken now
--   {1, w, n}   reserved (max_wait_us > 0 only): send the request in w us
--   {0, w, n}   refused, nothing taken: cost tokens will be there in w us
--               (w > 0; may exceed max_wait_us; use it for a retry hint)
--   n is floor(tokens) after this call (negative while in debt).
--   A refund always answers {1, 0, n}.
--   A lease answers {allowed, wait_us, n, granted, lease_ttl_us}: granted
--   tokens (0 when refused), to be spent within lease_ttl_us of Redis's
--   TIME now; a sluice counts that from when it sent the ask, so its own
--   deadline is never later. Tokens granted are gone from the bucket: a
--   sluice that dies holding them never spends them, and they are never
--   given back (the fleet admits that many fewer; the bucket refills).
-- Errors: "ERR bucket: ..." for bad arguments; WRONGTYPE (raised by HMGET)
-- when KEYS[1] holds something other than a hash.
local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local cost = tonumber(ARGV[3] or '1')
local max_wait = tonumber(ARGV[4] or '0')
local peek = ARGV[5] == '1'
local refund = ARGV[5] == 'refund'
local lease = ARGV[5] == 'lease'
local lease_ttl = tonumber(ARGV[6] or '2000000')
if rate == nil or rate <= 0 then
    return redis.error_reply('ERR bucket: rate must be a number > 0')
end
if burst == nil or burst <= 0 then
    return redis.error_reply('ERR bucket: burst must be a number > 0')
end
if cost == nil or cost <= 0 or cost > burst then
    return redis.error_reply('ERR bucket: cost must be > 0 and <= burst')
end
if max_wait == nil or max_wait < 0 then
    return redis.error_reply('ERR bucket: max_wait_us must be a number >= 0')
end
if lease_ttl == nil or lease_ttl <= 0 then
    return redis.error_reply('ERR bucket: lease ttl must be a number > 0')
end

local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local state = redis.call('HMGET', KEYS[1], 'tokens', 'ts_us')
local tokens = tonumber(state[1])
local ts = tonumber(state[2])
if tokens == nil or ts == nil then
    tokens = burst
    ts = now
end
-- Refill; a clock that went back (failover) refills nothing now, and
-- counts from now on: a time stamp in the future (a clock that jumped,
-- or a bucket a client wrote) never holds the bucket empty for good.
local repaired = ts > now
if now > ts then
    tokens = tokens + (now - ts) * rate / 1000000
end
ts = now
if tokens > burst then
    tokens = burst
end
-- No debt deeper than one burst plus the longest wait reserved: a bucket
-- written with a huge debt (any client can write the key) refills in
-- bounded time, as one sluice's own requests could leave it at worst.
local floor = -(burst + max_wait * rate / 1000000)
if tokens < floor then
    tokens = floor
    repaired = true
end

local function store()
    -- Numbers go to Redis at full precision (not tostring's 14 digits).
    redis.call('HSET', KEYS[1], 'tokens', tokens, 'ts_us', ts)
    redis.call('PEXPIRE', KEYS[1], math.ceil((burst - tokens) * 1000 / rate) + 1000)
end

if refund then
    tokens = math.min(burst, tokens + cost)
    store()
    return {1, 0, math.floor(tokens)}
end

-- A lease takes what is there, up to cost; with less than one token it
-- is one request's ask (below), and the answer says what was granted.
if lease then
    local have = math.floor(tokens + 1e-9)
    if have >= 1 then
        local granted = math.min(cost, have)
        tokens = tokens - granted
        store()
        return {1, 0, math.floor(tokens), granted, lease_ttl}
    end
    cost = 1
end

-- 1e-9: slack for rounding, as in rules/bucket.c
local wait = 0
if tokens < cost - 1e-9 then
    wait = math.ceil((cost - tokens) * 1000000 / rate)
    if wait < 1 then
        wait = 1
    end
end
local allowed = 0
if wait == 0 or (max_wait > 0 and wait <= max_wait) then
    allowed = 1
end
if allowed == 1 and not peek then
    tokens = tokens - cost
    store()
elseif repaired and not peek then
    store()   -- the bucket as it should be: a refusal then refills from now
end
if lease then
    return {allowed, wait, math.floor(tokens), allowed, lease_ttl}
end
return {allowed, wait, math.floor(tokens)}
