// Package rateshare is a model of a lease of a rate share, the protocol
// issue #15 asks to evaluate before it is built: a pure, deterministic
// core (no goroutines, clocks or I/O; time is a parameter, in
// microseconds of the store's clock). The scripts and lease/memstore
// honour a bucket's record of shares and grant shares on request by its
// rules (lease.RefillShares, Settled, GrantShare and Drop, held to Bucket
// by property tests), and the Limiter asks for them with WithRateShares
// (off by default; syncer/share.go, whose accrual LocalWindow maps).
//
// Today an instance leases batches of tokens. A starved (tenant,
// instance) pair therefore calls Redis once per batch, and what it holds
// but has not spent is in flight: the 16 x 1,000 fleet holds about 6 % of
// an 8 s run's Burst + Rate*T so (docs/performance.md, "Where an 8 s run's
// tokens are"). A rate share instead grants an instance a rate, s tokens
// a second, until the end of the tenant's current epoch (a fixed Period,
// its boundaries offset per tenant by Phase), or of the epoch after it
// when granted in the second half of one. The bucket (Bucket) refills at
// Rate less the sum of the shares in force, S, so the shares and the
// bucket together make exactly Rate tokens a second, and an instance
// renews its share about once a period, whatever its demand. The instance
// (Lease) accrues its share locally, at most s*Hold tokens, and drops what
// it has not spent when the share ends, is released or is replaced;
// LocalWindow maps a share into the instance's clock so that a slow reply
// only shortens it.
//
// The bound. From a start with no share in force, tokens issued (taken
// from the bucket, or spent from a share) in [0, T] are at most
// Burst + Rate*T; in any window of length W they are at most
// Burst + Rate*(W + Hold), since the shares accrued but unspent at the
// window's start are at most S*Hold <= Rate*Hold. TestBoundProperty
// checks both over random schedules of calls, and that no token is made
// from nothing or goes unaccounted for (Bucket.Lost, Lease.Lost).
//
// The model came first: the Redis layout (the bucket's field sh, each
// instance's share the fourth field of its registry entry), the rollout
// (docs/design.md, "Rate shares") and the Limiter's planner were built
// after it, held to it where they can be. scenario_test.go runs fleets of
// instances against the model with a planner of a few lines, to measure
// script calls, utilization and fairness (docs/performance.md, "Rate
// shares, in a model").
package rateshare
