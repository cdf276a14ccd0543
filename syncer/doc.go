// Package syncer decides when each tenant's lease is refreshed and by how
// much, and runs those decisions against Redis.
//
// It has two halves, in the manner of a pure state machine with one loop
// at its edge:
//
//   - Planner (planner.go, ledger.go) is pure: given a tenant's State, its
//     quota, the time, the tokens it holds and what requests asked for, it
//     returns an Action (tokens to give back, tokens to ask for). It reads
//     no clock, does no I/O and starts no goroutine, so it is tested with
//     time passed in and simulated over thousands of instances.
//   - Syncer (syncer.go) is the edge: one goroutine (loop.go) that ticks,
//     asks the Planner what to do for every tenant, and carries the plan
//     out (round.go, evict.go) in pipelined lease calls (call.go,
//     acquire.go, release.go); plus urgent refills for a tenant whose
//     requests ran short, coalesced with singleflight (refill.go). The
//     circuit breaker and the failing tenants are in health.go; the call
//     budget, a window of calls in flight that shrinks when replies come
//     slow or not at all, so that a saturated Redis is not offered more,
//     in budget.go, one for each Redis node (redisnode.go).
//     On a Redis
//     Cluster (Options.Cluster) a round sends each node's calls on their
//     own (nodes.go, quotapoll.go) and does not wait for them, so that a
//     dead or slow node delays only its own tenants, and each master's
//     slow replies cut its own window only. A caller that runs
//     the loop's steps itself and needs them to replay (a deterministic
//     simulation) sets Options.Driven (driven.go).
//   - The tenants (tenant.go, registry.go, table.go, limits.go) are the
//     state both halves share with the requests. A tenant idle long enough
//     goes dormant (evict.go): it drops its State and what its lease calls
//     said, and is revived when a request needs it planned.
//
// Scheduling. A tenant's regular refresh happens once per Interval at a
// phase given by xxhash(tenant) modulo Interval, plus a random jitter, so
// tenants spread over the interval and replicas do not sync in lockstep.
// Between those times a tenant is refreshed at once when its tokens fall
// below the low watermark or a request finds it empty.
//
// Sizing. A lease is the tenant's recent demand (tokens asked for per
// second, admitted or not) times Interval times Headroom, clamped to the
// tenant's MinLease and MaxLease, never more than Burst, and no more than
// the demand over LeaseTTL. Tokens not spent within LeaseTTL of their grant
// are taken back and returned to Redis as an aged return (credited only
// with what the bucket would hold had they never been leased), which
// bounds how long tokens can be held: see docs/design.md.
package syncer
