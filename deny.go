package leasequota

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/leasequota/leasequota/syncer"
)

// refuse answers a request whose tenant cannot be tracked: its quota is
// invalid (ErrInvalidQuota) or the registry is full.
func (l *Limiter) refuse(tenant string, n int64, q Quota, err error, untilAdmitted bool) (Decision, error) {
	reason := ReasonInvalidQuota
	if errors.Is(err, syncer.ErrTooManyTenants) {
		reason = ReasonTooManyTenants
	}
	d := l.count(Decision{Quota: q, Reason: reason})
	if !untilAdmitted {
		return d, nil
	}
	return d, fmt.Errorf("%w (%s)", err, waitFor(tenant, n))
}

// refuseOrWait answers a request whose tenant track could not track (err,
// the tenant's quota q): a WaitN or WaitAll whose registry is full (twice
// WithMaxTenants tracked) waits a refresh interval on sl for eviction to
// catch up and reports retry, for the caller to look the tenant up again;
// anything else is refused (refuse), and so is a wait that ctx ends. An n
// that q's burst can never admit is answered as invalid (invalidN) before
// any wait (TestInvalidNWithFullRegistry).
func (l *Limiter) refuseOrWait(ctx context.Context, sl *sleeper, tenant string, n int64, q Quota, err error, untilAdmitted bool) (d Decision, retry bool, werr error) {
	if errors.Is(err, syncer.ErrTooManyTenants) && (n <= 0 || n > q.Burst) {
		// n can never be admitted: said at once (WaitN: ErrInvalidN or
		// ErrExceedsBurst), not after a wait for room in the registry,
		// nor as too_many_tenants. q is the tenant's quota, resolved, as
		// a new tenant's first request checks n against.
		d, err := l.invalidN(tenant, n, q, untilAdmitted)
		return d, false, err
	}
	if !errors.Is(err, syncer.ErrTooManyTenants) || !untilAdmitted {
		d, err := l.refuse(tenant, n, q, err, untilAdmitted)
		return d, false, err
	}
	if err := sl.sleep(ctx, l.cfg.refreshInterval, nil); err != nil {
		return l.count(Decision{Quota: q, Reason: ReasonTooManyTenants}), false, waitError(tenant, n, err)
	}
	return Decision{}, true, nil
}

// invalidN answers a request for n tokens that can never be admitted.
func (l *Limiter) invalidN(tenant string, n int64, q Quota, untilAdmitted bool) (Decision, error) {
	d := l.count(Decision{Quota: q, Reason: ReasonInvalidN})
	switch {
	case !untilAdmitted:
		return d, nil
	case n <= 0:
		return d, fmt.Errorf("%w: %s", ErrInvalidN, waitFor(tenant, n))
	default:
		return d, fmt.Errorf("%w: %s: Burst is %d", ErrExceedsBurst, waitFor(tenant, n), q.Burst)
	}
}

// errClosed is the error of a decision after Close: ErrClosed for WaitN,
// none for AllowN (its Reason says it).
func (l *Limiter) errClosed(untilAdmitted bool) error {
	if untilAdmitted {
		return ErrClosed
	}
	return nil
}

// waitFor names, in an error of WaitN or WaitAll, the wait for n of
// tenant's tokens that failed: for WaitAll, the tenant that could not be
// served. (The errors said "WaitN(tenant, n)" for WaitAll's too.)
func waitFor(tenant string, n int64) string {
	return fmt.Sprintf("wait for %d of tenant %q", n, truncate(tenant))
}

// waitError is WaitN's or WaitAll's error when its wait ends without an admission.
func waitError(tenant string, n int64, err error) error {
	return fmt.Errorf("leasequota: %s: %w", waitFor(tenant, n), err)
}

// unavailableError is WaitN's error when its ctx ended while Redis could
// not be reached: it wraps both ErrUnavailable and ctx's error.
func unavailableError(tenant string, n int64, err error) error {
	return fmt.Errorf("%w: %s waited for Redis until: %w", ErrUnavailable, waitFor(tenant, n), err)
}

