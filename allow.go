package leasequota

import (
	"context"
	"time"
)

// Allow is AllowN(context.Background(), tenant, 1).Allowed.
func (l *Limiter) Allow(tenant string) bool {
	// The hot path of AllowN, without building a Decision.
	if t := l.sync.Tenant(tenant); t != nil && !l.closed.Load() {
		if ok, _ := t.Spend(1); ok {
			return true
		}
	}
	return l.AllowN(context.Background(), tenant, 1).Allowed
}

// AllowN reports whether n tokens of tenant's quota may be spent now, and
// spends them if so.
//
// When this instance holds enough leased tokens for the tenant, AllowN is
// one map read, two atomic loads (what Refund needs to know of the
// spend: the lease's oldest grant and the syncer's last plan time), one
// compare-and-swap and one atomic add (the decision count), and two more
// loads for FleetRemaining (the tenant's lease state, and in it the global
// level last seen): no lock, allocation, clock read or network call.
// Allow skips the four loads.
// Otherwise it tells the syncer (without blocking) and:
//   - on the tenant's first request here, waits for its first lease, up to
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
func (l *Limiter) AllowN(ctx context.Context, tenant string, n int64) Decision {
	t := l.sync.Tenant(tenant)
	if t != nil && !l.closed.Load() {
		// One read of the limits: the Burst checked is the Quota reported.
		if lim := t.Limits(); n > 0 && n <= lim.Burst {
			// Read before the spend, for Refund (see syncer.Syncer.Refund).
			front, clock := t.Front(), l.sync.Clock()
			if ok, left := t.Spend(n); ok {
				// spent's Decision, written out: built through spent,
				// AllowN measured 10-15 ns slower (BenchmarkAllowN).
				return Decision{Allowed: true, Remaining: left, FleetRemaining: fleetRemaining(t.Level(), left, lim.Burst), Quota: *lim,
					Reason: ReasonLeased, Tenant: tenant, adm: leased(n, front, clock)}
			}
		}
	}
	d, _ := l.decide(ctx, tenant, t, n, false)
	d.Tenant = tenant
	return d
}

// WaitN blocks until n tokens of tenant's quota are admitted and returns
// the admission, or until ctx is done (returning ctx's error, wrapped), or
// the limiter is closed (ErrClosed). It returns an error at once when n
// can never be admitted: n <= 0 (ErrInvalidN), n > Burst (ErrExceedsBurst)
// or an invalid quota (ErrInvalidQuota).
//
// While Redis cannot be reached and the lease is spent, WaitN keeps
// waiting in every failure mode: FailOpen admits at once, FailLocal admits
// from the local fallback bucket when it can, and FailClosed admits only
// from a lease. It wakes when Redis answers again (within about one
// refresh interval plus a round trip of the first call that succeeds) and
// is admitted as soon as the global bucket allows.
func (l *Limiter) WaitN(ctx context.Context, tenant string, n int64) (Decision, error) {
	d, err := l.decide(ctx, tenant, l.sync.Tenant(tenant), n, true)
	d.Tenant = tenant
	return d, err
}

// AllowNWithin is AllowN, except that a denial that waiting could turn
// into an admission (Reason.Waitable) with a RetryAfter of at most maxWait
// waits for it, as WaitN does, for up to maxWait (and ctx). It is what a
// request handler with a latency budget wants: the HTTP middleware and
// the gRPC interceptors use it. A wait that fails returns the fresh
// denial it ended with.
func (l *Limiter) AllowNWithin(ctx context.Context, tenant string, n int64, maxWait time.Duration) Decision {
	d := l.AllowN(ctx, tenant, n)
	if d.Allowed || maxWait <= 0 || !d.Reason.Waitable() || d.RetryAfter > maxWait {
		return d
	}
	wctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	if wd, err := l.WaitN(wctx, tenant, n); err == nil || wd.Reason != 0 {
		return wd
	}
	return d
}
