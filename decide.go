package leasequota

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/syncer"
)

// decide is the slow path of AllowN (untilAdmitted false) and WaitN
// (true): everything but a request that its tenant's lease covers. e is
// the tenant as the caller found it, or nil.
//
// It is one loop. Each turn either returns or waits (for a lease call, a
// sleep, or ctx); it looks the tenant up again only when it was evicted,
// and the syncer never hands out an evicted tenant. So it never
// recurses and never spins: turns are bounded by waits (turns counts them
// for tests).
//
// at, when not nil, receives the tenant it decided with: e, or the entry
// it tracked anew when e was evicted, whose lease an admission spent
// (decideAll gives a turn's tokens back to it).
//
// noted, when not nil, carries the tenant entry this request's miss of n
// is noted on: in, the one an earlier decision of the request noted it
// on (AllowNWithin's AllowN, AllowAllWithin's AllowAll; nil for none),
// which this one does not note again and takes back when it admits from
// that entry's lease, so that the request counts once in its demand, as
// the tokens it spent; out, the one this decision leaves it noted on
// (read for a denial). (Noted again, a request that AllowNWithin's wait
// admitted counted twice: TestAllowNWithinCountsOnceInDemand.)
func (l *Limiter) decide(ctx context.Context, tenant string, e *syncer.Tenant, n int64, untilAdmitted bool, at **syncer.Tenant, noted **syncer.Tenant) (Decision, error) {
	var (
		sl     = sleeper{closing: l.done}
		waits  int64
		cold   bool           // the tenant held no lease here when the first wait began (syncer.Tenant.Cold)
		first  bool           // and no lease call had answered for it here yet (its first lease)
		missed *syncer.Tenant // the tenant this request's miss was noted on (before it waited, or by noted), or nil
		// recovered is Recovered's channel as taken before the last
		// refill call, for the sleep after it (wakeOnRecovery).
		recovered <-chan struct{}
		budget    struct { // AllowN: its wait, bounded by its limit and ctx; nil before the first
			ctx    context.Context
			cancel context.CancelFunc
			start  time.Time // when it began
			cold   bool      // its limit is WithColdStartWait's, for a tenant leased here before
		}
	)
	if noted != nil {
		missed = *noted
	}
	defer func() {
		sl.stop()
		if budget.cancel != nil {
			budget.cancel()
		}
		if at != nil {
			*at = e
		}
		if noted != nil {
			*noted = missed
		}
	}()
	for turn := int64(1); ; turn++ {
		l.turns.note(turn - waits)
		if l.closed.Load() {
			d := Decision{Reason: ReasonClosed}
			if e != nil {
				d.Quota = quotaOf(e)
			}
			return l.count(d), l.errClosed(untilAdmitted)
		}
		if e == nil || e.Evicted() {
			var (
				q   Quota
				err error
			)
			if e, q, err = l.track(tenant); err != nil {
				d, retry, err := l.refuseOrWait(ctx, &sl, tenant, n, q, err, untilAdmitted)
				if !retry {
					return d, err
				}
				waits++ // eviction is catching up: look again
				continue
			}
		}
		lim := e.Limits()
		if n <= 0 || n > lim.Burst {
			return l.invalidN(tenant, n, *lim, untilAdmitted)
		}
		if waits == 0 {
			// Whether the tenant was leased here is read before the
			// spend: a first lease that lands between a spend that found
			// nothing and the read would make a cold request a warm miss,
			// denied at once with the lease's tokens there
			// (TestColdStartSharesOneCall, beside two busy loops).
			first = !e.Leased()
			cold = e.Cold() // true too when first
			front, clock, plans := e.Front(), l.sync.Clock(), l.sync.Plans()
			if ok, left := e.Spend(n); ok {
				if missed == e {
					e.Unmiss(n) // counted as spent
					missed = nil
				}
				return spent(e, lim, "", left, ReasonLeased, leased(n, front, clock, plans)), nil
			}
		} else {
			if d, ok := l.spendWaited(e, n, cold, missed); ok {
				return d, nil
			}
		}
		if l.sync.Failing(e) {
			// Redis is failing for the tenant: its failure mode decides.
			d := l.degraded(e, n)
			if d.Allowed || !untilAdmitted {
				missed = l.noteMissOnce(missed, e, n)
				return l.count(d), nil
			}
			// WaitN waits through the outage: until the fallback bucket
			// may admit, the tenant's next lease call, or Redis answering
			// again, whichever comes first; then it asks for a lease.
			// The next call counts to the hold's end (sleepFor), not to
			// the tick that d.RetryAfter, a client's, rounds it up to:
			// that call may be the breaker's probe, and rounded, the
			// probe, and the wake after Redis answers, came up to a
			// quarter interval later (TestWaitNWakesWithinAnIntervalOfRecovery).
			waits++
			if err := sl.sleep(ctx, min(d.RetryAfter, l.sleepFor(e, l.cfg.now(), n)), l.wakeOnRecovery(&recovered)); err != nil {
				return l.count(d), unavailableError(tenant, n, err)
			}
			if l.closed.Load() {
				continue // the top of the loop says ReasonClosed
			}
			recovered = l.sync.Recovered()
			select {
			case <-l.sync.Refill(ctx, e, n):
			case <-l.done:
				continue // the top of the loop says ReasonClosed
			case <-ctx.Done():
				// The mode decides once more: an admission (the fallback
				// bucket refilled meanwhile) spent its tokens, and is
				// returned as one, without the error that would have the
				// caller drop it (TestWaitNEndingInAnOutageAdmitsWithoutError).
				d := l.count(l.degraded(e, n))
				if d.Allowed {
					return d, nil
				}
				return d, unavailableError(tenant, n, ctxError(ctx))
			}
			continue
		}
		wctx := ctx
		if !untilAdmitted {
			if budget.ctx == nil {
				// A cold request waits for WithColdStartWait; one whose
				// lease lapsed (leased here before) for WithMaxWait
				// instead when that is longer, as it did as a miss: with
				// the cold wait alone, WithColdStartWait(0) denied every
				// request of a sparse tenant at once, its bucket full,
				// whatever its max wait (TestSparseTenantKeepsMaxWait).
				coldWait := cold && (first || l.cfg.coldStartWait > l.cfg.maxWait)
				limit := l.cfg.maxWait
				if coldWait {
					limit = l.cfg.coldStartWait
				}
				// A cold request whose lease could not come in time
				// (the last urgent refill took longer than it may wait:
				// a saturated Redis, or a process too busy to read the
				// replies) is denied at once, as with no wait at all.
				// But not while Redis is down for every tenant: the
				// refill's call fails at once there (the breaker refuses
				// it), and the tenant's failure mode decides, as it does
				// for a tenant whose own call failed; said at once, a
				// new tenant of a FailOpen quota was denied (cold_start)
				// during an outage (TestColdRequestInAnOutageByItsMode).
				// On a Redis Cluster, nor while the tenant's master is
				// down (its last refill failed as an outage): Down is
				// always false there, and a new tenant of a FailOpen
				// quota on a dead master was denied cold_start for a
				// second after each failed refill
				// (TestClusterDeadNodeNewTenantByItsMode).
				// The wait is counted from here: in Cluster mode the
				// look-up of the tenant's master below (RefillOutlasts)
				// may take up to the wait itself, and counted from after
				// it, a cold request on an unreachable cluster waited it
				// and then its whole limit again
				// (TestClusterColdWaitBoundedByColdStartWait).
				began := time.Now()
				down := l.sync.Down()
				outlasts := false
				if coldWait && !down {
					var nodeDown bool
					outlasts, nodeDown = l.sync.RefillOutlasts(tenant, limit, l.cfg.now())
					down = nodeDown
				}
				if limit <= 0 || outlasts {
					// The decision first: once the syncer is told, a
					// lease may land before the denial reads the tenant.
					// With no wait at all while Redis is down, the mode
					// decides at once.
					d := l.missNow(e, n, down)
					missed = l.noteMissOnce(missed, e, n)
					return l.count(d), nil
				}
				budget.start, budget.cold = began, coldWait && !first
				budget.ctx, budget.cancel = context.WithDeadline(ctx, budget.start.Add(limit))
			}
			wctx = budget.ctx
		}
		if waits == 0 && missed != e {
			// The wait below makes the urgent call itself: record the miss
			// without queueing the tenant for the loop too.
			l.sync.NoteWait(e, n)
			missed = e
		}
		// Ask for an urgent refill (joining one in flight) and wait for it,
		// or for Close to begin: Close waits for the call (a grant lost to
		// a cancel would be lost to the bucket) and returns what it
		// brings, but the request need not wait with it. Waiting for the
		// call alone, a request whose refill hung on a Redis that answers
		// nothing returned ReasonClosed up to WithRedisTimeout after Close
		// began (TestCloseWakesRequestsWaitingOnAHungRefill).
		if wctx.Err() != nil {
			// Done before the wait began. Left to the select below, a
			// refill that answered at once and the done ctx were both
			// ready, and select picks among ready cases at random: a
			// WaitN with a ctx that had expired before the call was
			// admitted now and then (TestWaitErrorsNameTheWait, one
			// run in many under load; TestDoneCtxNeverWaitsForALease).
			return l.gaveUp(ctx, tenant, e, n, cold, untilAdmitted, missed)
		}
		waits++
		recovered = l.sync.Recovered()
		select {
		case <-l.sync.Refill(wctx, e, n):
		case <-l.done:
		case <-wctx.Done():
			return l.gaveUp(ctx, tenant, e, n, cold, untilAdmitted, missed)
		}
		if l.closed.Load() {
			// Close began while the request waited: it is answered
			// ReasonClosed (ErrClosed), as Close says of waiting
			// requests, not admitted from a lease that landed meanwhile,
			// which Close returns.
			continue
		}
		if d, ok := l.spendWaited(e, n, cold, missed); ok {
			return d, nil
		}
		if l.sync.Failing(e) || e.Evicted() {
			continue // the top of the loop says what now
		}
		if budget.cold && !e.Cold() {
			// The lease call answered, and the syncer keeps a lease for
			// the tenant again: the request is a miss on a lease that
			// requests spent, or on a dry bucket, and waits no longer
			// than WithMaxWait, as a warm miss does (denied at once
			// without it). A busy tenant judged sparse by the first plan
			// after a pause (it saw one request after the gap) was cold
			// for a plan; its next miss, its bucket dry, waited out
			// WithColdStartWait for tokens its quota did not have
			// (TestPausingBusyTenantDeniedAtOnce).
			budget.cold = false
			if l.cfg.maxWait <= 0 {
				return l.gaveUp(ctx, tenant, e, n, cold, untilAdmitted, missed)
			}
			budget.cancel()
			budget.ctx, budget.cancel = context.WithDeadline(ctx, budget.start.Add(l.cfg.maxWait))
			wctx = budget.ctx
		}
		// Still short: the global bucket is dry, or the tenant's calls
		// are held back (a failure's backoff, a wait for its share to
		// accrue, a bucket whose refill others' reservations hold).
		// Sleep until the syncer may call again or a reserved token is
		// due, or until Redis answers again after an outage: the first
		// call then skips the tenant's hold-back and may bring tokens
		// long before the sleep would end. (A WaitN that began as an
		// outage did, its tenant's next call held back 233 ms because
		// its last one had found the bucket's refill committed to
		// other instances' reservations, slept through the outage and
		// past the lease that the first call after it brought, and was
		// denied at its deadline with the token here: TestSimulation,
		// seed 6056.)
		if err := sl.sleep(wctx, l.sleepFor(e, l.cfg.now(), n), l.wakeOnRecovery(&recovered)); err != nil {
			return l.gaveUp(ctx, tenant, e, n, cold, untilAdmitted, missed)
		}
	}
}

