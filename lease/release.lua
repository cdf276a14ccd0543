-- leasequota release: give back `amount` unused tokens to a tenant's global
-- bucket, crediting only what the bucket would hold had they never been
-- granted ("aged returns").
--
-- KEYS[1]  bucket key, a hash {tk, ts, s0, m0, s1, m1, hb, ta, mt} (see
--          acquire.lua and common.lua)
-- ARGV[1]  rate: tokens added per second, a decimal number > 0
-- ARGV[2]  burst: bucket capacity, an integer >= 1
-- ARGV[3]  amount: tokens given back, an integer >= 0
-- ARGV[4]  age: milliseconds, an integer >= 0: at least how long ago (Redis
--          time, when this script runs) the oldest of these tokens was granted
-- ARGV[5]  return window W: milliseconds, an integer >= 1: the roll period of
--          the level history (as in acquire.lua)
-- ARGV[6]  grant: when every returned token comes from one grant, the low 32
--          bits of its Redis time in microseconds (Grant.ID), else 0
-- KEYS[2], ARGV[7], ARGV[8]  optional deduplication: a sorted set {release id
--          = time applied} next to the bucket, this release's unique id, and
--          how long ids are kept, in milliseconds. A release whose id is in
--          the set was applied already (a client retried it after losing
--          the reply) and changes nothing, so tokens are never credited twice.
-- KEYS[3]  quota override (QuotaKey): when it holds r and b they replace
--          ARGV[1] and ARGV[2], as in acquire.lua. KEYS[2] is always passed
--          (so that KEYS[3] has a fixed place) but only touched with ARGV[7].
--
-- Returns {tokens now ("%.17g" string), now (microseconds, integer),
-- credited ("%.17g" string, 0..amount)}.
--
-- The credit. Let x be the refilled level now and P = max(m0, m1, x), an
-- upper bound of every level since s0. Tokens granted at g (>= s0) and
-- returned now: had they never been granted, the bucket would hold them on
-- top of what it holds now, except what it would have lost to the cap at its
-- highest level since g, so the credit is min(amount, burst - P) (0 if
-- negative). When g = now - age is before s0 the history does not cover the
-- grant and nothing is credited. A credit c is then applied to the history
-- too (m0, m1 and mt grow by c, staying <= burst): the levels of the bucket
-- without those tokens granted are c higher from g on, so a later return of
-- tokens granted before this release cannot use the same room below the cap
-- again. So after every release the level is exactly that of a bucket in
-- which the credited tokens were never granted, which keeps the bound
-- granted - credited <= burst + rate*T over every span T.
--
-- P counts the level just before the grant's own debit, so tokens granted
-- from a full bucket would never be credited. When all the returned tokens
-- come from the bucket's last acquire (ARGV[6] matches ta), P is instead mt:
-- the highest level since that acquire's debit, exactly the levels after
-- the grant. That is the common return of an instance's only lease (Close,
-- eviction, a lease expiring while nobody else acquired).
--
-- A missing key is a full bucket (it expires only once it has refilled to
-- burst), so releasing into it changes nothing: the key is not created, the
-- reply says the bucket holds burst tokens, and nothing is credited.

local rate = tonumber(ARGV[1])
local burst = tonumber(ARGV[2])
local amount = tonumber(ARGV[3])
local age = tonumber(ARGV[4])
local window = tonumber(ARGV[5])
local grant = tonumber(ARGV[6])
if not rate_ok(rate) then
  return bad('rate must be a finite number > 0, got ' .. tostring(ARGV[1]))
end
if not whole(burst, 1) then
  return bad('burst must be an integer >= 1, got ' .. tostring(ARGV[2]))
end
if not whole(amount, 0) then
  return bad('amount must be an integer >= 0, got ' .. tostring(ARGV[3]))
end
if not whole(age, 0) then
  return bad('age must be an integer >= 0 (ms), got ' .. tostring(ARGV[4]))
end
if not whole(window, 1) then
  return bad('return window must be an integer >= 1 (ms), got ' .. tostring(ARGV[5]))
end
if not whole(grant, 0) or grant >= 4294967296 then
  return bad('grant must be an integer in [0, 2^32), got ' .. tostring(ARGV[6]))
end

local q, orate, oburst = read_override(KEYS[3])
if q == nil then
  return orate -- the error reply
end
if orate ~= nil then
  rate, burst = orate, oburst
end

local now = redis_now()
local key = KEYS[1]
local state, x, missing = read_bucket(key, now, rate, burst)
if state == nil then
  return x -- the error reply
end
if missing then
  return {string.format('%.17g', burst), now, '0'}
end

local rid = ARGV[7]
if rid ~= nil and rid ~= '' then
  local keep = tonumber(ARGV[8])
  if keep == nil or keep ~= keep or keep < 1 or keep == math.huge then
    return bad('dedup window must be a number >= 1, got ' .. tostring(ARGV[8]))
  end
  local rkey = KEYS[2]
  if redis.call('ZSCORE', rkey, rid) then
    -- Applied before: report the bucket, change nothing, credit nothing.
    return {string.format('%.17g', x), now, '0'}
  end
  redis.call('ZADD', rkey, now, rid)
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now - keep * 1000)
  redis.call('PEXPIRE', rkey, string.format('%d', keep))
end

-- The level history (common.lua): unknown (missing, unreadable, or recorded
-- under another burst) means no credit for grants before now.
local h = observe(state, now, x, burst, window)

-- The highest level since the grant: when the tokens come from the last
-- acquire (its time matches grant; the age bounds how far apart two times
-- with the same low 32 bits could be), the levels since its debit, mt;
-- else the history's, if it covers the grant.
local peak = nil
if grant ~= 0 and h.ta ~= 0 and age * 1000 < 2147483648 and h.ta % 4294967296 == grant then
  peak = h.mt
elseif now - age * 1000 >= h.s0 then
  peak = h.m0
  if h.m1 > peak then
    peak = h.m1
  end
end
local credit = 0
if peak ~= nil then
  credit = burst - peak
  if credit > amount then
    credit = amount
  end
  if credit < 0 then
    credit = 0
  end
end
h.m0 = h.m0 + credit
h.m1 = h.m1 + credit
h.mt = h.mt + credit

local tokens = x + credit
if tokens > burst then
  tokens = burst
end
store(key, tokens, now, rate, burst, h)

return {string.format('%.17g', tokens), now, string.format('%.17g', credit)}
