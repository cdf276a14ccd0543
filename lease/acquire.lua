-- leasequota acquire: take up to `want` tokens from a tenant's global bucket.
--
-- KEYS[1]  bucket key, a hash {tk = tokens ("%.17g"), ts = last update (Redis TIME, microseconds)}
-- ARGV[1]  rate: tokens added per second, a decimal number > 0
-- ARGV[2]  burst: bucket capacity, an integer >= 1
-- ARGV[3]  want: tokens requested, an integer >= 0 (0 only refills and reads)
-- KEYS[2], ARGV[4], ARGV[5]  optional instance registry: a hash {instance id =
--          last acquire (microseconds)} next to the bucket, the caller's id,
--          and the window in milliseconds within which an instance counts as
--          active. Stale entries are removed; the hash expires after 2 windows.
--
-- Returns {granted (integer), tokens left ("%.17g" string), now (microseconds,
-- integer), active instances (integer; 0 without a registry)}.
-- Tokens are returned as a string because Redis truncates Lua numbers to integers.
--
-- The only clock is the Redis server's TIME, so every instance sees the same
-- time line. Redis 7 replicates scripts by their effects (the HSET below
-- carries the computed values), so reading TIME before writing is safe.

local function bad(what)
  return redis.error_reply('leasequota: bad argument: ' .. what)
end

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local want = tonumber(ARGV[3])
-- x ~= x catches NaN; comparisons with math.huge catch infinities.
if rate == nil or rate ~= rate or rate <= 0 or rate == math.huge then
  return bad('rate must be a finite number > 0, got ' .. tostring(ARGV[1]))
end
if burst == nil or burst ~= burst or burst < 1 or burst == math.huge or burst ~= math.floor(burst) then
  return bad('burst must be an integer >= 1, got ' .. tostring(ARGV[2]))
end
if want == nil or want ~= want or want < 0 or want == math.huge or want ~= math.floor(want) then
  return bad('want must be an integer >= 0, got ' .. tostring(ARGV[3]))
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local key = KEYS[1]
local tokens
local state = redis.call('HMGET', key, 'tk', 'ts')
if state[1] == false and state[2] == false then
  -- No key: never used, or expired because it had refilled to full.
  tokens = burst
else
  local tk = tonumber(state[1])
  local ts = tonumber(state[2])
  if tk == nil or ts == nil or tk ~= tk or ts ~= ts then
    return redis.error_reply('leasequota: corrupt bucket ' .. key .. ': delete the key to reset it')
  end
  -- A clock that went backwards (e.g. failover to a replica whose clock
  -- lags) refills nothing rather than going negative.
  local elapsed = now - ts
  if elapsed < 0 then
    elapsed = 0
  end
  tokens = tk + elapsed * rate / 1000000
  if tokens > burst then
    tokens = burst
  end
  if tokens < 0 then
    tokens = 0
  end
end

local granted = math.floor(tokens)
if want < granted then
  granted = want
end
tokens = tokens - granted

redis.call('HSET', key, 'tk', string.format('%.17g', tokens), 'ts', string.format('%d', now))

-- Keep the key until the bucket would be full again, plus a second: a
-- missing key means a full bucket, so expiring it then changes nothing.
-- Beyond ~31,700 years (and for an infinite quotient) keep it for ever: the
-- number would not fit PEXPIRE, and any finite cap would refill early.
local ttl = math.ceil((burst - tokens) / rate * 1000) + 1000
if ttl < 1e15 then
  redis.call('PEXPIRE', key, string.format('%d', ttl))
else
  redis.call('PERSIST', key)
end

local instances = 0
local id = ARGV[4]
if id ~= nil and id ~= '' then
  local window = tonumber(ARGV[5])
  if window == nil or window ~= window or window < 1 or window == math.huge then
    return bad('window must be a number >= 1, got ' .. tostring(ARGV[5]))
  end
  local ikey = KEYS[2]
  redis.call('HSET', ikey, id, string.format('%d', now))
  local cutoff = now - window * 1000
  local all = redis.call('HGETALL', ikey)
  for i = 1, #all, 2 do
    local seen = tonumber(all[i + 1])
    if seen == nil or seen < cutoff then
      redis.call('HDEL', ikey, all[i])
    else
      instances = instances + 1
    end
  end
  redis.call('PEXPIRE', ikey, string.format('%d', window * 2))
end

return {granted, string.format('%.17g', tokens), now, instances}
