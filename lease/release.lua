-- leasequota release: give back `amount` unused tokens to a tenant's global bucket.
--
-- KEYS[1]  bucket key, a hash {tk = tokens ("%.17g"), ts = last update (Redis TIME, microseconds)}
-- ARGV[1]  rate: tokens added per second, a decimal number > 0
-- ARGV[2]  burst: bucket capacity, an integer >= 1
-- ARGV[3]  amount: tokens given back, an integer >= 0
-- KEYS[2], ARGV[4], ARGV[5]  optional deduplication: a sorted set {release id
--          = time applied} next to the bucket, this release's unique id, and
--          how long ids are kept, in milliseconds. A release whose id is in
--          the set was applied already (a client retried it after losing
--          the reply) and changes nothing, so tokens are never credited twice.
--
-- KEYS[3]  quota override (QuotaKey): when it holds r and b they replace
--          ARGV[1] and ARGV[2], as in acquire.lua. KEYS[2] is always passed
--          (so that KEYS[3] has a fixed place) but only touched with ARGV[4].
--
-- Returns {tokens now ("%.17g" string), now (microseconds, integer)}.
--
-- A missing key is a full bucket (it expires only once it has refilled to
-- burst), so releasing into it changes nothing: the key is not created and
-- the reply says the bucket holds burst tokens.

local function bad(what)
  return redis.error_reply('leasequota: bad argument: ' .. what)
end

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local amount = tonumber(ARGV[3])
if rate == nil or rate ~= rate or rate <= 0 or rate == math.huge then
  return bad('rate must be a finite number > 0, got ' .. tostring(ARGV[1]))
end
if burst == nil or burst ~= burst or burst < 1 or burst == math.huge or burst ~= math.floor(burst) then
  return bad('burst must be an integer >= 1, got ' .. tostring(ARGV[2]))
end
if amount == nil or amount ~= amount or amount < 0 or amount == math.huge or amount ~= math.floor(amount) then
  return bad('amount must be an integer >= 0, got ' .. tostring(ARGV[3]))
end

local q = redis.call('HMGET', KEYS[3], 'r', 'b')
if q[1] and q[2] then
  local orate = tonumber(q[1])
  local oburst = tonumber(q[2])
  if orate == nil or orate ~= orate or orate <= 0 or orate == math.huge or
     oburst == nil or oburst ~= oburst or oburst < 1 or oburst == math.huge or oburst ~= math.floor(oburst) then
    return redis.error_reply('leasequota: corrupt quota ' .. KEYS[3] .. ': delete the key or set the quota again')
  end
  rate, burst = orate, oburst
end

local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])

local key = KEYS[1]
local state = redis.call('HMGET', key, 'tk', 'ts')
if state[1] == false and state[2] == false then
  return {string.format('%.17g', burst), now}
end
local tk = tonumber(state[1])
local ts = tonumber(state[2])
if tk == nil or ts == nil or tk ~= tk or ts ~= ts then
  return redis.error_reply('leasequota: corrupt bucket ' .. key .. ': delete the key to reset it')
end

local elapsed = now - ts
if elapsed < 0 then
  elapsed = 0
end

local rid = ARGV[4]
if rid ~= nil and rid ~= '' then
  local keep = tonumber(ARGV[5])
  if keep == nil or keep ~= keep or keep < 1 or keep == math.huge then
    return bad('dedup window must be a number >= 1, got ' .. tostring(ARGV[5]))
  end
  local rkey = KEYS[2]
  if redis.call('ZSCORE', rkey, rid) then
    -- Applied before: report the bucket, change nothing.
    local current = tk + elapsed * rate / 1000000
    if current > burst then
      current = burst
    end
    return {string.format('%.17g', current), now}
  end
  redis.call('ZADD', rkey, now, rid)
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now - keep * 1000)
  redis.call('PEXPIRE', rkey, string.format('%d', keep))
end

local tokens = tk + elapsed * rate / 1000000 + amount
if tokens > burst then
  tokens = burst
end
if tokens < 0 then
  tokens = 0
end

redis.call('HSET', key, 'tk', string.format('%.17g', tokens), 'ts', string.format('%d', now))

-- Same expiry rule as acquire.lua: until full again, plus a second.
local ttl = math.ceil((burst - tokens) / rate * 1000) + 1000
if ttl < 1e15 then
  redis.call('PEXPIRE', key, string.format('%d', ttl))
else
  redis.call('PERSIST', key)
end

return {string.format('%.17g', tokens), now}
