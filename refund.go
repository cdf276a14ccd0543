package leasequota

import (
	"fmt"

	"github.com/cespare/xxhash/v2"

	"github.com/leasequota/leasequota/lease"
)

// Refund gives back the tokens d admitted, for work not done: a request
// rejected by validation after its admission, an upstream that failed
// before doing any work. tenants are those d decided for: none (or
// d.Tenant) for a Decision of AllowN, WaitN or AllowNWithin; the tenants
// of the AllowAll or WaitAll call, in the call's order, for theirs. Refund then
// clears d's admission, so refunding the same d again refunds nothing
// (and returns an error); a copy of d made before the first Refund still
// carries it, so refund one Decision value only.
//
// It refunds exactly what d admitted from leases (n tokens per tenant),
// never more, and never a token that Redis did not grant: for each
// tenant,
//   - while the lease the tokens came from is still held here (no batch
//     of the tenant's tokens has expired, been drained or been spent past
//     since the admission), they go back into it: this instance may spend
//     them again, until that lease expires;
//   - otherwise, or while a lease call for the tenant holds its lock, they
//     are returned to Redis with the next round, or before the tenant's
//     next urgent lease call (a request waiting for tokens) if that comes
//     first, as expired tokens are: naming their grant, so that the
//     global bucket credits them only with what it would hold had they
//     never been granted; the call after the return may then lease them
//     again here at once, even if the last lease call found the bucket
//     dry (a wait for the bucket to refill ends);
//   - they are forfeited (dropped, as if spent) when nothing can name
//     their grant: when the admission plus the lease lifetime and two
//     refresh intervals may be an hour old or more (Redis tells grants
//     apart within 71 minutes; with a LeaseTTL near an hour, every
//     refund that cannot go back into the lease is forfeited; the lease
//     lifetime is the longest that may have kept the tokens: after a
//     quota's LeaseTTL fell, or a tenant was evicted, the longer one
//     counts, for every tenant, in refunds of admissions made up to
//     that lifetime, two refresh intervals and two call timeouts later),
//     for the
//     fifth or a later tenant of an AllowAll call, or when the lease's
//     grant was unknown.
//
// So the bound holds for admitted tokens net of refunds: for each tenant,
// admitted - refunded <= granted - returned <= Burst + Rate*T.
//
// Refund never waits for a lease call, never calls Redis, and allocates
// nothing while d's tenants are tracked here (a return queued for Redis
// may grow the queue of returns, once); a tenant evicted since is
// tracked anew, which allocates its entry (12 allocations in
// TestRefundAllocations) and may take the registry's lock. Tokens
// admitted without a lease (FailOpen, FailLocal) are not refunded:
// nothing was debited for them. Stats.Refunded counts the tokens
// refunded. Refund returns an error wrapping ErrNotRefundable when d
// admitted nothing from a lease, was refunded already, or tenants do not
// match it (then it refunds nothing), and ErrClosed after Close (the
// limiter returned its leases; nothing is refunded).
func (l *Limiter) Refund(d *Decision, tenants ...string) error {
	if d == nil || !d.Allowed || d.adm.n <= 0 {
		return fmt.Errorf("%w: the decision admitted no leased tokens, or was refunded", ErrNotRefundable)
	}
	a := d.adm
	switch {
	case a.keys == 1 && (len(tenants) == 0 || len(tenants) == 1 && tenants[0] == d.Tenant):
	case a.keys > 1 && len(tenants) == int(a.keys) && sumHashes(tenants) == a.sum:
		// The tenants of the call, in its order (a fingerprint: a
		// different list passes with probability 2^-64).
	default:
		return fmt.Errorf("%w: %d tenants named for a decision of %d", ErrNotRefundable, len(tenants), a.keys)
	}
	if l.closed.Load() {
		return ErrClosed
	}
	d.adm = admission{}
	if a.keys == 1 {
		l.refund(d.Tenant, a.n, a, 0)
		return nil
	}
	for i, name := range tenants[:min(len(tenants), maxRefundKeys)] {
		l.refund(name, a.n, a, i)
	}
	// Beyond the first maxRefundKeys no grant was kept: the leased
	// tenants' tokens are forfeited (counted refunded), and those its
	// failure mode admitted count nothing (a.tailModes of them).
	for range len(tenants) - maxRefundKeys - int(a.tailModes) {
		l.sync.ForfeitRefund(a.n)
	}
	return nil
}

// refund gives back n tokens of tenant spent as the i'th tenant of the
// admission a.
func (l *Limiter) refund(tenant string, n int64, a admission, i int) {
	if i < maxRefundKeys && a.modes&(1<<i) != 0 {
		return // admitted by a failure mode: nothing was leased
	}
	e := l.sync.Tenant(tenant)
	if e == nil || e.Evicted() {
		// Evicted since: its lease was drained. Track it again to return
		// the tokens (its quota as now resolved names its bucket).
		var err error
		if e, _, err = l.track(tenant); err != nil {
			// Not tracked again (the registry is full, or its quota is
			// invalid now): nothing can return them. Forfeited, and
			// counted so (they were dropped without a count).
			l.sync.ForfeitRefund(n)
			return
		}
	}
	var front lease.GrantID // not kept beyond maxRefundKeys: forfeited
	if i < maxRefundKeys {
		front = a.front[i]
	}
	l.sync.Refund(e, n, front, a.clock)
}

// sumHashes folds the tenants' xxhash, in their order: a fingerprint of
// the tenants of an AllowAll call.
func sumHashes(tenants []string) (sum uint64) {
	for _, t := range tenants {
		sum = sum*0x100000001b3 + xxhash.Sum64String(t)
	}
	return sum
}