// leased is the admission of n tokens spent from one tenant's lease, with
// its oldest grant front and the syncer's clock and count of plans read
// before the spend.
func leased(n int64, front lease.GrantID, clock int64, plans uint32) admission {
	return admission{n: n, clock: clock, front: [maxRefundKeys]lease.GrantID{front}, keys: 1, plans: plans}
}

// spendWaited spends n of e's tokens for a request that waited for them
// (cold: for the tenant's first lease here), and returns its admission,
// or false when e holds fewer. missed is the tenant the request's miss was
// noted on before it waited (nil for none): when that is e, the miss is
// taken back (Tenant.Unmiss), so that the request counts once in e's
// demand, as the tokens it spent. (Counted twice, a tenant's waiting
// requests read as twice the demand they were.) A miss noted on a tenant
// since evicted stays: the new one counts the request as spent only.
func (l *Limiter) spendWaited(e *syncer.Tenant, n int64, cold bool, missed *syncer.Tenant) (Decision, bool) {
	front, clock, plans := e.Front(), l.sync.Clock(), l.sync.Plans()
	ok, left := e.SpendWaited(n)
	if !ok {
		return Decision{}, false
	}
	if missed == e {
		e.Unmiss(n)
	}
	return l.admitted(e, left, cold, leased(n, front, clock, plans)), true
}

