-- leasequota acquire: take up to `want` tokens from a tenant's global bucket.
--
-- KEYS[1]  bucket key, a hash:
--            tk  tokens ("%.17g")
--            ts  when tk was computed (Redis TIME, microseconds)
--            h   the level history that release.lua credits against,
--                and the burst it was recorded under, packed (common.lua;
--                clients of the previous release kept it as hb, p1..p8)
--            rg  the registry summary: "computed at (us):instances:total
--                demand:water level", rewritten at most every 1/8 window
--            sh  the rate shares in force: "epoch:committed:booked:
--                period:phase" (common.lua; SHARES below); no
--                reservation is made while one is in force
--            ol  when the last recompute of rg saw a live registry entry
--                of a client that does not honour shares (SHARES)
-- ARGV[1]  rate: tokens added per second, a decimal number > 0
-- ARGV[2]  burst: bucket capacity, an integer >= 1
-- ARGV[3]  want: tokens requested, an integer >= 0 (0 only refills and reads)
-- KEYS[2], ARGV[4], ARGV[5], ARGV[6]  optional instance registry: a hash
--          {instance id = "last acquire (microseconds):demand (tokens/s):
--          credit (tokens):share (see SHARES)"} next to the bucket, the
--          caller's id, the window in milliseconds (at most 1e15) within which an instance counts as active (and
--          for half of which its credit may accrue: the credit span), and
--          the caller's demand. An entry is rewritten when its credit or
--          (by more than a quarter) its demand changes, and at least every
--          1/4 window; the shares come from the summary rg, recomputed
--          from every entry (dropping stale ones) at least every 1/8
--          window (or joined by a new instance while every demand is
--          met: below), which also keeps the hash for at least 2 windows more
--          (or until the shares in force end: SHARES), never shortening
--          its TTL (a longer window's entries need more; unless an ACL
--          refuses PTTL: see keepRegistry below). So a call
--          reads one entry, not all, and writes little: its cost does not
--          grow with the instances.
--          KEYS[2] is always passed (so that KEYS[3] has a fixed place) but
--          only touched when ARGV[4] is a non-empty id.
-- ARGV[7]  optional reservation length L, milliseconds, a finite number
--          >= 0; missing, '' or 0: no reservation.
-- ARGV[8]  optional share operation (SHARES): '' or missing keeps the
--          caller's share as it is, 'R<from>' ends it, 'A<period>:
--          <phase>:<hold>:<headroom>[:<instances>]' asks for one; needs ARGV[4]. The
--          single form thus takes 3, 6, 7 or 8 arguments (ARGV[4..6] =
--          '' '' '' without a registry, ARGV[7] = '' without a length).
-- KEYS[3]  quota override (QuotaKey), a hash {r = rate, b = burst, min, max,
--          ttl (ns), mode} written by quota.lua, never expiring. When it holds
--          r and b they replace ARGV[1] and ARGV[2]: the override is the one
--          source of truth, and the caller learns it from the reply.
--
-- Returns one string of nine fields separated by single spaces, "granted
-- tokens now instances share reserved pace wait rateshare", and six more
-- when an override is stored, "r b min max ttl mode" as stored: granted
-- (an integer), the tokens left ("%.17g"), now (the bucket's time of the
-- call, microseconds), the active instances (0 without a registry), the
-- caller's max-min fair share of the rate (tokens/s, "%.17g") among the
-- active instances' demands, reserved (the part of granted that is a
-- reservation), its pace (tokens/s, "%.17g"), wait (µs: now - clock, how
-- far the bucket's time is ahead of Redis TIME) and the caller's rate
-- share after the call, "rate/from/until" as its entry holds it (SHARES).
-- A field that is none (no share without a registry, no pace without a
-- reservation, no rate share held) is empty. Releases before this one
-- replied with an array of the same values ({granted, tokens, now,
-- instances, override, share, reserved, pace, wait, rate share}, the
-- override 0 or an array of six); each client reads the replies of the
-- script it loaded, so the two forms never meet in one client. (Numbers
-- that are not whole go out as text either way: Redis truncates Lua
-- numbers to integers.)
--
-- Reservations ("paced grants"). A bucket whose ts is after the clock is
-- frozen: tk tokens are available now and nothing refills until ts (every
-- version's read_bucket reads it so: the call's bucket time is ts + 1 µs,
-- and ts is written back). When L > 0 and the caller has a registry entry
-- with a share > 0, the call reserves if it wants more than the immediate
-- grant gives and the bucket cannot serve more now (tokens left < 1), or
-- if the caller is held to its share (its demand is above it while the
-- credit rule caps grants, below): r = min(floor(pace*L/1000),
-- floor(room)) tokens, its fair share over L (pace = min(share, rate),
-- below: a summary older than a jump in the caller's demand can put its
-- share above the rate), within room = (clock +
-- RESERVE_AHEAD - now)*rate + f, the refill from the bucket's time now to
-- RESERVE_AHEAD after the clock plus f, the fraction of a token left. The
-- whole tokens left (k0 = floor(tokens left)) stay available to the other
-- instances: the bucket becomes tk = k0, ts = ceil(now + (r - f)/rate)
-- (<= clock + RESERVE_AHEAD), so the reservation's token k (1..r) is
-- produced at now + (k - f)/rate. (Reserving only when the bucket was dry,
-- as the first version did, left an instance held to its share by the
-- credit rule with a grant of a few tokens now and calls that followed its
-- demand: 16 instances x 50 tenants with 4 s reservations made 1.06 times
-- the calls of no reservations in the fleet simulation, 0.46 times now,
-- TestReservationsCutFleetCalls.)
-- A reservation spans L at the caller's pace but only r/rate of the
-- bucket's refill (r/rate = L/n for n instances with equal shares), so
-- reservations much longer than RESERVE_AHEAD fit in it. The caller may spend token k from now +
-- k/pace, pace = min(share, rate): that is, wait + k/pace after the reply
-- arrives; every token is then spent after the bucket produced it, so the
-- bound (granted - credited <= burst + rate*T) holds as before.
-- Reserved tokens count in granted; the registry credit is the immediate
-- grant's alone.
--
-- Rollout. Older versions (no reservations) keep a frozen bucket's
-- commitment, but set its TTL to (burst - tokens)/rate + 1 s from the
-- clock, ignoring that ts is ahead: the key outlives the time the bucket is
-- full again only while ts is at most 1 s after the clock, less up to a
-- millisecond (Redis keeps the expiry in whole milliseconds, from the
-- millisecond the call ran in). Hence RESERVE_AHEAD is 990 ms: safe in a
-- mixed fleet whatever L.
--
-- A batch: with 3n keys (n >= 2), the script acquires for n tenants in one
-- call, tenant i's keys being KEYS[3i-2..3i] and its arguments
-- ARGV[8i-7..8i] (always eight: an empty id for no registry, an empty
-- length and share operation for none). It returns an
-- array of n replies, each the reply above or tenant i's error reply, so
-- that one tenant's bad argument or corrupt key fails that tenant alone.
-- Every tenant is acquired for exactly as a call of its own would be, at
-- the one Redis TIME of the call: a batch shares the call's overhead (the
-- dispatch, these functions' definitions, TIME), nothing else. Keys of one
-- batch must be on one server (a standalone Redis, not a cluster).
--
-- The history records the refilled level before the debit, at the
-- bucket's time of this call (the reply's now, which a later release names
-- the grant by). A missing key is a bucket that was full until now; a hash
-- without a history (an older version wrote it), with an unreadable one or
-- with one recorded under another burst has an unknown past (common.lua).
--
-- common.lua (in front of this file) reads the bucket, the override and the
-- history, and stores the bucket; the only clock is Redis TIME.

