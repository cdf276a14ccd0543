package leasequota

import (
	"context"
	"time"

	"github.com/leasequota/leasequota/syncer"
)

// Allow is AllowN(context.Background(), tenant, 1).Allowed.
func (l *Limiter) Allow(tenant string) bool {
	// The hot path of AllowN, without building a Decision.
	if t := l.sync.Tenant(tenant); t != nil && !l.closed.Load() {
		if ok, _ := t.SpendOneShared(); ok {
			return true
		}
		return l.allowMissed(tenant, t)
	}
	return l.AllowN(context.Background(), tenant, 1).Allowed
}

// allowMissed is Allow once the tenant's shared count came up short: its
// slots, if WithPerCPUTokens split its counter, then AllowN. Out of line,
// so that Allow's frame stays that of its hot path: with AllowN called
// from Allow itself, Allow over 1,024 tenants took about a nanosecond
// more (BenchmarkAllowTenants, 2-core AMD EPYC host).
//
//go:noinline
func (l *Limiter) allowMissed(tenant string, t *syncer.Tenant) bool {
	if ok, _ := t.SpendOneSlots(); ok {
		return true
	}
	return l.AllowN(context.Background(), tenant, 1).Allowed
}

// AllowN reports whether n tokens of tenant's quota may be spent now, and
// spends them if so.
//
// When this instance holds enough leased tokens for the tenant, AllowN is
// one map read, two atomic loads (what Refund needs to know of the
// spend: the lease's oldest grant and the syncer's last plan time), one
// compare-and-swap (for n = 1 it counts the decision too; a larger n
// adds three atomic adds, see syncer.Tenant.Spend), and two more loads
// for FleetRemaining (the tenant's lease state, and in it the global
// level last seen): no lock, allocation, clock read or network call.
// Allow skips the four loads.
// Otherwise it tells the syncer (without blocking) and:
//   - when the syncer keeps no lease for the tenant here (its first
//     request, or its demand too low or its requests too far apart to
//     keep one: syncer.Tenant.Cold), waits for a lease, up to
//     WithColdStartWait and ctx;
//   - when WithMaxWait is set, waits up to that long (and ctx) for a fresh
//     lease;
//   - when Redis cannot be reached, decides by the tenant's FailureMode at
//     once, without waiting;
//   - else denies at once, with RetryAfter estimated from the global
//     bucket as last seen.
//
// n <= 0 and n > Burst are denied with ReasonInvalidN. Once Close has been
// called, every decision is a denial with ReasonClosed. AllowN never
// returns an error: the Decision's Reason says why it denied.
func (l *Limiter) AllowN(ctx context.Context, tenant string, n int64) (d Decision) {
	l.allowN(&d, ctx, tenant, n, nil)
	return d
}

// allowN is AllowN, writing the Decision into *d, which must be zero
// (the callers' named results): through a pointer, the Decision (152 bytes) is built where the
// caller keeps it instead of being copied out of each frame it is
// returned through (see AllowNWithin). missed, when not nil, receives the
// tenant entry a denial noted the request's miss on (see decide).
func (l *Limiter) allowN(d *Decision, ctx context.Context, tenant string, n int64, missed **syncer.Tenant) {
	t := l.sync.Tenant(tenant)
	if t != nil && !l.closed.Load() {
		// One read of the limits: the Burst checked is the Quota reported.
		if lim := t.Limits(); n > 0 && n <= lim.Burst {
			// Read before the spend, for Refund (see syncer.Syncer.Refund).
			front, clock := t.Front(), l.sync.Clock()
			var ok bool
			var left int64
			if n == 1 {
				// Inlined, where Spend(n) is a call; a split counter's
				// tokens are in its slots (WithPerCPUTokens).
				if ok, left = t.SpendOneShared(); !ok {
					ok, left = t.SpendOneSlots()
				}
			} else {
				ok, left = t.Spend(n)
			}
			if ok {
				// spent's Decision, written out: built through spent,
				// AllowN measured 10-15 ns slower (BenchmarkAllowN). Its
				// fields that are not zero, one by one into *d (zero):
				// as a composite literal it was built on the stack and
				// copied, 74 instructions against 30 (callgrind).
				d.Allowed, d.Remaining, d.FleetRemaining = true, left, fleetRemaining(t.Level(), left, lim.Burst)
				d.Quota, d.Reason, d.Tenant = *lim, ReasonLeased, tenant
				d.adm.n, d.adm.clock, d.adm.front[0], d.adm.keys = n, clock, front, 1 // leased(n, front, clock, 0): AllowN's tokens go back by Refund, never giveBack
				return
			}
		}
	}
	*d, _ = l.decide(ctx, tenant, t, n, false, nil, missed)
	d.Tenant = tenant
}

