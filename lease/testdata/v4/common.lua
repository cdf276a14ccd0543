-- leasequota common: the functions every leasequota script uses. The Go
-- side puts this file in front of acquire.lua, release.lua and quota.lua
-- (Redis scripts cannot load one another), so they read one bucket, one
-- override and one level history the same way.
--
-- A bucket is a hash {tk = tokens ("%.17g"), ts = when tk was computed
-- (Redis TIME, microseconds; after the clock for a frozen bucket: tk
-- tokens available now and no refill until ts, see acquire.lua), hb = the burst its level history was
-- recorded under, p1, p2, ... = the history's entries, rg = the summary of
-- the instance registry that acquire.lua keeps}. The history (see below, and the Go model in
-- internal/peaks, which the tests hold these functions to) is what
-- release.lua credits returned tokens against.

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
  local orate, oburst = tonumber(q[1]), tonumber(q[2])
  if not rate_ok(orate) or not whole(oburst, 1) then
    return nil, redis.error_reply('leasequota: corrupt quota ' .. qkey .. ': delete the key or set the quota again')
  end
  return q, orate, oburst
end

-- read_bucket returns the bucket at key: its fields (above) as HMGET of tk,
-- ts, hb, p1..p8, s0, rg would give them (false for a missing one), its
-- tokens refilled at rate up to burst as of now, whether the key is missing
-- (never used, or expired because it had refilled to full: burst tokens),
-- and the bucket's time for this call: now, or a microsecond after the last
-- call on it when the clock has not moved past that (e.g. after a failover
-- to a replica whose clock lags), so that the calls on a bucket have
-- distinct, rising times. For a corrupt bucket it returns nil and an error
-- reply. state[14] is hb as a number (nil for none): burst when hb is
-- btext, the text burst was read from (optional), without converting it
-- again.
local function read_bucket(key, now, rate, burst, btext)
  -- s0 (state[12]) is a field of the previous layout of the level history
  -- (two segments, s0, m0, s1, m1, with ta and mt): present only if a client
  -- of that layout wrote the bucket since this one did (see history and
  -- store). rg (state[13]) is the registry summary (acquire.lua).
  -- HGETALL, not HMGET of the 13 fields: a bucket holds 5 of them (tk, ts,
  -- hb, p1, rg) unless its history is longer, and HMGET looks each of the
  -- 13 up in the hash and makes its reply a table grown 5 times; the
  -- table made here at its size has room for state[14].
  local state = {false, false, false, false, false, false, false, false, false, false, false, false, false, nil}
  local all = redis.call('HGETALL', key)
  for i = 1, #all, 2 do
    local f = all[i]
    local j
    if f == 'tk' then j = 1
    elseif f == 'ts' then j = 2
    elseif f == 'hb' then j = 3
    elseif f == 'p1' then j = 4
    elseif f == 'rg' then j = 13
    elseif f == 'p2' then j = 5
    elseif f == 'p3' then j = 6
    elseif f == 'p4' then j = 7
    elseif f == 'p5' then j = 8
    elseif f == 'p6' then j = 9
    elseif f == 'p7' then j = 10
    elseif f == 'p8' then j = 11
    elseif f == 's0' then j = 12
    end
    if j then
      state[j] = all[i + 1]
    end
  end
  if state[1] == false and state[2] == false then
    return state, burst, true, now
  end
  if btext ~= nil and state[3] == btext then
    state[14] = burst
  else
    state[14] = tonumber(state[3])
  end
  local tk, ts = tonumber(state[1]), tonumber(state[2])
  if tk == nil or ts == nil or tk ~= tk or ts ~= ts then
    return nil, redis.error_reply('leasequota: corrupt bucket ' .. key .. ': delete the key to reset it')
  end
  -- A clock that went backwards refills nothing rather than going negative.
  if now <= ts then
    now = ts + 1
  end
  local tokens = tk + (now - ts) * rate / 1000000
  if tokens > burst then
    tokens = burst
  end
  if tokens < 0 then
    tokens = 0
  end
  return state, tokens, false, now
