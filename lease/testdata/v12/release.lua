-- leasequota release: give back `amount` unused tokens to a tenant's global
-- bucket, crediting only what the bucket would hold had they never been
-- granted ("aged returns").
--
-- KEYS[1]  bucket key, a hash {tk, ts, h} (see acquire.lua and common.lua)
-- ARGV[1]  rate: tokens added per second, a decimal number > 0
-- ARGV[2]  burst: bucket capacity, an integer >= 1
-- ARGV[3]  amount: tokens given back, an integer >= 0
-- ARGV[4]  age: milliseconds, an integer >= 0: at least how long ago (Redis
--          time, when this script runs) the oldest of these tokens was granted
-- ARGV[5]  grant: the oldest grant these tokens come from, as the low 32 bits
--          of its time in microseconds (the acquire's reply's now; Grant.ID),
--          or 0 for unknown
-- KEYS[2], ARGV[6], ARGV[7]  optional deduplication: a sorted set {release id
--          = time applied} next to the bucket, this release's unique id, and
--          how long ids are kept, in milliseconds. A release whose id is in
--          the set was applied already (a client retried it after losing
--          the reply) and changes nothing, so tokens are never credited twice.
--          The window is a number of ms in [1, 1e15].
-- KEYS[3]  quota override (QuotaKey): when it holds r and b they replace
--          ARGV[1] and ARGV[2], as in acquire.lua. KEYS[2] is always passed
--          (so that KEYS[3] has a fixed place) but only touched with ARGV[6].
--
-- Returns one string of three fields separated by single spaces, "tokens
-- now credited": the tokens now ("%.17g"), now (the bucket's time,
-- microseconds) and the tokens credited ("%.17g", 0..amount). Releases
-- before this one replied with an array of the same values; each client
-- reads the replies of the script it loaded (see acquire.lua).
--
-- The credit. The tokens were granted at g or later, where g is the grant's
-- own time when ARGV[5] names it: the latest time before now with those
-- low 32 bits, which is the grant's when the earliest time the age allows
-- for it, clock - age, is less than 2^32 microseconds (about 71 minutes)
-- before now (the age need not be exact then, so a release that reaches
-- Redis late is still judged from its grant; and now, which runs up to
-- ReserveAhead ahead of the clock on a frozen bucket, counts: with the age
-- alone below 2^32 µs, a grant more than 2^32 µs before now was taken for
-- the time 2^32 µs after it, and the levels between left out of the peak,
-- TestNamedGrantOfAFrozenBucketNearTheWrap); else
-- clock - age, Redis's clock less the age (the bucket's time, now, runs
-- ahead of the clock while its refill is reserved, and the grant was made
-- no earlier than the clock then). And g is before now, since the grant
-- was an earlier call on the bucket. Had they never been granted, the bucket
-- would hold them on top of what it holds now, except what it would have
-- lost to the cap at its highest level P since then; so the credit is
-- min(amount, burst - P) (0 if negative), with P = the highest level over
-- (g, now] that the level history (common.lua) gives: exact, or higher.
-- Naming the grant leaves its own level before the debit out of P, so tokens
-- leased from a full bucket can come back; with clock - age alone, that
-- level (and any between clock - age and the grant) counts.
--
-- A credit c is then applied to the history too: every entry after g grows
-- by c (staying <= burst), since the bucket without those tokens granted
-- was c higher since, so a later return cannot use the same room below the
-- cap again. So after every release the level is exactly that of a bucket
-- in which the credited tokens were never granted, which keeps the bound
-- granted - credited <= burst + rate*T over every span T.
--
-- A missing key is a full bucket (it expires only once it has refilled to
-- burst), so releasing into it changes nothing: the key is not created, the
-- reply says the bucket holds burst tokens, and nothing is credited.

-- The level history's functions that only a release needs (the list is
-- common.lua's), here so that the other scripts do not make them on
-- every call.

-- history_peak returns the highest level over (after, now], x being the
-- level now.
local function history_peak(h, after, x)
  for i = 1, #h / 2 do
    if h[2 * i - 1] > after then
      local l = code_level(h[2 * i])
      if l > x then
        return l
      end
      return x
    end
  end
  return x
end

