-- leasequota common: the functions every leasequota script uses. The Go
-- side puts this file in front of acquire.lua, release.lua and quota.lua
-- (Redis scripts cannot load one another), so they read one bucket, one
-- override and one level history the same way.
--
-- A bucket is a hash {tk = tokens ("%.17g"), ts = when tk was computed
-- (Redis TIME, microseconds), s0, m0, s1, m1, hb = its level history, ta, mt
-- = the time of the last acquire and the highest level since its debit (see
-- acquire.lua)}.

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

-- redis_now returns Redis TIME in microseconds: the only clock, so every
-- instance sees the same time line. Redis 7 replicates scripts by their
-- effects (the writes carry the computed values), so reading TIME before
-- writing is safe.
local function redis_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- read_override returns the override stored at qkey, as HMGET of r, b, min,
-- max, ttl, mode, and its rate and burst (nil for none); or, for a corrupt
-- one, nil and an error reply.
local function read_override(qkey)
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

-- read_bucket returns the bucket at key: HMGET of its fields (above), its
-- tokens refilled at rate up to burst as of now, and whether the key is
-- missing (never used, or expired because it had refilled to full: burst
-- tokens); or, for a corrupt bucket, nil and an error reply.
local function read_bucket(key, now, rate, burst)
  local state = redis.call('HMGET', key, 'tk', 'ts', 's0', 'm0', 's1', 'm1', 'hb', 'ta', 'mt')
  if state[1] == false and state[2] == false then
    return state, burst, true
  end
  local tk, ts = tonumber(state[1]), tonumber(state[2])
  if tk == nil or ts == nil or tk ~= tk or ts ~= ts then
    return nil, redis.error_reply('leasequota: corrupt bucket ' .. key .. ': delete the key to reset it')
  end
  -- A clock that went backwards (e.g. failover to a replica whose clock
  -- lags) refills nothing rather than going negative.
  local elapsed = now - ts
  if elapsed < 0 then
    elapsed = 0
  end
  local tokens = tk + elapsed * rate / 1000000
  if tokens > burst then
    tokens = burst
  end
  if tokens < 0 then
    tokens = 0
  end
  return state, tokens, false
end

-- observe returns the level history of a bucket read by read_bucket, after
-- seeing level x at now: {s0, m0, s1, m1, ta, mt}. A history that is missing,
-- unreadable or recorded under another burst has an unknown past: it
-- starts as {0, burst (or the old burst if higher), now, x}, so nothing
-- granted before now is credited. Then, if now - s1 >= window (ms), the
-- segments roll (s0 = s1, m0 = max(m1, x), s1 = now, m1 = x: between calls
-- the level only rises by refill, so x bounds it since the last call), and
-- m1 = max(m1, x). mt, the highest level since the last acquire's debit,
-- becomes max(mt, x); with an unknown past, ta is 0 (no acquire known).
local function observe(state, now, x, burst, window)
  local h = {s0 = tonumber(state[3]), m0 = tonumber(state[4]), s1 = tonumber(state[5]), m1 = tonumber(state[6]),
    ta = tonumber(state[8]), mt = tonumber(state[9])}
  local hb = tonumber(state[7])
  if h.s0 == nil or h.m0 == nil or h.s1 == nil or h.m1 == nil or hb == nil or
     h.s0 ~= h.s0 or h.m0 ~= h.m0 or h.s1 ~= h.s1 or h.m1 ~= h.m1 or hb ~= burst then
    h.m0 = burst
    if hb ~= nil and hb == hb and hb > h.m0 then
      h.m0 = hb
    end
    h.s0, h.s1, h.m1 = 0, now, x
    h.ta, h.mt = 0, burst
  end
  if h.ta == nil or h.mt == nil or h.ta ~= h.ta or h.mt ~= h.mt then
    h.ta, h.mt = 0, burst
  end
  if x > h.mt then
    h.mt = x
  end
  if now - h.s1 >= window * 1000 then
    if x > h.m1 then
      h.m1 = x
    end
    h.s0, h.m0, h.s1, h.m1 = h.s1, h.m1, now, x
  end
  if x > h.m1 then
    h.m1 = x
  end
  return h
end

-- store writes the bucket's tokens as of now, its history h and the burst
-- it was recorded under, and keeps the key until the bucket would be full
-- again at rate, plus a second: a missing key means a full bucket, so
-- expiring it then changes nothing. Beyond ~31,700 years (and for an
-- infinite quotient) the key is kept for ever: the number would not fit
-- PEXPIRE, and any finite cap would refill early.
local function store(key, tokens, now, rate, burst, h)
  redis.call('HSET', key, 'tk', string.format('%.17g', tokens), 'ts', string.format('%d', now),
    's0', string.format('%d', h.s0), 'm0', string.format('%.17g', h.m0),
    's1', string.format('%d', h.s1), 'm1', string.format('%.17g', h.m1),
    'hb', string.format('%d', burst),
    'ta', string.format('%d', h.ta), 'mt', string.format('%.17g', h.mt))
  local ttl = math.ceil((burst - tokens) / rate * 1000) + 1000
  if ttl < 1e15 then
    redis.call('PEXPIRE', key, string.format('%d', ttl))
  else
    redis.call('PERSIST', key)
  end
end