end

-- The level history: a list of {t, l} (times in microseconds rising, levels
-- falling strictly) where l bounds every level of the bucket since the
-- previous entry's time, up to t. A call records the level it sees before
-- its debit (between calls the level only rises, by refill, so that bounds
-- it since the previous call). An entry is dropped once a later one is at
-- least as high, so the highest level over (g, now] is the level of the
-- first entry after g, or the level now if higher; the grant's own call at
-- g, which saw its level before the debit, does not count. Beyond HISTORY
-- entries, the two neighbours with the smallest drop merge into one with
-- the later time and the higher level, which can only make a later credit
-- smaller. Stored as one field per entry, p1 (the oldest) to p<n>, each
-- "t:l": short values keep the hash in Redis's compact encoding.
local HISTORY = 8

-- HISTORY_FIELDS are the entries' field names, made once rather than by
-- 'p' .. i (a number formatted) for each field written.
local HISTORY_FIELDS = {'p1', 'p2', 'p3', 'p4', 'p5', 'p6', 'p7', 'p8'}

-- history returns the level history of a bucket read by read_bucket. A
-- history that is missing (a new key, or one an older version wrote),
-- unreadable, recorded under another burst, or possibly stale (a client of
-- the previous layout wrote the bucket since: its calls are not in it) has
-- an unknown past: it starts as {{now, burst (or the old burst if
-- higher)}}, so that nothing granted before now is credited.
local function history(state, now, burst)
  -- parse_history reads the fields p1..p8 of a bucket read by read_bucket
  -- (state[4..11]): the list, or nil if they do not hold one. (Made here,
  -- not at the top, so that an acquire that takes the full-bucket way,
  -- history_at, does not make it: a function made is an allocation.)
  local function parse_history(state)
    local h = {}
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
      if #h > 0 and (t <= h[#h][1] or l >= h[#h][2]) then
        return nil
      end
      h[#h + 1] = {t, l}
    end
    if #h == 0 then
      return nil
    end
    return h
  end

  local hb = state[14]
  local h = parse_history(state)
  if h == nil or hb ~= burst or state[12] then
    local top = burst
    if hb ~= nil and hb == hb and hb > top then
      top = hb
    end
    return {{now, top}}
  end
  -- What the fields hold, so that store rewrites only the entries that
  -- change (a call usually changes the last one or two): entry i's time
  -- and level at 2i - 1 and 2i, in one table rather than one per entry.
  local was = {}
  for i = 1, #h do
    was[2 * i - 1], was[2 * i] = h[i][1], h[i][2]
  end
  state.was = was
  return h
end

-- history_at returns the level history of a bucket read by read_bucket
-- after a call at now that saw level l before its debit: history() then
-- history_push(). When l is the burst (the bucket refilled to full, or a
-- missing key), that is {{now, burst}} unless an entry higher than burst
-- survives: a history recorded under a higher burst (hb > burst: unknown,
-- it restarts at hb), or a known one whose oldest and highest entry p1 is
-- above burst (quota.lua restarts it at the old burst when it lowers it).
-- Otherwise push drops every entry, whatever they hold, so this skips
-- parsing them: most acquires find their bucket full (a tenant within its
-- quota), and parsing, copying and pushing the history was about a sixth
-- of such a call's Redis CPU. An unreadable p1 or hb only takes the
-- general way, which gives the same list.
local function history_at(state, now, burst, l, btext)
  if l == burst and not ((state[14] or 0) > burst) then
    local p1 = state[4]
    local top = nil
    if p1 then
      -- p1 ending in ":" .. btext holds the burst (what a full bucket
      -- wrote), which is not above it: no need to convert it.
      local at = btext and string.find(p1, btext, -#btext, true)
      if not (at and at > 1 and string.byte(p1, at - 1) == 58) then
        local colon = string.find(p1, ':', 1, true)
        top = colon and tonumber(string.sub(p1, colon + 1))
      end
    end
    if not (top and top > burst) then
      return {{now, burst}}
    end
  end
  -- history_push records a call at now that saw level l before its debit.
  -- (Made here, not at the top, as parse_history is in history.)
  local function history_push(h, now, l)
    while #h > 0 and h[#h][2] <= l do
      table.remove(h)
    end
    if #h > 0 and h[#h][1] >= now then
      return
    end
    h[#h + 1] = {now, l}
    if #h > HISTORY then
      local best = 1
      for i = 2, #h - 1 do
        if h[i][2] - h[i + 1][2] < h[best][2] - h[best + 1][2] then
          best = i
        end
      end
      h[best + 1][2] = h[best][2]
      table.remove(h, best)
    end
  end

  local h = history(state, now, burst)
  history_push(h, now, l)
  return h
end

-- store writes the bucket's tokens as of now, its history h (deleting the
-- entry fields of the bucket read as state that h no longer fills), the
-- burst it was recorded under and the field-value pairs in extra (nil for
-- none), and keeps the key until the bucket would be full again at rate,
-- plus a second: a missing key means a full bucket, so expiring it then
-- changes nothing. That time is now + (burst - tokens)/rate, and now (the
-- bucket's time) may be ahead of clock, the Redis TIME of the call (a
-- frozen bucket, see acquire.lua, or a clock that went back), so the TTL
-- counted from clock, as PEXPIRE counts it, adds now - clock. Beyond
-- ~31,700 years (and for an infinite quotient) the key is kept for ever:
-- the number would not fit PEXPIRE, and any finite cap would refill early.
-- It returns tk as written (the "%.17g" of tokens), which the scripts'
-- replies repeat rather than format again.
local function store(key, tokens, now, rate, burst, h, state, extra, clock)
  local tk = fmt17(tokens)
  -- Made at the size of a full bucket's call (tk, ts, p1 and rg), so that
  -- it does not grow then.
  local args = {'tk', tk, 'ts', string.format('%d', now), nil, nil, nil, nil}
  local n = 4
  if state[14] ~= burst then
    args[n + 1] = 'hb'
    args[n + 2] = string.format('%d', burst)
    n = n + 2
  end
  -- An entry that holds what the field holds is not written again (the
  -- field's text is the %.17g of that number, which reads back exactly).
  local was = state.was
  for i = 1, #h do
    local e = h[i]
    if not (was and was[2 * i - 1] == e[1] and was[2 * i] == e[2]) then
      args[n + 1] = HISTORY_FIELDS[i]
      if whole15(e[2]) then
        args[n + 2] = string.format('%d:%d', e[1], e[2])
      else
        args[n + 2] = string.format('%d:%.17g', e[1], e[2])
      end
      n = n + 2
    end
  end
  if extra then
    for i = 1, #extra do
      args[n + i] = extra[i]
    end
    n = n + #extra
  end
  redis.call('HSET', key, unpack(args, 1, n))
  local stale = nil
  for i = #h + 1, HISTORY do
    if state[3 + i] then
      stale = stale or {}
      stale[#stale + 1] = HISTORY_FIELDS[i]
    end
  end
  if stale then
    redis.call('HDEL', key, unpack(stale))
  end
  -- The previous layout's history: deleted, so that a client of that
  -- version finds none and credits nothing granted before its next call
  -- (it does not see this version's calls), and so that this version
  -- notices when it writes them again.
  if state[12] then
    redis.call('HDEL', key, 's0', 'm0', 's1', 'm1', 'ta', 'mt')
  end
  local ttl = math.ceil((now - clock) / 1000 + (burst - tokens) / rate * 1000) + 1000
  if ttl < 1e15 then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  else
    redis.call('PERSIST', key)
  end
  return tk
end