// admitted is the admission of a request that waited for e's tokens and
// spent them, leaving left: cold says it waited for the tenant's first
// lease here. The quota is read after the wait: the lease call may have
// brought a quota override.
func (l *Limiter) admitted(e *syncer.Tenant, left int64, cold bool, adm admission) Decision {
	reason := ReasonRefilled
	if cold {
		reason = ReasonColdStart
	}
	return l.count(spent(e, e.Limits(), "", left, reason, adm))
}

// spent is the admission adm of tokens spent from e's lease under the
// quota lim, leaving left there; tenant names it (Decision.Tenant), or is
// empty for a caller that names it later.
func spent(e *syncer.Tenant, lim *Quota, tenant string, left int64, reason Reason, adm admission) Decision {
	return Decision{Allowed: true, Remaining: left, FleetRemaining: fleetRemaining(e.Level(), left, lim.Burst), Quota: *lim,
		Reason: reason, Tenant: tenant, adm: adm}
}

// gaveUp is the answer of a wait for e's tokens that ran out of time: for
// AllowN (its wait budget spent, or ctx done) the decision Redis' state
// calls for; for WaitN the denial and ctx's error. cold says the wait was
// for the tenant's first lease here.
//
// An AllowN whose own budget ran out (ctx is not done) tries e's tokens
// once more first: the lease it waited for may have landed as the budget
// ended, its tokens here before the syncer woke its waiters, and the
// denial would then say to retry while they wait here
// (TestWaitEndingAsItsLeaseLands; a 429 with Retry-After 9 s in one run
// of the middleware's TestWeights). A cold request too
// (TestColdWaitEndingAsItsLeaseLands): without the last look, the fleet
// simulation's first second denied cold requests by the thousand whose
// tokens were here when their budget ended (its small fleet, 40
// instances, at d7ae9b7: 2,060 denials a second and 833 admissions,
// against 188 and 2,705 with it; go test -run TestFleetSimulation -v .).
func (l *Limiter) gaveUp(ctx context.Context, tenant string, e *syncer.Tenant, n int64, cold, untilAdmitted bool, missed *syncer.Tenant) (Decision, error) {
	if l.closed.Load() {
		return l.count(Decision{Quota: quotaOf(e), Reason: ReasonClosed}), l.errClosed(untilAdmitted)
	}
	if l.sync.Failing(e) && !untilAdmitted {
		return l.count(l.degraded(e, n)), nil
	}
	if !untilAdmitted && ctx.Err() == nil {
		if d, ok := l.spendWaited(e, n, cold, missed); ok {
			return d, nil
		}
	}
	d := l.count(l.deny(e, n))
	if !untilAdmitted {
		return d, nil
	}
	return d, waitError(tenant, n, ctxError(ctx))
}

