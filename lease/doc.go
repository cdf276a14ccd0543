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
// (ValidatePrefix).
//
// # Stored state
//
// The hash has two fields:
//
//	tk  tokens in the bucket, a float64 written with "%.17g" (exact round trip)
//	ts  when tk was computed: Redis TIME in microseconds, an integer
//
// The only clock is the Redis server's TIME, read inside the scripts; a
// client clock is never used, so instances with skewed clocks agree. If the
// Redis clock goes backwards, the bucket refills nothing until it catches up.
//
// A missing key is a full bucket (Burst tokens). Every write sets the key
// to expire one second after the bucket would have refilled to full, so an
// idle tenant's key disappears exactly when forgetting it changes nothing.
// (When that is beyond ~31,700 years, for tiny rates, the key is kept.)
//
// # Scripts
//
// acquire.lua (KEYS[1] = bucket, ARGV = rate, burst, want) refills the
// bucket by elapsed*rate, caps it at burst, grants min(want, floor(tokens))
// (partial grants are normal), stores the rest and returns
// {granted, tokens left, server time}. release.lua (ARGV = rate, burst,
// amount) refills the same way, adds amount, caps at burst and returns
// {tokens, server time}; on a missing key it changes nothing (the bucket is
// already full). Both run atomically in Redis, so any number of instances
// may call them concurrently.
//
// Rate and burst travel with every call rather than being stored, so a
// tenant's limits can change at any time: the next call refills at the new
// rate and caps at the new burst.
//
// Calls use EVALSHA and fall back to EVAL when Redis answers NOSCRIPT (the
// script did not run, so that is the only error retried); in a pipeline,
// only the commands that got NOSCRIPT are re-sent, in a second pipeline.
//
// # The bound
//
// Every token an instance spends was first taken out of the bucket by
// acquire.lua, and release.lua only returns tokens that were taken and not
// spent, so for each tenant, over any span T of Redis time since its bucket
// was created:
//
//	spent <= granted - released <= Burst + Rate*T
//
// A release that is applied twice (e.g. go-redis retrying it after a lost
// reply) would break that accounting. A Client made WithInstance gives
// every release a unique id, which release.lua records in a sorted set next
// to the bucket (same slot) for ReleaseDedupWindow and applies at most
// once. Callers must still release each leased token at most once. An
// acquire that is retried only takes more tokens, which keeps the bound.
//
// Each tenant thus has up to three keys, all in its hash slot: the bucket,
// the instance registry (InstancesKey) and the applied releases
// (ReleasesKey); the last two only with WithInstance.
package lease
