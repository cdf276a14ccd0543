// Package bucket holds the local, pure state of a leasequota instance:
//
//   - Counter: the tokens this instance has leased for one tenant. Requests
//     spend from it with one compare-and-swap; the syncer tops it up and
//     drains it concurrently. It never goes negative and never spends a
//     token it was not given.
//   - TokenBucket: a classic time-refilled token bucket, used by the local
//     fallback mode when Redis cannot be reached.
//   - UpdateRate: the demand estimator, an exponentially weighted average
//     of a rate in tokens per second, independent of how often it is
//     updated. The syncer keeps a tenant's demand with it, which sizes
//     the next lease.
//
// Nothing here reads a clock, sleeps or starts a goroutine: time is a
// parameter, so every behaviour can be tested exactly. No method
// allocates but Stripe, which makes the slots of a split Counter (two
// allocations a split; the syncer restripes a tenant rarely).
package bucket