// sleeper sleeps on one timer, reused across the sleeps of a wait loop,
// and wakes early when ctx is done.
type sleeper struct {
	t *time.Timer
	// closing is the Limiter's done: Close wakes every sleep, so that a
	// waiting request returns ReasonClosed when Close begins rather than
	// when its wait ends (a wait for a per-minute quota's next token
	// outlived Close by seconds, its goroutine with it).
	closing <-chan struct{}
}

// wakeOnRecovery returns the channel that ends a wait when Redis answers
// again (Syncer.Recovered): the one *taken holds, taken before the refill
// call that the wait follows, or the current one when none was; *taken is
// cleared, so that the next wait takes its own. Why before the call: a
// refill that the circuit breaker refused while its probe was in flight
// (half open, one call let through) backed the tenant off, and when the
// probe closed the breaker before the request's sleep began, a channel
// taken for the sleep was the next recovery's: the request slept out the
// backoff, up to half an interval after Redis answered and the probe's
// round had broadcast it (TestWaitNWakesWithinAnIntervalOfRecovery, one
// heal time in about 40,000 woke 117 to 151 ms after it at R = 100 ms).
func (l *Limiter) wakeOnRecovery(taken *<-chan struct{}) <-chan struct{} {
	ch := *taken
	*taken = nil
	if ch == nil {
		ch = l.sync.Recovered()
	}
	return ch
}

