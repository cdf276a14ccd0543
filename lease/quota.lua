-- leasequota quota: read, set or delete a tenant's quota override, keeping
-- its bucket consistent across the change.
--
-- KEYS[1]  bucket key (see acquire.lua)
-- KEYS[2]  quota override key (QuotaKey): a hash {r = rate, b = burst,
--          min, max, ttl (ns), mode, n = the tenant's name}, never expiring.
--          n is for listing (Client.ListOverrides: a hashed key does not
--          give the name back); no script reads it, and overrides written
--          by clients before it have none.
-- ARGV[1]  op: "get", "set" or "del"
-- ARGV[2]  base rate and ARGV[3] base burst (set, del): the quota the
--          callers apply without an override, i.e. what they pass to
--          acquire.lua. It is the old quota when no override is stored (set)
--          and the new one (del).
-- ARGV[4..9]  set only: r, b, min, max, ttl, mode of the new override.
-- ARGV[10] set only, optional: the tenant's name, stored as n.
--
-- get returns 0 when no override is stored, else {r, b, min, max, ttl, mode}.
-- set and del return {tokens ("%.17g" string), now (microseconds)}: the
-- bucket after the change.
--
-- A change first refills the bucket at the OLD effective rate up to now
-- (capped at the old burst), then caps the tokens at the NEW burst, and
-- stores them with ts = now, so every later refill runs at the new rate:
-- there is no free refill across the change, and nothing is lost beyond
-- the new cap. A missing bucket is full at the old burst.
--
-- On a frozen bucket (ts after the clock: reservations, see acquire.lua)
-- the refill up to ts is committed, so read_bucket takes the bucket's time
-- as ts + 1 µs and the change is stored at that time: tk (available now)
-- is capped at the new burst, and the new rate refills only from ts on.
-- The reserved tokens, produced at the old rate before ts, stay
-- committed; no token becomes available earlier than before the change.
--
-- Every set and del also drops the bucket's registry summary (rg), whose
-- water level was computed for the old rate.
--
-- Every set and del (whatever the old and new burst) also makes the
-- bucket's level history (common.lua) unknown before now: it restarts as
-- one entry (now, max(old burst, new burst)) recorded under the new burst. Tokens granted
-- before the change are then never credited by release.lua (peaks measured
-- under one cap say nothing about the room below another); grants after it
-- are creditable as before.

local key, qkey = KEYS[1], KEYS[2]
local op = ARGV[1]
local q = redis.call('HMGET', qkey, 'r', 'b', 'min', 'max', 'ttl', 'mode')
local stored = q[1] and q[2]

if op == 'get' then
  if not stored then
    return 0
  end
  return {q[1], q[2], q[3] or '0', q[4] or '0', q[5] or '0', q[6] or '0'}
end
if op ~= 'set' and op ~= 'del' then
  return bad('op must be get, set or del, got ' .. tostring(op))
end

local baseRate, baseBurst = read_limits(2, 'base ')
if baseRate == nil then
  return baseBurst -- the error reply
end

-- The quota in force now.
local oldRate, oldBurst = baseRate, baseBurst
if stored then
  oldRate, oldBurst = tonumber(q[1]), tonumber(q[2])
  -- A corrupt override is replaced: take the base quota as the old one.
  -- Corrupt as read_override judges it (acquire.lua and release.lua fail
  -- under it, so it was never in force): judged by rate_ok alone, a rate
  -- past MAX_RATE or written as hex refilled the bucket at it, full at
  -- once (TestQuotaChangeOverACorruptOverride).
  if override_problem(q[1], q[2], q[3] or '0', q[4] or '0', q[5] or '0', q[6] or '0') then
    oldRate, oldBurst = baseRate, baseBurst
  end
end

-- The quota in force after the change.
local newRate, newBurst = baseRate, baseBurst
if op == 'set' then
  local why = override_problem(ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9])
  if why then
    return bad(why)
  end
  newRate, newBurst = tonumber(ARGV[4]), tonumber(ARGV[5])
end

local clock = redis_now()
local state, tokens, _, now = read_bucket(key, clock, oldRate, oldBurst)
if state == nil then
  return tokens -- the error reply
end
if tokens > newBurst then
  tokens = newBurst
end

-- The history starts anew (see the header).
local top = oldBurst
if newBurst > top then
  top = newBurst
end
store(key, tokens, now, newRate, newBurst, {now, level_code(top)}, state, nil, clock)
-- The registry summary (acquire.lua's rg) holds a water level computed
-- for the old rate: dropped, the next acquire recomputes it for the new
-- one, where it would otherwise size fair shares and credits by the old
-- rate for up to an eighth of a window. Every release recomputes a
-- missing summary.
if state[13] then
  redis.call('HDEL', key, 'rg')
end

if op == 'set' then
  redis.call('DEL', qkey)
  if ARGV[10] then
    redis.call('HSET', qkey, 'r', ARGV[4], 'b', ARGV[5], 'min', ARGV[6], 'max', ARGV[7], 'ttl', ARGV[8], 'mode', ARGV[9], 'n', ARGV[10])
  else
    redis.call('HSET', qkey, 'r', ARGV[4], 'b', ARGV[5], 'min', ARGV[6], 'max', ARGV[7], 'ttl', ARGV[8], 'mode', ARGV[9])
  end
else
  redis.call('DEL', qkey)
end
return {string.format('%.17g', tokens), now}