-- history_raise adds c to every entry after after (the bucket without the
-- credited tokens granted was c higher since), rounded up, then keeps only
-- the entries above every later one.
local function history_raise(h, after, c)
  local n = #h / 2
  for i = n, 1, -1 do
    if h[2 * i - 1] <= after then
      break
    end
    -- Rounded up to the grid, as every level (common.lua): higher only
    -- credits a later return less.
    h[2 * i] = level_code(code_level(h[2 * i]) + c)
  end
  -- Kept: from the newest back, each entry above the last kept (codes rise
  -- with the levels), moved to the end of h, then shifted to its front.
  local k = n -- the oldest kept is entry k
  for i = n - 1, 1, -1 do
    if h[2 * i] > h[2 * k] then
      k = k - 1
      h[2 * k - 1], h[2 * k] = h[2 * i - 1], h[2 * i]
    end
  end
  for i = 1, n - k + 1 do
    h[2 * i - 1], h[2 * i] = h[2 * (k + i - 1) - 1], h[2 * (k + i - 1)]
  end
  for j = 2 * n, 2 * (n - k + 1) + 1, -1 do
    h[j] = nil
  end
end

local rate, burst = read_limits(1, '')
if rate == nil then
  return burst -- the error reply
end
local amount = tonumber(ARGV[3])
local age = tonumber(ARGV[4])
local grant = tonumber(ARGV[5])
if not whole(amount, 0) then
  return bad('amount must be an integer >= 0, got ' .. tostring(ARGV[3]))
end
if not whole(age, 0) then
  return bad('age must be an integer >= 0 (ms), got ' .. tostring(ARGV[4]))
end
if not whole(grant, 0) or grant >= 4294967296 then
  return bad('grant must be an integer in [0, 2^32), got ' .. tostring(ARGV[5]))
end

local btext = ARGV[2] -- the text burst was read from
local q, orate, oburst = read_override(KEYS[3])
if q == nil then
  return orate -- the error reply
end
if orate ~= nil then
  rate, burst, btext = orate, oburst, q[2]
end

local key = KEYS[1]
local clock = redis_now()
local state, x, missing, now = read_bucket(key, clock, rate, burst, btext)
if state == nil then
  return x -- the error reply
end
if missing then
  return string.format('%s %d 0', fmt17(burst), now)
end

local rid = ARGV[6]
if rid ~= nil and rid ~= '' then
  local keep = tonumber(ARGV[7])
  -- At most 1e15 ms (as roster.lua's window): PEXPIRE takes it as %d,
  -- which is -2^63 for a larger number, and a negative TTL deletes the
  -- set just written: a retried release was credited again.
  if keep == nil or keep ~= keep or keep < 1 or keep > 1e15 then
    return bad('dedup window must be a number in [1, 1e15] (ms), got ' .. tostring(ARGV[7]))
  end
  local rkey = KEYS[2]
  if redis.call('ZSCORE', rkey, rid) then
    -- Applied before: report the bucket, change nothing, credit nothing.
    return string.format('%s %d 0', fmt17(x), now)
  end
  redis.call('ZADD', rkey, now, rid)
  redis.call('ZREMRANGEBYSCORE', rkey, '-inf', now - keep * 1000)
  redis.call('PEXPIRE', rkey, string.format('%d', keep))
end

-- The level history (common.lua): an unknown past (missing, unreadable, or
-- recorded under another burst) means no credit for grants before now.
local h = history(state, now, burst)

-- When the tokens were granted (see the header). The age was measured
-- against Redis's clock, which a frozen bucket's time runs ahead of: from
-- now, the grant would seem later than calls made after it, and their
-- levels would be left out of the peak (more credit than owed).
local g = clock - age * 1000
if grant ~= 0 and now - g < 4294967296 then
  g = now - (now - grant) % 4294967296
end
-- Every grant was made by an earlier call, at an earlier bucket time.
if g >= now then
  g = now - 1
end
local credit = burst - history_peak(h, g, x)
if credit > amount then
  credit = amount
end
-- A frozen bucket (ts after the clock, see acquire.lua): the credit goes
-- into tk, available now, and store keeps ts (the bucket's time now is
-- ts + 1 µs), so the reservations' commitment is kept. That is right for
-- returned tokens that exist (granted at once, or reserved and produced),
-- and a client returns only those: the syncer drops a reservation's
-- tokens still to come, never returns them. Returned before the bucket
-- produced them, a reservation's tokens would be available at once: a
-- reservation of r returned whole just after it was made would let
-- another instance take r above burst + rate*T. (Crediting at most
-- amount - ceil((ts - clock)*rate) on a frozen bucket would make even
-- that safe, at up to a token per release while the bucket's time runs
-- ahead of the clock; not done.)
if credit < 0 then
  credit = 0
end
history_raise(h, g, credit)

local tokens = x + credit
if tokens > burst then
  tokens = burst
end
local tk = store(key, tokens, now, rate, burst, h, state, nil, clock)

return string.format('%s %d %s', tk, now, fmt17(credit))
