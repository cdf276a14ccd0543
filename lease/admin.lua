-- leasequota admin: set or delete a tenant's quota override for a caller
-- that does not know the quota the services pass (the operator's command,
-- cmd/leasequota). quota.lua, which the services' SetQuota uses, takes that
-- quota as its base; this script never needs it, and never refills a bucket
-- at a rate it does not know.
--
-- KEYS[1]  bucket key (see acquire.lua)
-- KEYS[2]  quota override key (QuotaKey; see quota.lua)
-- ARGV[1]  op: "set" or "del"
-- ARGV[2..7]  set only: r, b, min, max, ttl, mode of the new override
-- ARGV[8]  set only: the tenant's name, stored as n (for listing)
--
-- Returns {tokens ("%.17g" string, or "" when the bucket is left missing),
-- now (microseconds), had (1 when an override was stored before, else 0)}.
--
-- set. The quota in force before the change is the stored override when
-- there is one: the bucket is refilled at its rate up to now and capped at
-- its burst, as quota.lua does. Without one it is the services' quota,
-- which this script does not know: the bucket is not refilled since its
-- last write (ts), only capped at the new burst; the refill it had coming
-- at the unknown rate is forgone, so the change never refills for free (at
-- most it takes from the tenant the refill since its last lease call). A
-- missing bucket with no override stored is left missing: the next acquire
-- creates it full at the new burst, which is within the change's bound (a
-- bucket of the new quota starting with at most its burst). A missing
-- bucket under an override is full at the override's burst, capped at the
-- new one and stored. Then the bucket is stored at the new rate and burst
-- (its TTL with them), with the level history restarted as quota.lua does
-- (one entry (now, max(old burst, new burst)), the old burst being the one the
-- history was recorded under when no override was stored), and its
-- registry summary dropped, as quota.lua does.
--
-- del. Without a stored override nothing changes. With one, the bucket is
-- refilled at the override's rate up to now and capped at its burst (a
-- missing bucket is full at that burst), stored at that level with ts =
-- now and its history restarted at that burst, its registry summary
-- dropped, and kept without expiry
-- (PERSIST): the quota that applies next is the services', which only the
-- services know, so the next acquire refills from now at their rate, caps
-- at their burst (and restarts the history when their burst differs) and
-- sets the key's TTL. Expiring the key earlier would make it full at the
-- services' burst before it refilled to that at their rate.
--
-- Both raise nothing else; the caller raises the quota version.

local key, qkey = KEYS[1], KEYS[2]
local op = ARGV[1]
if op ~= 'set' and op ~= 'del' then
  return bad('op must be set or del, got ' .. tostring(op))
end

local q = redis.call('HMGET', qkey, 'r', 'b', 'min', 'max', 'ttl', 'mode')
local oldRate, oldBurst = nil, nil
if q[1] and q[2] then
  oldRate, oldBurst = tonumber(q[1]), tonumber(q[2])
  -- Corrupt as read_override judges it (the acquires failed under it):
  -- its rate was never in force, and is not known either (quota.lua).
  if override_problem(q[1], q[2], q[3] or '0', q[4] or '0', q[5] or '0', q[6] or '0') then
    oldRate, oldBurst = nil, nil
  end
end
-- An override is stored when r and b are, as every script reads it
-- (read_override, quota.lua's get): a hash without them (b alone, the
-- name alone) is none, and deleting it changes no quota. Taken for one
-- (EXISTS), a delete reported it deleted and raised the quota version.
local had = 0
if q[1] and q[2] then
  had = 1
end
local clock = redis_now()

if op == 'set' then
  local why = override_problem(ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7])
  if why then
    return bad(why)
  end
  local newRate, newBurst = tonumber(ARGV[2]), tonumber(ARGV[3])
  if ARGV[8] == nil then
    return bad('set wants the tenant name')
  end
  local state, tokens, missing, now
  if oldRate ~= nil then
    state, tokens, missing, now = read_bucket(key, clock, oldRate, oldBurst)
  else
    -- No refill (rate 0); the cap at the new burst comes below.
    state, tokens, missing, now = read_bucket(key, clock, 0, newBurst)
  end
  if state == nil then
    return tokens -- the error reply
  end
  local out = ''
  if not (missing and oldRate == nil) then
    if tokens > newBurst then
      tokens = newBurst
    end
    local top = newBurst
    local prev = oldBurst or state[14]
    if prev ~= nil and prev == prev and prev > top then
      top = prev
    end
    store(key, tokens, now, newRate, newBurst, {now, level_code(top)}, state, nil, clock)
    out = string.format('%.17g', tokens)
    -- The registry summary's water level was the old rate's (quota.lua).
    if state[13] then
      redis.call('HDEL', key, 'rg')
    end
  end
  redis.call('DEL', qkey)
  redis.call('HSET', qkey, 'r', ARGV[2], 'b', ARGV[3], 'min', ARGV[4], 'max', ARGV[5], 'ttl', ARGV[6], 'mode', ARGV[7], 'n', ARGV[8])
  return {out, clock, had}
end

-- del
if had == 0 then
  return {'', clock, 0}
end
if oldRate == nil then
  -- A corrupt override: remove it and leave the bucket to the services.
  redis.call('DEL', qkey)
  return {'', clock, 1}
end
local state, tokens, _, now = read_bucket(key, clock, oldRate, oldBurst)
if state == nil then
  return tokens -- the error reply
end
store(key, tokens, now, oldRate, oldBurst, {now, level_code(oldBurst)}, state, nil, clock)
if state[13] then
  redis.call('HDEL', key, 'rg') -- the override's rate's (quota.lua)
end
redis.call('PERSIST', key)
redis.call('DEL', qkey)
return {string.format('%.17g', tokens), now, 1}
