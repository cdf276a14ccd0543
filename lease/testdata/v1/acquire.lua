-- leasequota acquire: take up to `want` tokens from a tenant's global bucket.
--
-- KEYS[1]  bucket key, a hash:
--            tk  tokens ("%.17g")
--            ts  when tk was computed (Redis TIME, microseconds)
--            hb, p1..p8  the burst the level history was recorded under,
--                and its entries, that release.lua credits against (see
--                common.lua)
-- ARGV[1]  rate: tokens added per second, a decimal number > 0
-- ARGV[2]  burst: bucket capacity, an integer >= 1
-- ARGV[3]  want: tokens requested, an integer >= 0 (0 only refills and reads)
-- KEYS[2], ARGV[4], ARGV[5], ARGV[6]  optional instance registry: a hash
--          {instance id = "last acquire (microseconds):demand (tokens/s)"}
--          next to the bucket, the caller's id, the window in milliseconds
--          within which an instance counts as active, and the caller's
--          demand. Stale entries are removed; the hash expires after 2
--          windows.
--          KEYS[2] is always passed (so that KEYS[3] has a fixed place) but
--          only touched when ARGV[4] is a non-empty id.
-- KEYS[3]  quota override (QuotaKey), a hash {r = rate, b = burst, min, max,
--          ttl (ns), mode} written by quota.lua, never expiring. When it holds
--          r and b they replace ARGV[1] and ARGV[2]: the override is the one
--          source of truth, and the caller learns it from the reply.
--
-- Returns {granted (integer), tokens left ("%.17g" string), now (microseconds,
-- integer), active instances (integer; 0 without a registry), override,
-- share}, where override is 0 when no override is stored, else the array of
-- strings {r, b, min, max, ttl, mode} as stored, and share is the caller's
-- max-min fair share of the rate (tokens/s, "%.17g") among the active
-- instances' demands, or "" without a registry.
-- Tokens are returned as a string because Redis truncates Lua numbers to integers.
--
-- The history records the refilled level before the debit, at the
-- bucket's time of this call (the reply's now, which a later release names
-- the grant by). A missing key is a bucket that was full until now; a hash
-- without a history (an older version wrote it), with an unreadable one or
-- with one recorded under another burst has an unknown past (common.lua).
--
-- common.lua (in front of this file) reads the bucket, the override and the
-- history, and stores the bucket; the only clock is Redis TIME.

local rate, burst = read_limits(1, '')
if rate == nil then
  return burst -- the error reply
end
local want = tonumber(ARGV[3])
if not whole(want, 0) then
  return bad('want must be an integer >= 0, got ' .. tostring(ARGV[3]))
end

-- The override, when one is stored, replaces the caller's rate and burst.
local override = 0
local q, orate, oburst = read_override(KEYS[3])
if q == nil then
  return orate -- the error reply
end
if orate ~= nil then
  rate, burst = orate, oburst
  override = {q[1], q[2], q[3] or '0', q[4] or '0', q[5] or '0', q[6] or '0'}
end

local key = KEYS[1]
local state, tokens, _, now = read_bucket(key, redis_now(), rate, burst)
if state == nil then
  return tokens -- the error reply
end
-- Record the level before the debit (see the header).
local h = history(state, now, burst)
history_push(h, now, tokens)

local instances = 0
local share = nil       -- this instance's max-min fair share, tokens/s
local credit = nil      -- this instance's fair-share credit, tokens
local capacity = nil    -- the most credit it may hold
local totalDemand = 0
local id = ARGV[4]
local ikey = KEYS[2]
local demand = 0
if id ~= nil and id ~= '' then
  local window = tonumber(ARGV[5])
  if window == nil or window ~= window or window < 1 or window == math.huge then
    return bad('window must be a number >= 1, got ' .. tostring(ARGV[5]))
  end
  demand = tonumber(ARGV[6] or '0')
  if demand == nil or demand ~= demand or demand < 0 or demand == math.huge then
    demand = 0
  end
  -- Entries are "last acquire (us):demand (tokens/s):credit (tokens)".
  local cutoff = now - window * 1000
  local all = redis.call('HGETALL', ikey)
  local demands = {demand}
  local prevSeen, prevCredit = nil, nil
  for i = 1, #all, 2 do
    local f = {}
    for part in string.gmatch(all[i + 1], '[^:]+') do
      f[#f + 1] = part
    end
    local seen = tonumber(f[1])
    if seen == nil or seen < cutoff then
      redis.call('HDEL', ikey, all[i])
    elseif all[i] == id then
      prevSeen, prevCredit = seen, tonumber(f[3])
    else
      instances = instances + 1
      demands[#demands + 1] = tonumber(f[2]) or 0
    end
  end
  instances = instances + 1 -- this one
  -- Max-min fair share of the rate among the reported demands
  -- (water-filling: the smallest demands are met in full, the rest split
  -- what remains evenly).
  table.sort(demands)
  local left = rate
  for k = 1, #demands do
    totalDemand = totalDemand + demands[k]
    local fair = left / (#demands - k + 1)
    local sk = demands[k]
    if sk > fair then
      sk = fair
    end
    if share == nil and demands[k] >= demand then
      share = sk
    end
    left = left - sk
  end
  -- The credit accrues at the share, up to the instance's share of the
  -- burst; a new instance starts full.
  capacity = burst * share / rate
  if capacity < 1 then
    capacity = 1
  end
  if prevCredit == nil or prevSeen == nil then
    credit = capacity
  else
    local since = now - prevSeen
    if since < 0 then
      since = 0
    end
    credit = prevCredit + share * since / 1000000
    if credit > capacity then
      credit = capacity
    end
  end
end

local granted = math.floor(tokens)
if want < granted then
  granted = want
end
-- Fair shares: while the active instances together ask for more than the
-- rate and the bucket is less than half full, an instance gets at most its
-- credit, so whoever asks first cannot take the tokens the others are
-- owed, and each gets about its max-min fair share. Otherwise (demand
-- below the rate, or a bucket at least half full, whose tokens would
-- otherwise overflow) everyone gets what it asks for and credit is reset.
if credit ~= nil then
  if totalDemand > rate and tokens < burst / 2 then
    local c = math.floor(credit)
    if granted > c then
      granted = c
    end
    credit = credit - granted
  else
    credit = capacity
  end
  redis.call('HSET', ikey, id, string.format('%d:%.17g:%.17g', now, demand, credit))
  redis.call('PEXPIRE', ikey, string.format('%d', tonumber(ARGV[5]) * 2))
end
tokens = tokens - granted

store(key, tokens, now, rate, burst, h, state)

local shareOut = ''
if share ~= nil then
  shareOut = string.format('%.17g', share)
end
return {granted, string.format('%.17g', tokens), now, instances, override, shareOut}
