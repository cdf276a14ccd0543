// Package lease is the Redis protocol of leasequota: it keeps each tenant's
// global token bucket in Redis and hands out batches of its tokens (leases)
// to the instances that spend them locally.
//
// # Keys
//
// A tenant's bucket is one hash at Key(prefix, tenant), which is
// prefix + "{" + enc(tenant) + "}". enc is injective, never empty and never
// contains a brace, so any byte string is a valid tenant, two tenants never
// share a bucket, and on Redis Cluster a tenant's slot depends on the tenant
// alone (Slot computes it). The prefix may not contain braces
// (ValidatePrefix). Two keys belong to the prefix, not to a tenant, and
// have no hash tag: the quota version (QuotaVersionKey) and the fleet's
// roster (RosterKey, CountInstances).
//
// # Stored state
//
// The hash has these fields:
//
//	tk  tokens in the bucket, a float64 written with "%.17g" (exact round trip)
//	ts  when tk was computed: Redis TIME in microseconds, an integer
//	h   the level history (see Returns) and the burst it was recorded
//	    under, packed as base-128 varints: the burst, the oldest level,
//	    each later level's drop (levels as codes of their rounding, see
//	    Returns), each entry's gap to the next (µs) and the newest entry's
//	    distance back from ts (common.lua); at most 64 bytes
//	rg  the instance registry's summary (acquire.lua)
//	sh  the rate shares in force, "epoch:committed:booked:period:phase"
//	    (Shares; see Rate shares), only while some are
//	ol  when the registry's summary last saw a live entry of a client
//	    that does not honour shares (see Rate shares), only while one does
//
// Clients of the previous release kept the history in hb (its burst) and
// p1..p8 (one entry "t:l" a field); see Returns for how the two share a
// bucket.
//
// The only clock is the Redis server's TIME, read inside the scripts; a
// client clock is never used, so instances with skewed clocks agree. If the
// Redis clock goes backwards (or stands still), each call on the bucket
// takes the time a microsecond after the previous one instead, so the
// bucket refills next to nothing until the clock catches up, and the calls
// on a bucket always have distinct, rising times.
//
// A missing key is a full bucket (Burst tokens). Every write sets the key
// to expire one second after the bucket would have refilled to full (at
// ts + (burst - tk)/rate, counted from Redis's clock, which a frozen
// bucket's ts is ahead of; with rate shares in force, from when they end:
// Settled), so an idle tenant's key disappears exactly when forgetting it
// changes nothing. (When that is beyond ~31,700 years, for tiny rates, the
// key is kept.)
//
// # Rate shares
//
// A share is a grant of a rate rather than of tokens: s tokens a second
// until the end of an epoch, which its holder accrues locally. Epoch e is
// [e*period + phase, (e+1)*period + phase) of Redis's clock; a share
// granted in an epoch's second half runs to the end of the next one
// (booked). A bucket that records shares in force (sh) refills at the
// rate less them, at least 0 a second, piece by piece across epochs: at an
// epoch's end only the booked part stays in force, and once none is, the
// record is dropped and the bucket refills at the whole rate
// (RefillShares). The two together make the rate, so the bound below
// holds with each share's rate over the time it is held counted as
// granted (internal/rateshare's model, whose bound is a property test,
// holds RefillShares and Settled to the bit, and lease/memstore's grants
// and ends to its own). Every script refills and sets the TTL so, and an
// acquire makes no reservation while a share is in force (a reservation
// assumes the whole rate).
//
// An acquire asks for a share with Request.Share = ShareAsk on
// ShareTerms (it needs WithInstance): the share the caller held ends, and
// it is granted min(its max-min fair share, what the shares in force
// leave of the rate less ShareTerms.Headroom, and an even part of that
// rate among ShareTerms.Instances when the ask names more than one),
// none when that could not
// hold a token over ShareTerms.Hold; Grant.RateShare says what it holds
// after any call. ShareEnd ends the share granted at ShareFrom, if still
// held. The share is kept in the caller's registry entry, as its fourth
// field ("rate/from/until", empty for none), which every entry of this
// release has: it says that the client honours a record of shares.
// Earlier releases read the other instances' entries by their first two
// fields; and since a client of one refills past the shares in force, no
// share is granted while a live entry lacks the fourth field (the bucket
// keeps ol while the registry's summary last saw one). That guard is
// not a proof (an earlier client that starts while shares are in force
// refills past them until they end): shares are to be asked for only
// once every client of a fleet runs this release or a later one. A record
// in a bucket that an earlier release wrote since (ts after the record's
// epoch) refills nothing for the epochs it missed: that client refilled
// them at the whole rate. The Limiter asks for shares with
// WithRateShares (off by default; syncer/share.go).
//
// # Reservations
//
// A bucket whose ts is after Redis's clock is frozen: tk tokens are
// available now and nothing refills until ts. Request.Reserve (a length L)
// lets a starved instance (it has a registry entry and a fair share, and
// the bucket cannot serve its Want now, or the credit rule holds it to
// its share while it asks for more) commit part of the refill to itself:
// floor(Pace*L) tokens, Pace = min(Share, rate) (a registry summary older
// than a jump in the caller's demand can put its Share above the rate),
// within the room up to ReserveAhead (990 ms) after
// Redis's clock, which the bucket produces one by one until the ts it is
// frozen to. The whole tokens the bucket held stay available to the
// other instances. Grant.Reserved of Grant.Granted are such tokens; token k of
// them may be spent from Grant.Wait + k/Grant.Pace after the reply (from
// ServerTime + k/Pace in Redis time),
// so no token is spent before the bucket produced it, and the bound below
// holds as before. An instance then calls about once per L, whatever its
// demand: its reservation lasts L at its pace but takes only
// Pace*L/rate of the bucket's refill (L/n with n equal shares), so many
// instances' reservations fit in the second ahead. A later acquire on a
// frozen bucket runs at ts + 1 µs (Grant.Wait > 0): its reservation starts
// where the others end.
//
// Rollout: clients of earlier releases keep a frozen bucket's ts, but set
// its TTL to (burst - tokens)/rate + 1 s from the clock, which keeps the
// key until the bucket is full only while ts is at most a second ahead,
// less the millisecond Redis may round the expiry down by: hence
// ReserveAhead, 10 ms short of a second, whatever L.
// TestOldClientKeepsFrozenBucket shows both sides.
//
// Returns: release.lua credits returned tokens into tk, available at once,
// also on a frozen bucket. That is right for tokens that exist (granted at
// once, or reserved and produced), and would not be for reserved tokens
// the bucket has not produced yet: a client returns only the former (the
// syncer drops a reservation's tokens still to come, never returns them).
//
// # Scripts
//
// acquire.lua (KEYS[1] = bucket, ARGV = rate, burst, want, ...)
// refills the bucket by elapsed*rate, caps it at burst, grants
// min(want, floor(tokens)) (partial grants are normal), stores the rest and
// returns {granted, tokens left, server time, ...}. release.lua (ARGV =
// rate, burst, amount, age, grant, ...) refills the same way, credits
// what it may of amount (see Returns) and returns {tokens, server time,
// credited}; on a missing key it changes nothing (the bucket is already
// full). Both run atomically in Redis, so any number of instances may call
// them concurrently. The scripts' headers give the full layouts.
//
// Rate and burst travel with every call rather than being stored, so a
// tenant's limits can change at any time: the next call refills at the new
// rate and caps at the new burst.
//
// Calls use EVALSHA and fall back to EVAL when Redis answers NOSCRIPT (the
// script did not run, so that is the only error retried); in a pipeline,
// only the commands that got NOSCRIPT are re-sent, in a second pipeline.
//
// On one server (a *redis.Client), WithBatch(n) makes AcquireMany send up
// to n tenants per acquire call (acquire.lua's batch form): each tenant is
// acquired for as on its own, at the call's one Redis TIME, and gets its
// own reply or error; the call's fixed cost is paid once per n tenants.
// The Limiter uses n = 8 there.
//
// A script's reply for one tenant is one string of space-separated
// fields, which go-redis reads as one buffer: ParseAcquireReply and
// ParseReleaseReply decode them, for tools that watch the scripts'
// traffic through a go-redis hook.
//
// # Returns
//
// Crediting returned tokens unconditionally would break the bound over
// windows: tokens granted long ago and returned unspent (say when a lease
// expires) would be leased again, with a fresh lifetime, on top of what the
// bucket refilled meanwhile. So a release credits only what the bucket
// would hold now had the returned tokens never been granted: if k tokens
// were granted at g, min(k, Burst - P), where P is the highest level since
// g; the rest would have been lost to the cap. Any upper bound of P is safe
// (it only credits less).
//
// The bucket keeps a level history (h above, and internal/peaks, its Go
// model): a short list of (time, level) where each level bounds the
// bucket's levels since the previous entry's time. Every acquire records
// the level it refilled to before its debit, at its time; between calls
// the level only rises by refill, so that bounds it since the previous
// call. An entry is dropped once a later one is at least as high, so along
// the list times rise and levels fall, and the highest level over (g, now]
// is the level of the first entry after g (or the level now, if higher).
// The grant's own entry, at g, is not after g: the level before its debit
// does not count. Beyond 8 entries the two neighbours with the smallest
// drop merge into one entry with the later time and the higher level:
// grants between them are then judged against the higher level, which
// only credits less.
//
// Levels are kept rounded up (pushed, raised and restarted so) to whole
// tokens from 128 up and to 8 significant bits below (down to 2^-30): an
// entry still bounds the levels it stands for, only higher, so P is the
// exact rule's or higher and a return is credited less (by less than a
// token and less than a 128th of P), never more. Times are kept exactly, in
// microseconds: an entry recorded later than its call would be safe too,
// but the grant's own entry would then count, and tokens leased from a
// full bucket would never come back. A history that would pack into more
// than 64 bytes is merged as above until it fits, so that Redis keeps the
// hash in its compact encoding; one of a burst (or oldest level) of 2^52
// or more is not kept (an unknown past).
//
// A release is told an age, an upper bound of how long ago the returned
// tokens were granted, and, optionally, the oldest grant they come from
// (ReleaseRequest.Grant, from Grant.ID: the low 32 bits of its time, which
// tell the time exactly while the age, plus how far the bucket's time runs
// ahead of Redis's clock, is below about 71 minutes, even if
// the release arrives later than the age allows). It takes g = that grant's time, or
// Redis's clock less the age without it (not the bucket's time, which runs
// ahead of the clock while its refill is reserved), credits c = min(amount, Burst - P) with P from the
// history, and adds c to every entry after g: the bucket without those
// tokens granted would have been c higher ever since, so a later return
// cannot use the same room below the cap again. (Without that, two returns
// of tokens granted before one peak could each credit the room left at
// that peak.) Without the grant's ID, P also counts the levels from
// the clock less the age to the grant, including its own level before the debit, so
// tokens leased from a full bucket are not credited; with it, they are,
// whatever other instances acquired since.
//
// A missing key, a hash without history (written by an older version),
// a history recorded under another burst (or reset by a quota change by
// quota.lua), and one that a client of the layout before the previous
// (fields s0, m0, s1, m1, ta, mt) may have missed calls of, because it
// wrote those fields since, are an unknown past: the history restarts as
// one entry (now, at least Burst), so nothing granted before can be
// credited. A client of the previous release (hb, p1..p8) writes p1 on
// every call and does not know h: when hb or p1 is there, it wrote last,
// and its p-history is read (levels rounded up; it covers every call since
// that client found no p1 and restarted) and h ignored. The scripts delete
// the older layouts' fields on every write, so such a client then finds
// no history and credits nothing granted before its next call: during a
// rollout, returns are credited less, never more
// (TestRolloutCreditsNoMoreThanExact, TestMixedFleetRollout).
//
// After every release, then, the bucket holds exactly what a bucket that
// never granted the credited tokens would hold: the credits are grants
// that did not happen, and a bucket with fewer grants obeys the bound.
//
// # The bound
//
// Every token an instance spends was first taken out of the bucket by
// acquire.lua, and release.lua only credits returned tokens as if they had
// never been granted (see Returns), so for each tenant, over any span T of
// Redis time since its bucket was created, and equally over any window T:
//
//	spent <= granted - credited <= Burst + Rate*T
//
// A release that is applied twice (e.g. go-redis retrying it after a lost
// reply, or sending a whole pipeline of releases again because its first
// command's reply was LOADING, READONLY or another it retries:
// TestReleasePipelineReplayedByGoRedis) would break that accounting. A Client made WithInstance gives
// every release a unique id, which release.lua records in a sorted set next
// to the bucket (same slot) for ReleaseDedupWindow and applies at most
// once. Callers must still release each leased token at most once. An
// acquire that is retried only takes more tokens, which keeps the bound.
//
// Each tenant thus has up to four keys, all in its hash slot: the bucket,
// the instance registry (InstancesKey) and the applied releases
// (ReleasesKey), these two only with WithInstance, and the quota override
// (QuotaKey), only while one is stored.
//
// # Listing overrides
//
// ListOverrides SCANs every node (never KEYS) for the prefix's override
// keys, <prefix>{<encoded tenant>}:q, with the prefix's glob characters
// escaped in MATCH. A tenant longer than 128 bytes is hashed into its key,
// which does not give the name back, so quota.lua stores the tenant's
// name in the override hash too (field n; no script reads it). Clients of
// earlier releases neither write nor read n, so a fleet may mix them: an
// override they wrote (or rewrote, which drops n) is listed by the name
// its key gives back when the tenant was not hashed, and otherwise by its
// key with an error wrapping ErrNameUnknown. Setting it again from this
// release stores the name. ListOverrides needs no instance: a command can
// list with NewClient(rdb, prefix).
//
// # The Store seam
//
// Store is the part of a Client that the syncer uses: batches of acquires
// and releases, the overrides and the quota version. Package
// lease/memstore implements it in process, with these scripts' semantics
// on a clock of the caller's choice; the integration module's conformance
// suite runs the same cases against both and holds every Redis reply to
// memstore's at the same time.
package lease
