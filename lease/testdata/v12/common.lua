-- leasequota common: the functions every leasequota script uses. The Go
-- side puts this file in front of acquire.lua, release.lua and quota.lua
-- (Redis scripts cannot load one another), so they read one bucket, one
-- override and one level history the same way.
--
-- A bucket is a hash {tk = tokens ("%.17g"), ts = when tk was computed
-- (Redis TIME, microseconds; after the clock for a frozen bucket: tk
-- tokens available now and no refill until ts, see acquire.lua), h = the
-- level history and the burst it was recorded under, packed (below),
-- rg = the summary of the instance registry that acquire.lua keeps,
-- sh = the rate shares in force (below), only while some are, and ol =
-- when rg's last recompute saw a client that does not honour shares
-- (acquire.lua's SHARES), only while one does}. The
-- history (see below, and the Go model in internal/peaks, which the tests
-- hold these functions to) is what release.lua credits returned tokens
-- against. Clients of the previous release kept the history as hb (its
-- burst) and p1..p8 (one entry "time:level" each) instead: see history and
-- store for how the two layouts share a bucket.

local function bad(what)
  return redis.error_reply('leasequota: bad argument: ' .. what)
end

-- x ~= x catches NaN; comparisons with math.huge catch infinities.
local function rate_ok(x)
  return x ~= nil and x == x and x > 0 and x ~= math.huge
end

local function whole(x, least)
  return x ~= nil and x == x and x >= least and x ~= math.huge and x == math.floor(x)
end

-- check_limits returns the rate and burst given as the strings r and b,
-- or nil and a bad-argument reply naming them with prefix (e.g. 'base ').
local function check_limits(r, b, prefix)
  local rate, burst = tonumber(r), tonumber(b)
  if not rate_ok(rate) then
    return nil, bad(prefix .. 'rate must be a finite number > 0, got ' .. tostring(r))
  end
  if not whole(burst, 1) then
    return nil, bad(prefix .. 'burst must be an integer >= 1, got ' .. tostring(b))
  end
  return rate, burst
end

-- read_limits returns the rate and burst in ARGV[i] and ARGV[i + 1], as
-- check_limits does.
local function read_limits(i, prefix)
  return check_limits(ARGV[i], ARGV[i + 1], prefix)
end

-- redis_now returns Redis TIME in microseconds: the only clock, so every
-- instance sees the same time line. Redis 7 replicates scripts by their
-- effects (the writes carry the computed values), so reading TIME before
-- writing is safe.
local function redis_now()
  local t = redis.call('TIME')
  -- TIME's two strings are always numbers: arithmetic converts each once,
  -- where tonumber converts twice (it checks, then converts).
  return t[1] * 1000000 + t[2]
end

-- whole15 reports whether x is a whole number of at most 15 digits and
-- not -0: one whose "%.17g" is its "%d", which costs a third as much
-- (glibc formats a %g through multi-precision arithmetic). Most numbers
-- stored are such (a full bucket's tokens and level, demands, credits,
-- the water level -1).
local function whole15(x)
  return x % 1 == 0 and x < 1e15 and x > -1e15 and (x ~= 0 or 1 / x > 0)
end

-- fmt17 returns string.format('%.17g', x), the way every number that is
-- not a time is stored: it reads back exactly.
local function fmt17(x)
  if whole15(x) then
    return string.format('%d', x)
  end
  return string.format('%.17g', x)
end

-- The most a quota may be (lease.MaxRate, lease.MaxBurst): the clients
-- refuse more, so an override stored with more could not be read back.
local MAX_RATE, MAX_BURST = 1e12, 1099511627776

-- decimal reports whether text is a decimal number as Go's ParseFloat and
-- Lua's tonumber both read it: digits with at most one point, and an
-- optional exponent; no sign, space or hex (tonumber takes ' 5' and
-- '0x10', which the clients refuse).
local function decimal(text)
  return type(text) == 'string' and text:find('^%d*%.?%d*$') ~= nil and text:find('%d') ~= nil or
    type(text) == 'string' and text:find('^%d*%.?%d*[eE][-+]?%d+$') ~= nil and text:find('^%.?%d') ~= nil
end

-- digits reports whether text is a whole number >= 0 as the clients read
-- it (Go's ParseInt into an int64): digits only, at most 2^63 - 1.
local function digits(text)
  return type(text) == 'string' and text:find('^%d+$') ~= nil and
    (#text < 19 or #text == 19 and text <= '9223372036854775807')
end

-- override_problem returns why the texts of an override's fields (r, b,
-- min, max, ttl, mode) are not what the clients read back (lease's
-- overrideOf, Override.Validate), or nil when they are: the rate a
-- decimal number in (0, MAX_RATE], the burst a whole number in
-- 1..MAX_BURST, the lease fields whole numbers >= 0, the mode 0..255. An
-- override they cannot read would fail every acquire of its tenant after
-- the script had debited the bucket: the tokens lost, call after call.
local function override_problem(r, b, mn, mx, ttl, mode)
  local rate, burst = tonumber(r), tonumber(b)
  if not decimal(r) or not rate_ok(rate) or rate > MAX_RATE then
    return 'rate must be a decimal number in (0, 1e12], got ' .. tostring(r)
  end
  if not digits(b) or burst < 1 or burst > MAX_BURST then
    return 'burst must be an integer in 1..2^40, got ' .. tostring(b)
  end
  local lease = {mn, mx, ttl}
  for i = 1, 3 do
    if not digits(lease[i]) then
      return 'lease field ' .. i .. ' must be an integer >= 0, got ' .. tostring(lease[i])
    end
  end
  if not digits(mode) or tonumber(mode) > 255 then
    return 'mode must be an integer in 0..255, got ' .. tostring(mode)
  end
  return nil
end

-- read_override returns the override stored at qkey, as HMGET of r, b, min,
-- max, ttl, mode, and its rate and burst (nil for none); or, for a corrupt
-- one, nil and an error reply. Most tenants have none: EXISTS answers for
-- them with one integer, where HMGET's six nils, made into a Lua table,
-- cost about 8k more instructions a call (callgrind).
local function read_override(qkey)
  if redis.call('EXISTS', qkey) == 0 then
    return {}, nil, nil
  end
  local q = redis.call('HMGET', qkey, 'r', 'b', 'min', 'max', 'ttl', 'mode')
  if not (q[1] and q[2]) then
    return q, nil, nil
  end
  -- Fields a client of an earlier release did not store read as 0.
  if override_problem(q[1], q[2], q[3] or '0', q[4] or '0', q[5] or '0', q[6] or '0') then
    return nil, redis.error_reply('leasequota: corrupt quota ' .. qkey .. ': delete the key or set the quota again')
  end
  return q, tonumber(q[1]), tonumber(q[2])
end

-- level_code returns the code of the grid value that level l (>= 0) rounds
-- up to (see the level history below): 0 for 0; for l of 128 and more,
-- ceil(l) + 4609 (whole tokens); below 128, 1 + 128(e + 29) + j for the
-- grid value (128 + j)2^(e - 8) (j in 0..127, 8 significant bits: less
-- than a 128th of the level above it) that l rounds up to, l being in
-- [2^(e - 1), 2^e); 1 (the value 2^-30) for l below 2^-30. Codes rise with
-- the values. code_level is the value of a code.
local function level_code(l)
  if l <= 0 then
    return 0
  end
  if l >= 128 then
    return math.ceil(l) + 4609
  end
  local _, e = math.frexp(l)
  if e < -29 then
    return 1
  end
  return (e + 29) * 128 + math.ceil(math.ldexp(l, 8 - e)) - 127
end

local function code_level(c)
  if c <= 0 then
    return 0
  end
  if c >= 4737 then
    return c - 4609
  end
  local j = (c - 1) % 128
  return math.ldexp(j + 128, (c - 1 - j) / 128 - 37)
end

-- history_merge merges the two neighbouring entries of the level history h
-- (at least 2 entries; see the level history below) whose levels differ
-- least: the later one takes the earlier one's level and the earlier one
-- goes. A level recorded higher, for a time, only credits a later return
-- less. Both history_push (past HISTORY entries) and store (past
-- HISTORY_BYTES) merge this way.
local function history_merge(h)
  local n = #h / 2
  local best, least = 1, nil
  local prev = code_level(h[2])
  for i = 1, n - 1 do
    local lower = code_level(h[2 * i + 2])
    if least == nil or prev - lower < least then
      best, least = i, prev - lower
    end
    prev = lower
  end
  h[2 * best + 2] = h[2 * best]
  for j = 2 * best - 1, 2 * n - 2 do
    h[j] = h[j + 2]
  end
  h[2 * n - 1], h[2 * n] = nil, nil
end

-- full_history returns field h (see the level history below) of a bucket
-- whose history is one entry, at its ts, at burst: what an acquire that
-- finds its bucket full writes. Most acquires find that there and write
-- it again, so it is made without a table: burst's varint bytes, then z =
-- 0 and o = 0. nil for a burst of 2^52 or more (no history is kept).
local function full_history(burst)
  -- Up to 8 bytes of 7 bits (burst < 2^52) made into one string: one
  -- built byte by byte would be made (and hashed) once a byte, and a
  -- table is an allocation. (x % 128 is an operator, math.floor a call.)
  if burst < 128 then
    return string.char(burst, 0, 0)
  end
  if burst >= 4503599627370496 then
    return nil
  end
  local b1 = burst % 128
  local q1 = (burst - b1) / 128
  if q1 < 128 then
    return string.char(b1 + 128, q1, 0, 0)
  end
  local b2 = q1 % 128
  local q2 = (q1 - b2) / 128
  if q2 < 128 then
    return string.char(b1 + 128, b2 + 128, q2, 0, 0)
  end
  local b3 = q2 % 128
  local q3 = (q2 - b3) / 128
  if q3 < 128 then
    return string.char(b1 + 128, b2 + 128, b3 + 128, q3, 0, 0)
  end
  local b4 = q3 % 128
  local q4 = (q3 - b4) / 128
  if q4 < 128 then
    return string.char(b1 + 128, b2 + 128, b3 + 128, b4 + 128, q4, 0, 0)
  end
  -- 2^35 and more, rarer.
  local b = {}
  local n = 0
  while burst >= 128 do
    local r = burst % 128
    n = n + 1
    b[n] = r + 128
    burst = (burst - r) / 128
  end
  b[n + 1], b[n + 2], b[n + 3] = burst, 0, 0
  return string.char(unpack(b, 1, n + 3))
end

-- Rate shares (docs/design.md, "Rate shares"; lease.Shares in Go, which
-- these functions are held to). A bucket may record the shares in force
-- in field sh, "epoch:committed:booked:period:phase": the epoch of ts, the
-- sum of the shares in force in it and the part of that sum booked into
-- the epoch after it (tokens/s), and the epochs' length and offset (µs;
-- epoch e is [e*period + phase, (e+1)*period + phase)). The bucket refills
-- at the rate less the shares in force, so that the two together make the
-- rate. Every script honours the record (every refill and every TTL goes
-- through these functions); acquire.lua alone grants shares.

-- EPOCH_TIME bounds the epochs' times (2^53 µs), so that every boundary
-- is a double computed exactly.
local EPOCH_TIME = 9007199254740992

-- MAX_SHARE_INSTANCES is the most instances a share ask may expect
-- (lease.MaxShareInstances): the ask's optional fifth term.
local MAX_SHARE_INSTANCES = 1048576

-- refill_shares returns the level of a bucket that held tokens at from
-- (µs), refilled up to burst as of to (>= from), and the shares in force
-- then (nil for none): at rate less the shares in force in each epoch (at
-- least 0), then, once none is, at rate; at an epoch's end only its booked
-- part stays in force. sh (nil for none) is not changed. At most three
-- pieces, whatever the time between (lease.RefillShares).
local function refill_shares(tokens, from, to, rate, burst, sh)
  local ep, sc, sb = 0, 0, 0
  if sh then
    ep, sc, sb = sh[1], sh[2], sh[3]
  end
  while true do
    -- One piece: at rate until to when nothing is in force (fin nil),
    -- else at rate less the shares until to or the epoch's end.
    local left, stop, fin = rate, to, nil
    if sc > 0 or sb > 0 then
      left = rate - sc
      if left < 0 then
        left = 0
      end
      fin = (ep + 1) * sh[4] + sh[5]
      if to >= fin then
        stop = fin
      end
    end
    -- A record from before the bucket's time (a client that does not
    -- honour shares wrote the bucket since) refills nothing for the time
    -- it missed: that client refilled at the whole rate already.
    if stop > from then
      tokens = tokens + (stop - from) * left / 1000000
      if tokens > burst then
        tokens = burst
      end
      if tokens < 0 then
        tokens = 0
      end
      from = stop
    end
    if fin == nil then
      return tokens, nil
    end
    if to < fin then
      return tokens, {ep, sc, sb, sh[4], sh[5]}
    end
    ep, sc, sb = ep + 1, sb, 0
  end
end

-- read_bucket returns the bucket at key: its fields (below) as HMGET of tk,
-- ts, hb, p1..p8, s0, rg would give them (false for a missing one), its
-- tokens refilled up to burst as of now (at rate less the shares in force:
-- refill_shares), whether the key is missing
-- (never used, or expired because it had refilled to full: burst tokens),
-- and the bucket's time for this call: now, or a microsecond after the last
-- call on it when the clock has not moved past that (e.g. after a failover
-- to a replica whose clock lags), so that the calls on a bucket have
-- distinct, rising times. For a corrupt bucket it returns nil and an error
-- reply. state[14] is the burst the level history was recorded under, as
-- a number (nil for none): h's first number, or hb when a client of the
-- previous layout wrote the bucket last (burst when hb is btext, the text
-- burst was read from, optional, without converting it again). state[15]
-- is h as stored, state[16] its numbers (varints; nil for none, for an
-- unreadable one and for the one a full bucket writes, full_history, which
-- state[18] then holds) and state[17] ts as a number; history() puts the
-- code of h's burst (level_code) in state[19]. state[20] is field sh as
-- stored (false for none) and state[21] the shares in force as of the
-- call's time (nil for none), which store writes back; state[22] is field
-- ol (acquire.lua's SHARES), false for none.
local function read_bucket(key, now, rate, burst, btext)
  -- hb and p1..p8 (state[3..11]) are the previous release's history (see
  -- history); s0 (state[12]) a field of the layout before it (two
  -- segments, s0, m0, s1, m1, with ta and mt). Each is present only if a
  -- client of that layout wrote the bucket since this one did (store
  -- deletes them). rg (state[13]) is the registry summary (acquire.lua).
  -- HGETALL, not HMGET of the 14 fields: a bucket holds 4 of them (tk, ts,
  -- h, rg), and HMGET looks each of the 14 up in the hash and makes its
  -- reply a table grown 5 times; the table made here at its size has room
  -- for state[14..19].
  local state = {false, false, false, false, false, false, false, false, false, false, false, false, false, nil, false, nil, nil, nil, nil, false, nil, false}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = all[i]
    local j
    if f == 'tk' then j = 1
    elseif f == 'ts' then j = 2
    elseif f == 'h' then j = 15
    elseif f == 'rg' then j = 13
    elseif f == 'hb' then j = 3
    elseif f == 'p1' then j = 4
    elseif f == 'p2' then j = 5
    elseif f == 'p3' then j = 6
    elseif f == 'p4' then j = 7
    elseif f == 'p5' then j = 8
    elseif f == 'p6' then j = 9
    elseif f == 'p7' then j = 10
    elseif f == 'p8' then j = 11
    elseif f == 's0' then j = 12
    elseif f == 'sh' then j = 20
    elseif f == 'ol' then j = 22
    end
    if j then
      state[j] = all[i + 1]
    end
  end
  if state[1] == false and state[2] == false then
    return state, burst, true, now
  end
  if state[3] or state[4] or state[12] then
    -- The previous layout's fields: a client of it wrote last.
    if btext ~= nil and state[3] == btext then
      state[14] = burst
    else
      state[14] = tonumber(state[3])
    end
  elseif state[15] then
    -- h as a full bucket left it (most buckets): no need to read it. (That
    -- is at most 10 bytes: longer ones are not compared.)
    if #state[15] <= 10 then
      state[18] = full_history(burst)
    end
    if state[15] == state[18] then
      state[14] = burst
    else
      -- The numbers packed in h, each a base-128 varint (7 bits a byte,
      -- low first, the high bit set on every byte but a number's last);
      -- none (nil) when h does not hold such a list: empty, cut off, or a
      -- number of 2^53 or more (which a double does not hold exactly).
      local b = {string.byte(state[15], 1, -1)}
      -- v made with room for a full history's 18 numbers (as h's table).
      local v, n, x, m = {nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}, 0, 0, 1
      for i = 1, #b do
        local c = b[i]
        if c < 128 then
          x = x + c * m
          if x >= 9007199254740992 then
            v = nil
            break
          end
          n = n + 1
          v[n] = x
          x, m = 0, 1
        else
          x = x + (c - 128) * m
          m = m * 128
          if m > 562949953421312 then -- 2^49: an eighth byte of 7 bits at most
            v = nil
            break
          end
        end
      end
      if v and m == 1 and n > 0 then
        state[14], state[16] = v[1], v
      end
    end
  end
  local tk, ts = tonumber(state[1]), tonumber(state[2])
  -- NaN, infinities, and a time no call wrote (before 1970, or past 2^53
  -- µs, where whole microseconds are no longer exact): an infinite ts
  -- was stored as %d of it, and the key's TTL overflowed to PERSIST.
  if tk == nil or ts == nil or tk ~= tk or ts ~= ts or tk == math.huge or tk == -math.huge or
    ts < 0 or ts >= 9007199254740992 then
    return nil, redis.error_reply('leasequota: corrupt bucket ' .. key .. ': delete the key to reset it')
  end
  state[17] = ts
  local sh = nil
  if state[20] then
    -- sh as a table {epoch, committed, booked, period, phase}, checked as
    -- lease.ParseShares checks it (EPOCH_TIME: above).
    local a, b, c, d, e = string.match(state[20], '^([^:]*):([^:]*):([^:]*):([^:]*):([^:]*)$')
    local ep, sc, sb, per, ph = tonumber(a), tonumber(b), tonumber(c), tonumber(d), tonumber(e)
    local lim = 0
    if whole(per, 1000) and per <= EPOCH_TIME then
      lim = math.floor(EPOCH_TIME / per) - 2
    end
    if not (lim > 0 and whole(ph, 0) and ph < per and ep and ep == math.floor(ep) and ep <= lim and ep >= -lim and
        sc and sc >= 0 and sc ~= math.huge and sb and sb >= 0 and sb <= sc) then
      return nil, redis.error_reply('leasequota: corrupt bucket ' .. key .. ': bad shares field sh: delete the key to reset it')
    end
    sh = {ep, sc, sb, per, ph}
  end
  -- A clock that went backwards refills nothing rather than going negative.
  if now <= ts then
    now = ts + 1
  end
  local tokens
  tokens, state[21] = refill_shares(tk, ts, now, rate, burst, sh)
  return state, tokens, false, now
end

-- The level history: a list of entries (t, l) (times in microseconds
-- rising, levels falling strictly) where l bounds every level of the
-- bucket since the previous entry's time, up to t. It is kept flat, in
-- one table: {t1, c1, t2, c2, ...}, ci = level_code(li) (li is
-- code_level(ci): every level is on the grid below), so that a call that
-- pushes an entry makes one table, not one an entry (a busy bucket's
-- call, 8 entries read, one pushed and two merged, took about 30,000
-- instructions of Redis's more with a table an entry: history8 in
-- scripts/acquire-paths.sh). A call records the level it sees before
-- its debit (between calls the level only rises, by refill, so that bounds
-- it since the previous call). An entry is dropped once a later one is at
-- least as high, so the highest level over (g, now] is the level of the
-- first entry after g, or the level now if higher; the grant's own call at
-- g, which saw its level before the debit, does not count. Beyond HISTORY
-- entries, the two neighbours with the smallest drop merge into one with
-- the later time and the higher level, which can only make a later credit
-- smaller.
--
-- Rounding, and why each is safe. A release credits burst - P, P the
-- level of the first entry after the grant (or the level now): anything
-- that makes P higher credits less, never more.
--   * Levels are rounded up to a grid (level_code, code_level): whole
--     tokens from 128 up, 8 significant bits below (steps of at most a
--     128th of the level: 0.5 token below 128, 1/32 below 8, ...; 0
--     exactly). A level is pushed rounded up, and a level raised by a
--     credit (release.lua) is rounded up again. Each entry still bounds
--     the levels it stands for, only higher, so P is the exact rule's or
--     higher, by less than a token and less than a 128th of P. (Whole
--     tokens throughout would lose up to a token of every credit: a
--     bucket of burst 2 drained to 1.5e-6 would be recorded at 1, and a
--     refund of 2 tokens credited 1. Two entries that rounding makes
--     equal keep the later one, as an equal later level always did: it
--     answers every query the earlier answered, as high.)
--   * Times are not rounded: each is stored exactly, in microseconds, as
--     the gap to the next entry (the newest: to ts). An entry recorded
--     later than its call would still be safe (P is the first entry after
--     the grant: a later time only makes an entry count for more grants,
--     and it is the higher one), and an earlier one would not (a grant
--     between the two times would skip it for a lower one); but rounding
--     the grant's own entry to after its time would count its level before
--     the debit, and tokens leased from a full bucket would never come back.
--   * When the packed history would pass HISTORY_BYTES, store merges
--     neighbours as above until it fits (a merge only credits less).
--   * A burst, or an oldest level, of 2^52 or more keeps no history (the
--     numbers would not pack exactly): the next call finds an unknown past,
--     which credits nothing granted before it.
--
-- Stored as one field, h: numbers packed as base-128 varints (7 bits a
-- byte, low first, the high bit set on every byte but a number's last),
-- in this order
--   burst, z, d2 .. dn, g1 .. g(n-1), o
-- where burst is the burst the history was recorded under, the levels
-- are their codes ci = level_code(li) (a whole level of 128 or more is
-- li + 4609), z the oldest (highest) c1 against cb = level_code(burst),
-- zigzagged (2(cb - c1) when c1 <= cb, else 2(c1 - cb) - 1: it is above
-- burst only after a quota change lowered the burst), di = c(i-1) - ci
-- >= 1, gi = t(i+1) - ti >= 1 and o = ts - tn >= 0 (0 when the newest
-- entry is the last call's). A busy bucket's 8 entries, with drops under
-- 128 tokens and calls under 16 ms apart, take about 25 bytes, where
-- p1..p8 took about 300; a full bucket's one entry 3 or 4, the same bytes
-- call after call (full_history). Redis keeps a hash whose values are at most 64
-- bytes (hash-max-listpack-value) in its compact listpack encoding, hence
-- HISTORY_BYTES.
local HISTORY = 8
local HISTORY_BYTES = 64
local HISTORY_LIMIT = 4503599627370496 -- 2^52

-- HISTORY_FIELDS are the previous layout's entries' field names, made once
-- rather than by 'p' .. i (a number formatted) for each field deleted.
local HISTORY_FIELDS = {'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8'}

-- history returns the level history of a bucket read by read_bucket. A
-- history that is missing (a new key), unreadable, recorded under another
-- burst, or possibly stale (a client of the layout before the previous one
-- wrote the bucket since, s0: its calls are not in it) has an unknown
-- past: it starts as one entry (now, burst, or the old burst if higher), so that
-- nothing granted before now is credited. When a client of the previous
-- layout wrote the bucket last (hb, p1..p8 present), its history is read
-- from those fields, levels rounded up: that client found no p1 when it
-- first wrote (store deletes them), so it started its history then as an
-- unknown past, and kept every call of its own since; calls of this
-- release since then are not in h, which is ignored. With l, it then
-- records a call at now that saw level l before its debit (history_at).
local function history(state, now, burst, l)
  -- history_push records a call at t that saw level v before its debit,
  -- rounded up to the grid (see the rounding above): the one rule for
  -- adding an entry, which the previous layout's entries are read by too.
  -- (Made here, not at the top, so that an acquire that takes the
  -- full-bucket way, history_at, does not make it: a function made is an
  -- allocation.)
  local function history_push(h, t, v)
    local c = level_code(v)
    local n = #h / 2
    while n > 0 and h[2 * n] <= c do
      h[2 * n - 1], h[2 * n] = nil, nil
      n = n - 1
    end
    if n > 0 and h[2 * n - 1] >= t then
      return
    end
    h[2 * n + 1], h[2 * n + 2] = t, c
    if n + 1 > HISTORY then
      history_merge(h)
    end
  end

  local hb = state[14]
  local h = nil
  if state[3] or state[4] then
    -- parse_history reads the fields p1..p8 of a bucket read by read_bucket
    -- (state[4..11]): the list, levels rounded up, or nil if they do not
    -- hold one. (Made here, not at the top, so that a call that does not
    -- read that layout does not make it: a function made is an
    -- allocation.)
    local function parse_history(state)
      local h = {}
      local pt, pl = nil, nil -- the previous entry as stored
      for i = 1, HISTORY do
        local f = state[3 + i]
        if not f then
          break
        end
        local ts, ls = string.match(f, '^(%-?%d+):([^:]+)$')
        local t, l = tonumber(ts), tonumber(ls)
        if t == nil or l == nil or l ~= l or l == math.huge or l == -math.huge then
          return nil
        end
        -- Entries rise in time and fall in level, and none is after ts
        -- (state[17]), the bucket's time of the call that wrote them: one
        -- after it would keep this call's entry out (history_push) and
        -- pack a negative gap, which fails after the script has written.
        if pt and (t <= pt or l >= pl) or t > state[17] then
          return nil
        end
        pt, pl = t, l
        -- Rounded up, an earlier entry no higher than this one goes (the
        -- times rise, and there are at most HISTORY: nothing merges).
        history_push(h, t, l)
      end
      if #h == 0 then
        return nil
      end
      return h
    end
    h = parse_history(state)
  elseif state[15] and state[15] == state[18] then
    h = {state[17], level_code(hb), nil, nil}
  elseif state[16] then
    -- unpack_history reads the numbers of h (read_bucket's state[16]; ts
    -- is state[17]): the list, or nil if they do not hold one.
    local function unpack_history(v, ts)
      local n = (#v - 1) / 2
      if n < 1 or n > HISTORY or n ~= math.floor(n) then
        return nil
      end
      local z = v[2]
      local c = level_code(v[1])
      state[19] = c
      if z % 2 == 1 then
        c = c + (z + 1) / 2
      else
        c = c - z / 2
      end
      -- With room for HISTORY entries and the one a call pushes (a
      -- table grown a slot at a time is made again at 1, 2, 4, 8, 16).
      local h = {0, c, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil, nil}
      for i = 2, n do
        local d = v[i + 1]
        if d < 1 then
          return nil
        end
        c = c - d
        h[2 * i] = c
      end
      if c < 0 then
        return nil
      end
      local t = ts - v[2 * n + 1]
      h[2 * n - 1] = t
      for i = n - 1, 1, -1 do
        local gap = v[n + 1 + i]
        if gap < 1 then
          return nil
        end
        t = t - gap
        h[2 * i - 1] = t
      end
      return h
    end
    h = unpack_history(state[16], state[17])
  end
  if h == nil or hb ~= burst or state[12] then
    local top = burst
    if hb ~= nil and hb == hb and hb > top then
      top = hb
    end
    h = {now, level_code(top), nil, nil}
  end
  if l then
    history_push(h, now, l)
  end
  return h
end

-- history_at returns the level history of a bucket read by read_bucket
-- after a call at now that saw level l before its debit: history() with
-- l. When l rounds up to the burst (the bucket refilled to
-- full, or within a token of it above 128, or a missing key), that is the one entry (now, burst) unless an
-- entry higher than burst survives: a history recorded under a higher
-- burst (hb > burst: unknown, it restarts at hb), or a known one whose
-- oldest and highest entry is above burst (quota.lua restarts it at the
-- old burst when it lowers it: an odd z in h, or p1 above burst in the
-- previous layout). Otherwise push drops every entry, whatever they hold,
-- so this skips reading them: most acquires find their bucket full (a
-- tenant within its quota), and parsing, copying and pushing the history
-- was about a sixth of such a call's Redis CPU. An unreadable history
-- only takes the general way, which gives the same list.
local function history_at(state, now, burst, l, btext)
  -- l rounds up to burst: it is burst, or, above 128 (whole tokens), more
  -- than burst - 1.
  if (l == burst or (burst > 128 and l > burst - 1)) and not ((state[14] or 0) > burst) then
    local top = nil
    if state[3] or state[4] then
      local p1 = state[4]
      if p1 then
        -- p1 ending in ":" .. btext holds the burst (what a full bucket
        -- wrote), which is not above it: no need to convert it.
        local at = btext and string.find(p1, btext, -#btext, true)
        if not (at and at > 1 and string.byte(p1, at - 1) == 58) then
          local colon = string.find(p1, ':', 1, true)
          top = colon and tonumber(string.sub(p1, colon + 1))
        end
      end
    elseif state[15] ~= state[18] and state[16] and state[16][2] and state[14] == burst and state[16][2] % 2 == 1 then
      top = burst + 1 -- above the burst (how far does not matter here)
    end
    if not (top and top > burst) then
      return {now, level_code(burst)}
    end
  end
  return history(state, now, burst, l)
end

-- store writes the bucket's tokens as of now, its history h (levels on the grid,
-- entries at or before now) recorded under burst, packed in h (not written
-- again when it holds that already), and the field-value pairs in extra
-- (nil for none); it deletes the previous layouts' fields (hb, p1..p8;
-- s0, m0, s1, m1, ta, mt), so that a client of the previous release finds
-- no history (p1) and credits nothing granted before its next call (it
-- does not see this release's calls; its code: a missing p1 is an unknown
-- past), and so that this release notices when one writes them again. It
-- keeps the key until the bucket would be full again at rate, plus a
-- second: a missing key means a full bucket, so expiring it then changes
-- nothing. That time is now + (burst - tokens)/rate, and now (the bucket's
-- time) may be ahead of clock, the Redis TIME of the call (a frozen
-- bucket, see acquire.lua, or a clock that went back), so the TTL counted
-- from clock, as PEXPIRE counts it, adds now - clock. With shares in force
-- (state[21], which it writes back as sh, or deletes when none is left) the
-- bucket refills at less than rate until they end: the key is kept until
-- the bucket would be full after that (lease.Settled), since a key made again
-- is a full bucket with no share in force. Beyond ~31,700 years
-- (and for an infinite quotient) the key is kept for ever: the number
-- would not fit PEXPIRE, and any finite cap would refill early. It
-- returns tk as written (the "%.17g" of tokens), which the scripts'
-- replies repeat rather than format again, and when the shares in force
-- end (nil for none), which acquire.lua keeps the registry until.
local function store(key, tokens, now, rate, burst, h, state, extra, clock)
  local tk = fmt17(tokens)
  -- Made at the size of a call that writes h and rg, so that it does not
  -- grow then.
  local args = {'tk', tk, 'ts', string.format('%d', now), nil, nil, nil, nil}
  local n = 4
  local gone = nil -- the fields to delete
  local packed
  if #h == 2 and h[1] == now and code_level(h[2]) == burst then
    -- A full bucket's, the most common: read_bucket made it (state[18])
    -- when it read it.
    if state[14] == burst and state[15] and state[15] == state[18] then
      packed = state[15]
    else
      packed = full_history(burst)
    end
  else
    -- pack_history returns the level history h (levels on the grid, times at or
    -- before ts), recorded under burst, as field h holds it (see above), or
    -- nil when burst or its oldest level is 2^52 or more: such a history is
    -- not kept. Past HISTORY_BYTES it merges h's neighbours with the smallest
    -- drop, as history_push does, until it fits (one entry always does: at
    -- most 24 bytes).
    local function pack_history(h, ts, burst)
      if burst >= HISTORY_LIMIT or code_level(h[2]) >= HISTORY_LIMIT then
        return nil
      end
      -- The burst's code, which unpack_history made when it read h
      -- recorded under this burst (state[19]).
      local cb = state[14] == burst and state[19] or level_code(burst)
      -- put appends x, a whole number in [0, 2^53), to the bytes b[1..n]
      -- as a varint and returns the new n.
      local function put(b, n, x)
        while x >= 128 do
          local r = x % 128 -- an operator, where math.floor is a call
          n = n + 1
          b[n] = r + 128
          x = (x - r) / 128
        end
        n = n + 1
        b[n] = x
        return n
      end
      while true do
        -- With room for a busy history's bytes (about 25), as h's table.
        local b = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
        local n = put(b, 0, burst)
        local m = #h / 2
        local c = h[2]
        if c <= cb then
          n = put(b, n, 2 * (cb - c))
        else
          n = put(b, n, 2 * (c - cb) - 1)
        end
        for i = 2, m do
          n = put(b, n, h[2 * i - 2] - h[2 * i])
        end
        for i = 1, m - 1 do
          n = put(b, n, h[2 * i + 1] - h[2 * i - 1])
        end
        n = put(b, n, ts - h[2 * m - 1])
        if n <= HISTORY_BYTES or m == 1 then
          return string.char(unpack(b, 1, n))
        end
        history_merge(h)
      end
    end
    packed = pack_history(h, now, burst)
  end
  if packed then
    if packed ~= state[15] then
      args[n + 1] = 'h'
      args[n + 2] = packed
      n = n + 2
    end
  elseif state[15] then
    gone = {'h'}
  end
  local sh = state[21]
  if sh then
    local v = string.format('%d:%s:%s:%d:%d', sh[1], fmt17(sh[2]), fmt17(sh[3]), sh[4], sh[5])
    if v ~= state[20] then
      args[n + 1] = 'sh'
      args[n + 2] = v
      n = n + 2
    end
  elseif state[20] then
    gone = gone or {}
    gone[#gone + 1] = 'sh'
  end
  if extra then
    for i = 1, #extra do
      args[n + i] = extra[i]
    end
    n = n + #extra
  end
  redis.call('HSET', key, unpack(args, 1, n))
  if state[3] or state[4] or state[12] then
    gone = gone or {}
    if state[3] then
      gone[#gone + 1] = 'hb'
    end
    for i = 1, HISTORY do
      if state[3 + i] then
        gone[#gone + 1] = HISTORY_FIELDS[i]
      end
    end
    if state[12] then
      for _, f in ipairs({'s0', 'm0', 's1', 'm1', 'ta', 'mt'}) do
        gone[#gone + 1] = f
      end
    end
  end
  if gone then
    redis.call('HDEL', key, unpack(gone))
  end
  -- When the shares in force end (the end of the epoch, or of the next
  -- one when some are booked into it) and the level then: lease.Settled.
  local until_, level = now, tokens
  if sh then
    until_ = (sh[1] + 1) * sh[4] + sh[5]
    if sh[3] > 0 then
      until_ = until_ + sh[4]
    end
    level = refill_shares(tokens, now, until_, rate, burst, sh)
  end
  local ttl = math.ceil((until_ - clock) / 1000 + (burst - level) / rate * 1000) + 1000
  if ttl < 1e15 then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  else
    redis.call('PERSIST', key)
  end
  if sh then
    return tk, until_
  end
  return tk, nil
end