-- The registry summary is recomputed from every entry at least every
-- SUMMARY_AGE of the window; an instance rewrites its own entry at least
-- every ENTRY_AGE of it (see below). Both are fractions, so that the costs
-- do not grow with the number of instances between.
local SUMMARY_AGE = 1 / 8

-- RESERVE_AHEAD is how far ahead of Redis's clock a bucket's refill may be
-- committed to reservations, in milliseconds (see the header: what older
-- versions read safely).
local RESERVE_AHEAD = 990
local ENTRY_AGE = 1 / 4
-- MAX_CREDIT is the most credit an entry holds, tokens (lease.MaxCredit):
-- 2^53, more than any burst grants.
local MAX_CREDIT = 9007199254740992

-- SHARES. An instance may hold a rate share (common.lua, "Rate shares";
-- docs/design.md): rate tokens a second from the call that granted it
-- until the end of the bucket's epoch, or of the next one when granted in
-- an epoch's second half (booked). Its registry entry's fourth field holds
-- it, "rate/from/until" (tokens/s as "%.17g", then µs), empty for none:
-- every entry this release writes has the field, which says its client
-- honours a bucket's record of shares. Earlier releases read the other
-- instances' entries by their first two fields; one that finds its own
-- entry with four fields (after a downgrade) takes itself for a new
-- instance for one call, and writes its entry again with three. The
-- field costs a byte when empty (two took the registry of 32 instances a
-- jemalloc size class up, TestRedisMemoryPerBucket). A call asks for a
-- share with ARGV[o + 8] = 'A<period>:<phase>:<hold>:<headroom>', and
-- optionally ':<instances>' (lease.ShareTerms.Instances): the
-- share it held, if any, ends, and it is granted min(its max-min fair
-- share, rate*(1 - headroom) - the shares in force, and with instances
-- above 1 rate*(1 - headroom)/instances), none when that could
-- not hold a token over hold (share*hold < 1 s), until the end of the
-- record's epoch (the epochs of period and phase when no share is in
-- force); 'R<from>' ends the share granted at from, if it holds it still.
-- No share is granted while a live entry has three fields (a client of
-- an earlier release, which would refill past the shares): the recompute
-- of the summary sees them, and keeps the bucket's field ol (the time it
-- last saw one) until a recompute sees none. An instance that holds a
-- share accrues its fair-share credit at its fair share less its share.
-- An entry older than the window that holds a share whose until is after
-- the call's time, and not past the bucket's record of shares (in_record),
-- is kept, and read by its own instance as its entry
-- (holds_share), though not counted among the active instances: its
-- instance makes no call between renewals, which come up to a period and
-- a half apart, and each caller judges the entries by its own window. The
-- Limiter sends at least two periods with shares on, but an instance
-- without them (or with a shorter period) sends a shorter window.
-- Dropped, the share would be lost to its instance's next reply, and its
-- renewal would not end it (the record would withhold it twice until its
-- epoch ended). A call whose own entry is that old recomputes the summary,
-- so that it counts itself. So that the hash outlives such entries, it is
-- kept until the end of the record's shares when that is after 2 windows.
-- Releases before this one drop such an entry a window after it was
-- written; its instance then stops accruing the share at the reply that
-- says so, and the record withholds it until its end: fewer tokens, never
-- more.

