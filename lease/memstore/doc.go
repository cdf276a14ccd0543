// Package memstore is an in-process lease.Store: the tenants' global token
// buckets, their instance registries, applied release ids and quota
// overrides, which leasequota keeps in Redis, kept in this process's
// memory instead, with the semantics of the Lua scripts of package lease
// (common.lua with acquire.lua, release.lua and quota.lua). It serves unit
// tests, single-process programs, and deterministic simulations of whole
// limiters driven by a fake clock.
//
// # Model
//
// A Store is one Redis database under one key prefix: a keyspace of
// tenants, each with up to four entries that expire as the Redis keys do,
// plus the prefix's quota version and the fleet's roster (each instance
// that counted itself with Instance.CountInstances, for its window).
//
//   - The bucket: tokens, the bucket's time of its last call, the burst
//     its level history was recorded under and the history itself (at most
//     8 entries, as lease/common.lua keeps it), and the rate shares in
//     force (lease.Shares). Every write keeps it until it would have
//     refilled to full once no share is in force, plus a second; after
//     that it is missing, which means full.
//   - The instance registry: instance id → last acquire, reported demand,
//     fair-share credit, the rate share granted last; kept for twice the
//     instance's window after an acquire that registers, or longer when
//     an earlier one (a longer window's) kept it longer: never shortened.
//   - The applied release ids, kept for lease.ReleaseDedupWindow.
//   - The quota override, which never expires.
//
// Every call reads the store's clock once, as the scripts read Redis TIME
// once: the injected clock (WithClock), time.Now by default, in whole
// microseconds. From there each call does what its script does: refill
// at the rate in force (the override's, else the caller's), cap at the
// burst, grant min(want, whole tokens) capped by the fair-share credit
// while the bucket is scarce, credit aged returns against the level
// history, and so on; package lease documents the rules. A call on a
// bucket whose clock has not moved past the bucket's last call takes the
// time a microsecond after it, so a bucket's calls have distinct, rising
// times (Grant.ServerTime, Grant.ID). Arguments are validated exactly as
// lease.Client validates them (lease.Request.Validate and friends): an
// invalid one gets an error wrapping lease.ErrBadRequest and changes
// nothing.
//
// A Store is not itself a lease.Store. Instance returns one instance's
// view of it, which is: the id it registers under and its window, as
// lease.WithInstance gives a lease.Client, and the sequence of its
// release ids. Views of one Store share every bucket.
//
// # Zero value and concurrency
//
// The zero Store is empty and ready to use, with the real clock; New
// applies options. All methods of a Store and of its views are safe for
// concurrent use: one mutex guards the whole keyspace, and each call on a
// tenant runs under it, as a script runs alone in Redis. A batch
// (AcquireMany, ReleaseMany) is a sequence of such calls, not one atomic
// step, like a pipeline. The clock is read while the mutex is held, so
// that times rise in the order the calls run: it must not call the Store.
//
// # What differs from Redis
//
// Nothing semantic: the integration conformance suite runs the same cases
// against Redis (standalone and cluster) and a Store, and checks every
// reply of Redis against a Store replaying the same calls at the times
// Redis reported. What differs is what is not there:
//
//   - Memory only. No persistence, no replication, no eviction under
//     memory pressure; the state is gone with the process, as with a Redis
//     restarted empty.
//   - No network: no timeouts or partial failures. A call whose context is
//     done when it starts fails as a whole (the error wraps ctx.Err()) and
//     changes nothing, as go-redis does not send then.
//   - No corrupt state, so the scripts' errors about corrupt keys have no
//     counterpart. A clock outside 1970..2255 (Redis TIME is never there;
//     a float64 holds its microseconds exactly only up to 2^53) fails the
//     call with an error wrapping ErrClock instead.
//   - SetOverride and DeleteOverride raise the quota version in the same
//     atomic step as the change; on Redis the INCR follows the script.
//   - Expired state is dropped when a call touches it and by a sweep
//     amortized over writes, rather than by Redis's background expiry;
//     either way it is invisible once expired.
//   - No client of an earlier release: every registry entry honours rate
//     shares, so no share is refused for one (acquire.lua's field ol).
//     SetShares writes a bucket's record of shares as a test would with
//     HSET on Redis.
//   - ListOverrides lists the overrides stored when it starts, each once,
//     sorted by tenant, each named (the store keeps every name); SCAN on
//     Redis lists in no order, may list one twice, and names an override
//     that an earlier release wrote under a hashed key only by its key.
package memstore