// WaitN blocks until n tokens of tenant's quota are admitted and returns
// the admission, or until ctx is done (returning ctx's error, wrapped,
// with the cause ctx was given, if any: context.WithCancelCause), or the
// limiter is closed (ErrClosed). It returns an error at once when n can
// never be admitted: n <= 0 (ErrInvalidN), n > Burst (ErrExceedsBurst) or
// an invalid quota (ErrInvalidQuota).
//
// While Redis cannot be reached and the lease is spent, WaitN keeps
// waiting in every failure mode: FailOpen admits at once, FailLocal admits
// from the local fallback bucket when it can, and FailClosed admits only
// from a lease. It wakes when Redis answers again (within about one
// refresh interval plus a round trip of the first call that succeeds) and
// is admitted as soon as the global bucket allows.
func (l *Limiter) WaitN(ctx context.Context, tenant string, n int64) (Decision, error) {
	d, err := l.decide(ctx, tenant, l.sync.Tenant(tenant), n, true, nil, nil)
	d.Tenant = tenant
	return d, err
}

// AllowNWithin is AllowN, except that a denial that waiting could turn
// into an admission (Reason.Waitable) with a RetryAfter of at most maxWait
// waits for it, as WaitN does, for up to maxWait (and ctx). It is what a
// request handler with a latency budget wants: the HTTP middleware and
// the gRPC interceptors use it. A wait that fails returns the fresh
// denial it ended with. The waits of AllowN itself (WithColdStartWait for
// a cold tenant, WithMaxWait when set) come first and add to maxWait: a
// handler whose budget must hold them too passes a ctx with its deadline.
func (l *Limiter) AllowNWithin(ctx context.Context, tenant string, n int64, maxWait time.Duration) (d Decision) {
	// One call, so that AllowNWithin is inlined and the Decision built
	// in the caller's variable: AllowN's result copied into AllowNWithin's
	// frame, then out of it, and the wait's defer cost 75 instructions of
	// AllowNWithin's own per admitted request of the middleware (callgrind,
	// BenchmarkInProcessOverhead/one-policy).
	l.allowNWithin(&d, ctx, tenant, n, maxWait)
	return d
}

// allowNWithin is AllowNWithin, writing the Decision into *d (zero).
func (l *Limiter) allowNWithin(d *Decision, ctx context.Context, tenant string, n int64, maxWait time.Duration) {
	var missed *syncer.Tenant
	l.allowN(d, ctx, tenant, n, &missed)
	if d.Allowed || maxWait <= 0 || !d.Reason.Waitable() || d.RetryAfter > maxWait {
		return
	}
	l.allowNWait(d, ctx, tenant, n, maxWait, missed)
}

// allowNWait is allowNWithin's wait, after AllowN denied *d: it replaces
// *d with the fresh decision of the wait, if the wait ended with one. Its
// own function, so that the defer is not on the path of an admission.
// missed is the tenant entry AllowN noted the request's miss on: the
// wait does not note it again, and takes it back when it admits.
func (l *Limiter) allowNWait(d *Decision, ctx context.Context, tenant string, n int64, maxWait time.Duration, missed *syncer.Tenant) {
	wctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	wd, err := l.decide(wctx, tenant, l.sync.Tenant(tenant), n, true, nil, &missed) // WaitN's
	wd.Tenant = tenant
	if err == nil || wd.Reason != 0 {
		// One call, one decision: the wait's replaces the denial, which
		// was counted (counted too, a request that waited and was
		// admitted showed in Stats as a denial and an admission).
		l.uncount(*d)
		*d = wd
	}
}