-- finite reports whether x is a number other than NaN and the infinities.
local function finite(x)
  return x ~= nil and x == x and x ~= math.huge and x ~= -math.huge
end

-- sane_demand returns a reported demand as a number >= 0: what is not one
-- (missing, NaN, negative, infinite) counts as 0.
local function sane_demand(v)
  local d = tonumber(v)
  if d == nil or d ~= d or d < 0 or d == math.huge then
    return 0
  end
  return d
end

-- in_record reports whether a share that ends at u (µs) may be in force
-- under the bucket's record of shares sh (nil for none): every share
-- granted ends by the end of the epoch after the record's (the booked
-- part), and with no record none is in force. An end past it (inf, 1e300,
-- 2^53) is one no call writes: taken as it was, such an entry was kept
-- for as long as the hash lived, however old, and its rate was taken out
-- of a record that never held it (TestShareNoRecordHoldsIsDropped).
local function in_record(u, sh)
  return sh ~= nil and u <= (sh[1] + 2) * sh[4] + sh[5]
end

-- holds_share reports whether a registry entry's share field r ("rate/
-- from/until", '' or nil for none) ends after now (µs) and may be in
-- force under the bucket's record sh (in_record): the entry is kept
-- however old (SHARES).
local function holds_share(r, now, sh)
  if r == nil or r == '' then
    return false
  end
  local u = tonumber(string.match(r, '^[^/]*/[^/]*/([^/]*)$'))
  return u ~= nil and u > now and in_record(u, sh)
end