// sleep waits d, or until wake is closed (nil: never), or the Limiter
// closes, or until ctx is done (returning ctxError).
func (s *sleeper) sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) error {
	if s.t == nil {
		s.t = time.NewTimer(d)
	} else {
		s.t.Reset(d)
	}
	select {
	case <-s.t.C:
		return nil
	case <-wake:
		return nil
	case <-s.closing:
		return nil
	case <-ctx.Done():
		return ctxError(ctx)
	}
}

// ctxError is the error of a wait that ctx ended: ctx's error and, when
// ctx was given a cause of its own (context.WithCancelCause,
// WithTimeoutCause), that cause, both wrapped. WaitN's and WaitAll's docs
// promise ctx's error, which callers test for (errors.Is(err,
// context.DeadlineExceeded), as ExampleLimiter_WaitN does); the wait for a
// refill returned the cause alone, and the waits through an outage and
// WaitAll's pause ctx.Err() alone (TestWaitErrorWrapsCtxErrorAndCause).
func ctxError(ctx context.Context) error {
	err := ctx.Err()
	if cause := context.Cause(ctx); cause != nil && cause != err {
		return fmt.Errorf("%w: %w", err, cause)
	}
	return err
}

// stop stops the timer, if any.
func (s *sleeper) stop() {
	if s.t != nil {
		s.t.Stop()
	}
}

// turnCount keeps the most turns one call of decide made without waiting
// in between, for tests: a decision path that spun or went round an
// evicted tenant would raise it.
type turnCount struct{ max atomic.Int64 }

// note raises the count to turns.
func (c *turnCount) note(turns int64) {
	for {
		cur := c.max.Load()
		if turns <= cur || c.max.CompareAndSwap(cur, turns) {
			return
		}
	}
}

// noteMissOnce tells the syncer of a request's miss of n tokens on e, unless
// it was already noted there (missed, the tenant its miss was noted on),
// and returns the tenant it is now noted on. Why: noted twice, a request
// that waited after its denial counted twice in its tenant's demand
// (TestAllowNWithinCountsOnceInDemand).
func (l *Limiter) noteMissOnce(missed, e *syncer.Tenant, n int64) *syncer.Tenant {
	if missed != e {
		l.sync.NoteMiss(e, n)
	}
	return e
}
