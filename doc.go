// Package leasequota enforces per-tenant quotas across every instance of a
// service, as fast as a local token bucket and as strict as a central one.
//
// # Model
//
// Each tenant has one global token bucket in Redis: it holds at most Burst
// tokens and gains Rate tokens per second, by the Redis server's clock.
// Instances do not ask Redis per request. Each one leases batches of tokens
// from the bucket (an atomic Lua script debits them) and spends them
// locally; a background syncer refreshes leases on a schedule spread by
// xxhash(tenant) plus jitter, prefetches when a lease runs low, and takes
// back tokens not spent within the lease TTL. It returns them to Redis as
// aged returns: the bucket credits only what it would hold had they never
// been leased, so returned tokens cannot lift any window above the bound
// (docs/design.md explains; Stats.Expired counts them).
//
// Because every token admitted was debited from Redis first, for each
// tenant and any number of instances:
//
//	admitted <= granted - returned <= Burst + Rate*T
//
// where T is the time since the tenant's bucket was created, and in any
// window of length W at most Burst + Rate*(W + L) are admitted, L being the
// longest lease lifetime (LeaseTTL plus one syncer tick). docs/design.md
// gives the argument.
//
// # Request path
//
// Allow and AllowN decide from the leased tokens: for a tenant that holds
// enough, one map read and one compare-and-swap, with no lock, allocation,
// clock read or network call. A request that finds too few tokens signals
// the syncer without blocking and is denied, unless the syncer keeps no
// lease for the tenant on this instance (its first request here, or a
// tenant whose demand is too low or requests too sparse to keep one: it
// waits up to WithColdStartWait for a lease) or WithMaxWait allows a
// bounded wait for a fresh lease. WaitN waits
// as long as its context allows; AllowNWithin waits only when the wait is
// expected to be within a bound the caller gives.
//
// AllowAll and WaitAll decide one request against several tenant keys at
// once (per IP, per tenant, per day...): all or nothing, nothing spent on
// a denial, each key with its own quota, leases and bound. Per builds the
// quota of n tokens per period. Refund gives back what a Decision
// admitted, for work not done; the bound then holds for admissions net of
// refunds.
//
// A consequence of leasing: an instance can deny a request while another
// instance, or Redis, still holds tokens. Leases are sized from each
// instance's measured demand so this is rare under steady load; tune
// MinLease and WithMaxWait for small bursts (see docs/tuning.md).
//
// # Redis
//
// New takes any go-redis v9 UniversalClient: a plain client, a cluster
// client or a failover (Sentinel) client. A tenant has up to four keys:
// its bucket, <prefix>{<encoded tenant>}, and beside it the instances
// active on it (":i" appended), the ids of applied releases (":r") and a
// quota stored by SetQuota (":q"). They share the hash tag, so every
// script touches one cluster slot; any tenant byte string is encoded
// safely (see package lease). Two more keys belong to the prefix, not to
// a tenant: quota-version, which counts quota changes, and roster, which
// counts the limiters sharing the prefix (Stats.Instances); and after
// Redis answered READONLY or NOREPLICAS, the circuit breaker's probe
// deletes <prefix>probe, which nothing sets, to see whether writes run
// again. docs/design.md lists the keys.
//
// Every Redis call has a deadline (WithRedisTimeout). A tenant whose lease
// call failed backs off (10 ms doubling up to the refresh interval), and a
// circuit breaker stops calling a Redis that failed three times in a row
// (on a Redis Cluster, where a failed node says nothing of the others,
// each tenant only backs off on its own). When Redis fails, leases already
// held keep being spent; once they are gone the tenant's FailureMode
// decides: FailLocal (the default) admits from a local token bucket at
// this instance's share of the rate, FailClosed denies, FailOpen admits.
// Admissions without a lease are outside the bound and counted apart
// (Decision.Mode, Stats, the decisions metric). Leasing resumes on its own.
//
// # Observability
//
// WithMeterProvider, WithTracerProvider and WithLogger take OpenTelemetry
// providers (the otel globals by default) and a slog.Logger: decisions by
// reason, lease traffic, Redis latency and errors, a span per sync round
// and per lease call to Redis. docs/metrics.md lists them.
//
// # Concurrency and lifetime
//
// A Limiter is safe for concurrent use. New starts the syncer's loop and,
// with WithQuotaFunc, a goroutine that resolves quotas again
// (WithQuotaRefresh, Invalidate); the loop starts short-lived goroutines
// of its own (a round's Redis calls, one per master on a Redis Cluster,
// and the read of the quota version with the count of the roster).
// Close stops them, waits for every goroutine the Limiter started, and
// returns unused leased tokens to Redis. There is no package-level state.
package leasequota