-- read_entry returns the last acquire (us), demand (tokens/s) and credit
-- (tokens) of a registry entry, "last acquire:demand:credit:share", and
-- its share as written (an earlier release's entry has none: nil; see
-- SHARES); nils for none, and for one that does not read or is older
-- than cutoff without a share in force after now under the record sh
-- (holds_share: not this instance's any more).
local function read_entry(mine, cutoff, now, sh)
  if not mine then
    return nil, nil, nil, nil
  end
  local s, d, c, r = string.match(mine, '^([^:]*):([^:]*):([^:]*):([^:]*)$')
  if s == nil then
    s, d, c = string.match(mine, '^([^:]*):([^:]*):([^:]*)$')
  end
  local seen, demand, credit = tonumber(s), tonumber(d), tonumber(c)
  -- Numbers no call writes (not finite, a demand or a credit below 0:
  -- tonumber reads 'nan' and 'inf') make an entry that does not read.
  -- (Releases before MAX_CREDIT wrote a credit of inf when a share far
  -- above the rate made burst * cshare overflow: such an entry is read
  -- as none, as it always was.)
  -- Used, a credit of nan turned the fair-share cap off and was written
  -- back as nan call after call, a negative one made a negative grant
  -- (tokens put into the bucket; -inf stored it as inf), and a time of
  -- inf never went stale (TestCorruptRegistryIsRepaired). Taken for
  -- none, the instance's own is written again as a new instance's.
  if not (finite(seen) and finite(demand) and demand >= 0 and finite(credit) and credit >= 0) or
      (seen < cutoff and not holds_share(r, now, sh)) then
    return nil, nil, nil, nil
  end
  return seen, demand, credit, r
end

-- acquire runs the acquire above for one tenant: its bucket, registry and
-- override keys, its arguments at ARGV[o + 1 ..], the call's Redis TIME
-- (clock, microseconds) and how many arguments it has (3 to 8: ARGV[o + 7]
-- is the reserve length, ARGV[o + 8] the share's operation).
-- It returns the tenant's reply or its error reply.
local function acquire(key, ikey, qkey, o, clock, nargs)
  local rate, burst = check_limits(ARGV[o + 1], ARGV[o + 2], '')
  if rate == nil then
    return burst -- the error reply
  end
  local want = tonumber(ARGV[o + 3])
  if not whole(want, 0) then
    return bad('want must be an integer >= 0, got ' .. tostring(ARGV[o + 3]))
  end
  local length = 0 -- the reserve length, milliseconds
  if nargs >= 7 and ARGV[o + 7] ~= '' then
    length = tonumber(ARGV[o + 7])
    if length == nil or length ~= length or length < 0 or length == math.huge then
      return bad('reserve length must be a finite number >= 0 (ms), got ' .. tostring(ARGV[o + 7]))
    end
  end
  -- The share's operation (see SHARES): '' keeps the share held as it is,
  -- 'R<from>' ends the one granted at from, 'A<period>:<phase>:<hold>:
  -- <headroom>' asks for one (µs, µs, µs, a fraction), replacing it.
  local op, from, terms = '', nil, nil
  if nargs >= 8 and ARGV[o + 8] ~= '' then
    local a = ARGV[o + 8]
    op = string.sub(a, 1, 1)
    if op == 'R' then
      from = tonumber(string.sub(a, 2))
      if not whole(from, 0) then
        return bad('share release must be R<from, µs>, got ' .. a)
      end
    elseif op == 'A' then
      local pe, ph, ho, hr, ni = string.match(a, '^A([^:]*):([^:]*):([^:]*):([^:]*)$')
      if pe == nil then
        pe, ph, ho, hr, ni = string.match(a, '^A([^:]*):([^:]*):([^:]*):([^:]*):([^:]*)$')
      end
      pe, ph, ho, hr, ni = tonumber(pe), tonumber(ph), tonumber(ho), tonumber(hr), tonumber(ni or '0')
      if not (whole(pe, 1000) and pe <= EPOCH_TIME / 4 and whole(ph, 0) and ph < pe and whole(ho, 1000) and
          ho ~= math.huge and hr and hr >= 0 and hr < 1 and whole(ni, 0) and ni <= MAX_SHARE_INSTANCES) then
        return bad('share ask must be A<period>:<phase>:<hold>:<headroom>[:<instances>] (period >= 1000 µs, phase in [0, period), hold >= 1000 µs, headroom in [0, 1), instances 0 to ' .. MAX_SHARE_INSTANCES .. '), got ' .. a)
      end
      terms = {pe, ph, ho, hr, ni}
    else
      return bad('share operation must be empty, R<from> or A<terms>, got ' .. a)
    end
    if ARGV[o + 4] == nil or ARGV[o + 4] == '' then
      return bad('a share needs an instance id')
    end
  end

  -- The override, when one is stored, replaces the caller's rate and burst.
  -- btext: the text burst was read from.
  local override = 0
  local btext = ARGV[o + 2]
  local q, orate, oburst = read_override(qkey)
  if q == nil then
    return orate -- the error reply
  end
  if orate ~= nil then
    rate, burst, btext = orate, oburst, q[2]
    override = {q[1], q[2], q[3] or '0', q[4] or '0', q[5] or '0', q[6] or '0'}
  end

  local state, tokens, _, now = read_bucket(key, clock, rate, burst, btext)
  if state == nil then
    return tokens -- the error reply
  end
  -- Record the level before the debit (see the header).
  local h = history_at(state, now, burst, tokens, btext)

  local instances = 0
  local share = nil       -- this instance's max-min fair share, tokens/s
  local credit = nil      -- this instance's fair-share credit, tokens
  local capacity = nil    -- the most credit it may hold
  local totalDemand = 0
  local id = ARGV[o + 4]
  local demand = 0
  local window = 0        -- the registry window, microseconds
  local prevSeen, prevDemand, prevCredit, prevMine = nil, nil, nil, nil
  local summary = nil     -- the registry summary to store, when recomputed or joined
  local joined = false    -- whether the caller joined the summary without a recompute
  local keepRegistry = false -- whether the registry's TTL is renewed (see below)
  local older = nil       -- whether the recompute met an earlier release's live entry
  local mine = nil        -- the rate share this instance holds: {rate, from, until}
  local mineText = ''     -- and as its entry's fourth field holds it
  if id ~= nil and id ~= '' then
    local wms = tonumber(ARGV[o + 5])
    -- At most 1e15 ms (as roster.lua's): the registry's TTL, two
    -- windows, goes to PEXPIRE as %d, which is -2^63 for a number past
    -- 2^63, and a negative TTL deletes the hash just written.
    if wms == nil or wms ~= wms or wms < 1 or wms > 1e15 then
      return bad('window must be a number in [1, 1e15] (ms), got ' .. tostring(ARGV[o + 5]))
    end
    window = wms * 1000
    demand = sane_demand(ARGV[o + 6])
    local cutoff = now - window
    -- The registry summary, so that most calls need not read every entry:
    -- "computed at (us):instances:total demand:water level", the level -1
    -- when every demand is met. It is recomputed from the entries when it
    -- is missing, older than SUMMARY_AGE of the window, from the future, or
    -- when this instance has no entry (so that a new instance counts at
    -- once), unless every demand is met and stays met with the caller's:
    -- a new instance then joins it (below). Between, shares follow the
    -- demands as of the summary.
    local level = nil
    local st, sn, sd, sl = nil, nil, nil, nil
    local summaryAt = nil -- when the summary written was computed: now, or st when joined
    if state[13] then
      local a, b, c, d = string.match(state[13], '^([^:]*):([^:]*):([^:]*):([^:]*)$')
      st = tonumber(a)
      -- A summary too old to use is recomputed, whatever the rest holds.
      if st ~= nil and st <= now and now - st < window * SUMMARY_AGE then
        sn, sd, sl = tonumber(b), tonumber(c), tonumber(d)
        -- A summary no recompute writes (instances not a whole number
        -- >= 1, a demand or level not finite, a level below 0 but -1) is
        -- recomputed: used, inf instances replied -2^63 of them, and an
        -- infinite demand capped every grant (TestCorruptRegistryIsRepaired).
        if not (whole(sn, 1) and finite(sd) and sd >= 0 and finite(sl) and (sl >= 0 or sl == -1)) then
          sn, sd, sl = nil, nil, nil
        end
      end
    end
    -- all: every entry, when the summary is recomputed. A summary too old
    -- to use is recomputed whatever this instance's entry holds, so the
    -- entry is then taken from all rather than read on its own (HGET).
    local all = nil
    if st == nil or sn == nil or sd == nil or sl == nil or
        sl ~= sl or sd ~= sd or st > now or now - st >= window * SUMMARY_AGE then
      all = redis.call('HGETALL', ikey)
      for i = 1, #all, 2 do
        if all[i] == id then
          prevSeen, prevDemand, prevCredit, prevMine = read_entry(all[i + 1], cutoff, now, state[21])
          break
        end
      end
    else
      local raw = redis.call('HGET', ikey, id)
      prevSeen, prevDemand, prevCredit, prevMine = read_entry(raw, cutoff, now, state[21])
      if not raw and op ~= 'A' and sl == -1 and sd + demand <= rate then
        -- A new instance (no entry at all) where every demand is met and
        -- stays met with its own: it joins the summary (one more
        -- instance, its demand added, every demand still met, computed
        -- at the same time), which is what a recompute would give but
        -- for entries gone stale since st, which the summary counts
        -- until its next recompute anyway. It reads no other instance's
        -- entry (a recompute reads them all: 2.2 times a steady call
        -- with 15 entries, scripts/acquire-paths.sh's join/16). A new
        -- instance that asks for a share recomputes, as before: only
        -- a recompute sees an earlier release's entry (ol, SHARES).
        sn, sd = sn + 1, sd + demand
        summaryAt, joined = st, true
      elseif prevSeen == nil or prevSeen < cutoff then
        -- An entry older than the window (kept for its share) is not
        -- counted in the summaries either: recompute, to count the caller.
        all = redis.call('HGETALL', ikey)
      end
    end
    if all then
      local demands = {demand}
      local stale = nil -- the entries to delete, in one HDEL
      for i = 1, #all, 2 do
        if all[i] ~= id then
          local s, d, r = string.match(all[i + 1], '^([^:]*):([^:]*):[^:]*(:?)')
          local seen = tonumber(s)
          if not finite(seen) or seen < cutoff then
            -- Not active, and dropped unless its instance would still
            -- read it as its own: it holds a share in force (SHARES).
            if not read_entry(all[i + 1], cutoff, now, state[21]) then
              stale = stale or {}
              stale[#stale + 1] = all[i]
            end
          else
            demands[#demands + 1] = sane_demand(d)
            if r == '' then
              older = true -- three fields: a client that does not honour shares
            end
          end
        end
      end
      if stale then
        -- In chunks: unpack takes at most about 8,000 values, and a
        -- registry that many stopped instances left (short-lived ones,
        -- a fleet restarted under new ids) failed every recompute, the
        -- tenant's every call with it, for up to a window.
        for i = 1, #stale, 1000 do
          redis.call('HDEL', ikey, unpack(stale, i, math.min(i + 999, #stale)))
        end
      end
      -- Max-min fair share of the rate among the reported demands
      -- (water-filling): the smallest demands are met in full, the rest get
      -- the water level, an even split of what those left.
      if #demands > 1 then
        table.sort(demands)
      end
      local left = rate
      level = -1
      for k = 1, #demands do
        totalDemand = totalDemand + demands[k]
        if level < 0 then
          local fair = left / (#demands - k + 1)
          if demands[k] > fair then
            level = fair
          else
            left = left - demands[k]
          end
        end
      end
      instances = #demands
      summaryAt = now
    else
      instances, totalDemand, level = sn, sd, sl
    end
    if summaryAt then
      if whole15(totalDemand) and whole15(level) then
        summary = string.format('%d:%d:%d:%d', summaryAt, instances, totalDemand, level)
      else
        summary = string.format('%d:%d:%.17g:%.17g', summaryAt, instances, totalDemand, level)
      end
    end
    share = demand
    if level >= 0 and share > level then
      share = level
    end
    -- The rate share this instance holds, while it is in force: its
    -- entry's "rate/from/until" (SHARES), until after now and after the
    -- start of the record's epoch (a share granted under other epochs
    -- may end between the two; counted, its instance's ask or end took
    -- it out of a record built after it ended: lease.Shares.Holds).
    local sh = state[21]
    if prevMine and prevMine ~= '' and sh then
      local r, f, u = string.match(prevMine, '^([^/]*)/([^/]*)/([^/]*)$')
      r, f, u = tonumber(r), tonumber(f), tonumber(u)
      if r and f and u and r > 0 and u > now and u > sh[1] * sh[4] + sh[5] and in_record(u, sh) then
        mine, mineText = {r, f, u}, prevMine
      end
    end
    if mine and (op == 'A' or (op == 'R' and mine[2] == from)) then
      -- Ended (or to be replaced): out of the sums in force, and out of
      -- the part booked when it runs past the record's epoch.
      local sc, sb = sh[2] - mine[1], sh[3]
      if mine[3] > (sh[1] + 1) * sh[4] + sh[5] then
        sb = sb - mine[1]
      end
      if sc < 0 then
        sc = 0
      end
      if sb < 0 then
        sb = 0
      end
      if sb > sc then
        sb = sc
      end
      sh = {sh[1], sc, sb, sh[4], sh[5]}
      if sc <= 0 then
        sh = nil
      end
      mine, mineText = nil, ''
    end
    -- Granted out of what the shares in force leave of rate*(1 - headroom),
    -- at most the fair share, until the end of the epoch, or of the next
    -- one in the epoch's second half (booked); none while an earlier
    -- release's client is active (older, or the bucket's ol from the last
    -- recompute), or when it could not hold a token (share*hold < 1).
    if op == 'A' and not older and not (all == nil and state[22]) then
      if sh == nil then
        local ep = math.floor((now - terms[2]) / terms[1])
        if ep * terms[1] + terms[2] > now then
          ep = ep - 1
        elseif (ep + 1) * terms[1] + terms[2] <= now then
          ep = ep + 1
        end
        sh = {ep, 0, 0, terms[1], terms[2]}
      end
      local fin = (sh[1] + 1) * sh[4] + sh[5]
      local s = rate * (1 - terms[4]) - sh[2]
      if share < s then
        s = share
      end
      -- At most an even part among the instances the asker expects
      -- (ShareTerms.Instances), however few have registered yet.
      if terms[5] > 1 then
        local even = rate * (1 - terms[4]) / terms[5]
        if s > even then
          s = even
        end
      end
      if s > 0 and s * terms[3] / 1000000 >= 1 then
        local u = fin
        if 2 * (fin - now) < sh[4] then
          u = fin + sh[4]
          sh[3] = sh[3] + s
        end
        sh[2] = sh[2] + s
        mine = {s, now, u}
        mineText = fmt17(s) .. '/' .. string.format('%d/%d', now, u)
      elseif sh[2] <= 0 then
        sh = nil
      end
    end
    state[21] = sh
    -- The credit accrues at the share, up to the instance's share of the
    -- burst or, when more, half a window of the share but at most a
    -- quarter of the burst: a starved instance may then call once per
    -- half window rather than once per fill time (burst/rate), each call
    -- taking more, while the instances together still come for the
    -- bucket's tokens before it is half full. A new instance starts full.
    -- With a rate share held, what the credit follows is the rest of the
    -- fair share: the bucket refills at the rate less the shares.
    local cshare = share
    if mine then
      cshare = share - mine[1]
      if cshare < 0 then
        cshare = 0
      end
    end
    capacity = burst * cshare / rate
    local span = cshare * window / 2000000
    if span > burst / 4 then
      span = burst / 4
    end
    if capacity < span then
      capacity = span
    end
    if capacity < 1 then
      capacity = 1
    end
    -- At most MAX_CREDIT: a share far above the rate (a demand that
    -- jumped since the summary) makes burst * cshare overflow, and a
    -- credit of inf, written, reads back as a corrupt entry (read_entry):
    -- the instance then lost the rate share it held (lease.MaxCredit).
    if capacity > MAX_CREDIT then
      capacity = MAX_CREDIT
    end
    if prevCredit == nil then
      credit = capacity
    else
      local since = now - prevSeen
      if since < 0 then
        since = 0
      end
      credit = prevCredit + cshare * since / 1000000
      if credit > capacity then
        credit = capacity
      end
    end
  end

  local granted = math.floor(tokens)
  if want < granted then
    granted = want
  end
  -- held: this instance is held to its fair share (its demand is above
  -- it while the credit rule applies), so a reservation may follow.
  local held = false
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
      held = demand > share
    else
      credit = capacity
    end
    -- The entry is written when it changes what a later call computes (the
    -- credit, a demand moved by more than a quarter), when it is new, and
    -- at least every ENTRY_AGE of the window, so that it stays active. The
    -- hash is kept for at least two windows from each summary, which any
    -- active instance recomputes within SUMMARY_AGE of a window.
    if prevSeen == nil or credit ~= prevCredit or now - prevSeen >= window * ENTRY_AGE or
        math.abs(demand - prevDemand) > prevDemand / 4 or mineText ~= (prevMine or '') then
      local entry
      if whole15(demand) and whole15(credit) then
        entry = string.format('%d:%d:%d:', now, demand, credit) .. mineText
      else
        entry = string.format('%d:%.17g:%.17g:', now, demand, credit) .. mineText
      end
      redis.call('HSET', ikey, id, entry)
    end
    -- The hash is kept 2 windows from each summary written (a recompute,
    -- or a new instance's join, whose entry may have made the hash anew,
    -- without a TTL, had it gone) and each share granted (which may end
    -- after what the last recompute kept it for), or until the record's
    -- shares end when that is later, so that the entries of instances
    -- holding shares outlive their window (SHARES): after the bucket is
    -- stored, which says when they end. Its TTL is only ever extended
    -- (below).
    keepRegistry = summary or (op == 'A' and mine)
  end
  tokens = tokens - granted

  -- A reservation (see the header): the share over the length, within
  -- the refill up to RESERVE_AHEAD after the clock, paced at the share,
  -- when the bucket cannot serve more now or the instance is held to its
  -- share. The whole tokens left (keep) stay in the bucket for the other
  -- instances; the fraction below them (f, in [0, 1)) is the
  -- reservation's.
  local reserved = 0
  local pace = nil
  local stored = now
  -- Not while a share is in force (state[21]): the bucket then makes less
  -- than rate, which a reservation's schedule assumes.
  if length > 0 and share ~= nil and share > 0 and not state[21] and ((want > granted and tokens < 1) or held) then
    local keep = math.floor(tokens)
    tokens = tokens - keep
    local room = (clock + RESERVE_AHEAD * 1000 - now) * rate / 1000000 + tokens
    -- A share above the rate (a registry summary older than a jump in
    -- this instance's demand) reserves at the rate.
    pace = share
    if pace > rate then
      pace = rate
    end
    reserved = math.floor(pace * length / 1000)
    if room < reserved then
      reserved = math.floor(room)
    end
    -- The last reserved token is produced at now + (reserved - f)/rate:
    -- ts, rounded up to the microsecond, and never past clock +
    -- RESERVE_AHEAD (what a mixed fleet relies on; rounding can add a
    -- microsecond, so this takes one or two turns).
    while reserved > 0 do
      stored = math.ceil(now + (reserved - tokens) * 1000000 / rate)
      if stored <= clock + RESERVE_AHEAD * 1000 then
        break
      end
      reserved = reserved - 1
    end
    if reserved > 0 then
      granted = granted + reserved
      tokens = keep
    else
      reserved = 0
      pace = nil
      stored = now
      tokens = tokens + keep
    end
  end

  local extra = nil
  if summary then
    extra = {'rg', summary}
    if older then
      extra[3], extra[4] = 'ol', string.format('%d', now)
    end
  end
  local tk, sharesEnd = store(key, tokens, stored, rate, burst, h, state, extra, clock)
  -- Only a recompute, which read every entry, can tell that no client
  -- of an earlier release is active any more; a join read none.
  if summary and not joined and not older and state[22] then
    redis.call('HDEL', key, 'ol')
  end
  if keepRegistry then
    local ttl = math.floor(window / 500)
    if sharesEnd then
      local ms = math.ceil((sharesEnd - now) / 1000)
      if ms > ttl then
        ttl = ms
      end
    end
    -- Never shortened: instances with different windows (lease TTLs,
    -- refresh intervals) share the hash, and a caller with a short window
    -- that set its own 2 windows cut the TTL below what a longer-window
    -- instance's recompute kept it for: the hash expired with entries a
    -- longer window still counted, and their instances came back as new
    -- ones (their credit full), uncounted by the others meanwhile. One
    -- PTTL, on the calls that renew (a recompute, a share granted); -1 (no
    -- TTL) is below any. Releases before this one set it as they found
    -- it: beside them the hash lives as long as their last renewal says.
    -- PTTL is the one command of this script that the previous release's
    -- (v10) did not call, so an ACL written for those commands refuses
    -- it; and it comes after the bucket and the caller's entry are
    -- written, which a failing script does not roll back: raised, the
    -- refusal failed the acquire after its tokens were taken, at every
    -- renewal (TestAcquireBesideAnACLWithoutPTTL). Refused (an error
    -- table, not a number), the TTL is set as v10 sets it.
    local pttl = redis.pcall('PTTL', ikey)
    if type(pttl) ~= 'number' or pttl < ttl then
      redis.call('PEXPIRE', ikey, string.format('%d', ttl))
    end
  end

  -- One string (see the header): the client reads it as one buffer,
  -- where an array costs it a value per element.
  local shareOut = ''
  if share ~= nil then
    shareOut = fmt17(share)
  end
  local paceOut = ''
  if pace ~= nil then
    paceOut = fmt17(pace)
  end
  local reply = string.format('%d %s %d %d %s %d %s %d %s', granted, tk, now, instances, shareOut, reserved, paceOut, now - clock, mineText)
  if override ~= 0 then
    reply = reply .. ' ' .. table.concat(override, ' ')
  end
  return reply
end

if #KEYS == 3 then
  return acquire(KEYS[1], KEYS[2], KEYS[3], 0, redis_now(), #ARGV)
end
local n = #KEYS / 3
if n < 2 or n ~= math.floor(n) or #ARGV ~= 8 * n then
  return bad('a batch wants 3 keys and 8 arguments per tenant, got ' .. #KEYS .. ' keys and ' .. #ARGV .. ' arguments')
end
local clock = redis_now()
local replies = {}
for i = 1, n do
  -- A command that fails (a key of another type) raises an error that
  -- would end the whole call, after the earlier tenants' writes: caught,
  -- it is that tenant's error reply alone. Its reads come first, so it
  -- has written nothing then.
  local ok, r = pcall(acquire, KEYS[3 * i - 2], KEYS[3 * i - 1], KEYS[3 * i], 8 * (i - 1), clock, 8)
  if not ok then
    if type(r) == 'table' and r.err then
      r = redis.error_reply(r.err)
    else
      r = redis.error_reply(tostring(r))
    end
  end
  replies[i] = r
end
return replies