// degraded decides n tokens for e by its failure mode, Redis failing and
// the lease spent. A denial's RetryAfter is the earliest of the times that
// could admit n: the fallback bucket holding n (FailLocal), and the
// tenant's next lease call finding Redis back with n tokens in the global
// bucket (Tenant.RetryAfter: the bucket as last seen, refilled at the
// tenant's rate, and no earlier than the failure backoff allows).
func (l *Limiter) degraded(e *syncer.Tenant, n int64) Decision {
	q := quotaOf(e)
	now := l.cfg.now()
	d := Decision{Quota: q, Mode: q.FailureMode}
	lease := l.retryAfter(e, now, n)
	switch q.FailureMode {
	case FailOpen:
		d.Allowed, d.Reason = true, ReasonFailOpen
	case FailLocal:
		d.Reason, d.RetryAfter = ReasonFallback, lease
		if fb := e.Fallback(); fb != nil {
			if fb.TryConsume(now, n) {
				d.Allowed, d.RetryAfter = true, 0
				return d
			}
			if wait, ok := fb.Delay(now, n); ok {
				d.RetryAfter = min(max(wait, time.Millisecond), lease)
			}
		}
	default:
		d.Reason, d.RetryAfter = ReasonUnavailable, lease
	}
	return d
}

// missNow is the decision of a miss on e's tokens that does not wait:
// the tenant's failure mode decides while Redis fails for it (failing),
// else the denial.
func (l *Limiter) missNow(e *syncer.Tenant, n int64, failing bool) Decision {
	if failing {
		return l.degraded(e, n)
	}
	return l.deny(e, n)
}

// deny builds the denial of n tokens for e.
func (l *Limiter) deny(e *syncer.Tenant, n int64) Decision {
	lim := e.Limits()
	held := e.Held()
	d := Decision{Quota: *lim, Remaining: held, FleetRemaining: fleetRemaining(e.Level(), held, lim.Burst), Reason: ReasonExhausted}
	switch {
	case l.closed.Load():
		d.Reason = ReasonClosed
		return d
	case e.Cold():
		d.Reason = ReasonColdStart
	}
	d.RetryAfter = l.retryAfter(e, l.cfg.now(), n)
	return d
}

// retryAfter is how long a request for n of e's tokens should wait from
// now for them (e.RetryAfter), at least a millisecond, and at most a
// refresh interval while nothing is known of the tenant's global bucket
// (no lease call has answered for it here): a bucket Redis does not hold
// is full, and the first lease, a refresh interval away at most, most
// likely brings the tokens. Counted as an empty bucket's n/Rate, a new
// tenant of a daily quota of 1,000 was told to retry in 86 s, and
// AllowNWithin did not wait for the lease that came 50 ms later; WaitN
// slept that long, and a failure mode's RetryAfter said it.
func (l *Limiter) retryAfter(e *syncer.Tenant, now time.Time, n int64) time.Duration {
	return l.capRetry(e, l.sync.RetryAfter(e, now, n))
}

// sleepFor is retryAfter for a request that waits here (WaitN, a max
// wait): until its own lease call may be made, not the tick that would
// make it for a client coming back (Syncer.RetryAfter). Rounded to the
// tick, a waiting request slept up to a quarter interval past the hold's
// end before its call.
func (l *Limiter) sleepFor(e *syncer.Tenant, now time.Time, n int64) time.Duration {
	return l.capRetry(e, e.RetryAfter(now, n))
}

// capRetry bounds a wait for e's tokens as retryAfter says.
func (l *Limiter) capRetry(e *syncer.Tenant, wait time.Duration) time.Duration {
	if !e.Leased() {
		wait = min(wait, l.cfg.refreshInterval)
	}
	return max(wait, time.Millisecond)
}

// truncate shortens a tenant name for an error message.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}
