package syncer

import (
	"context"
	"errors"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/leasequota/leasequota/lease"
)

// Degraded reports whether Redis calls have been failing: on one server,
// while the circuit breaker is open or probing (Down); on a Redis
// Cluster, while any tenant's last lease call failed (but a Cold one's
// in an outage that has ended: Failing, which the round's rest clears).
func (s *Syncer) Degraded() bool {
	if s.opts.Cluster {
		return s.failingTenants.Load() > 0
	}
	return s.Down()
}

// Down reports whether lease calls fail for every tenant: on one Redis
// server (or Sentinel), while the circuit breaker is open or probing. On a
// Redis Cluster it is false: a node's failures say nothing of the others',
// and each tenant's own calls tell (Tenant.Failing).
//
// It is one atomic load (the breaker's State takes its lock), for the
// request path's misses.
func (s *Syncer) Down() bool {
	return !s.opts.Cluster && s.down.Load()
}

// Recovered returns a channel that is closed the next time lease calls
// succeed again after failing: when the circuit breaker closes, or in
// Cluster mode when a failing tenant's call succeeds. Requests waiting
// through an outage select on it, then look again.
func (s *Syncer) Recovered() <-chan struct{} { return s.recovered.C() }

// broadcastRecovered wakes the requests waiting on Recovered; in driven
// mode, at the next Deliver.
func (s *Syncer) broadcastRecovered() {
	if s.opts.Driven {
		s.driven.mu.Lock()
		s.driven.recovered = true
		s.driven.mu.Unlock()
		return
	}
	s.recovered.Broadcast()
}

// Failing reports whether t's requests are decided by its failure mode
// once its lease cannot cover them: its last lease call failed, and,
// for a tenant the syncer keeps no lease for (Cold: sparse, idle, or
// never leased here), not in an outage that has ended since: Redis (on a
// Redis Cluster, the master the call went to, or after a failover or a
// slot's move the master that serves the tenant now: the round points
// the failure at it, followFailover) did not answer that call, and has
// answered one of this limiter's calls in time since, the circuit
// breaker closed. Such a tenant plans no call of its own (it
// keeps no lease), so only a request's call could clear its failure: its
// request waits for that call, as a cold request does with Redis up,
// instead of its mode deciding. Why: a sparse tenant whose request came
// during an outage was decided by its mode at its first request after
// Redis came back, however long after: a FailClosed tenant denied
// unavailable, a FailOpen one admitted without a lease, with Degraded
// false and its bucket full (TestSparseTenantAfterOutageLeasesAgain and
// TestClusterSparseTenantAfterOutageLeasesAgain in the root package). A
// failure that Redis answered (an error reply about the tenant, as OOM
// under noeviction) stands until the tenant's own call succeeds, as
// before; so does a warm tenant's, whose scheduled call comes within its
// backoff.
func (s *Syncer) Failing(t *Tenant) bool {
	if !t.flag(flagFailing) {
		return false
	}
	if !t.Cold() || s.Down() {
		return true
	}
	ls := t.lease.Load()
	if ls == nil {
		return true
	}
	fb := ls.fallback.Load()
	if fb == nil {
		return true
	}
	at, node := fb.outage.Load(), fb.node.Load()
	return at == 0 || node == nil || node.answered.Load() <= at
}

// setFailing records t's health, counting failing tenants and reporting
// the first failure and the last recovery in Cluster mode.
func (s *Syncer) setFailing(t *Tenant, failing bool, err error) {
	was := t.setFlag(flagFailing, failing)
	if was && !failing && s.opts.Cluster {
		// Cluster mode has no shared breaker: this tenant's node is back.
		s.broadcastRecovered()
	}
	if was == failing || !s.opts.Cluster {
		return
	}
	var n int64
	if failing {
		n = s.failingTenants.Add(1)
	} else {
		n = s.failingTenants.Add(-1)
	}
	if s.opts.OnDegraded != nil && (failing && n == 1 || !failing && n == 0) {
		s.opts.OnDegraded(failing, err)
	}
}

// forgetFailing takes t, being evicted, off the failing tenants of
// Cluster mode, reporting the last of them as setFailing does. Why: only a
// success of the same tenant took it off, so a tenant evicted while its
// node was down kept the Syncer Degraded for good, after its node came
// back and other tenants leased again, and Close then skipped leaving the
// roster (TestEvictedFailingTenantIsNotDegraded). Without Cluster mode the
// breaker is Redis's health, not a tenant's, and stays as it is.
func (s *Syncer) forgetFailing(t *Tenant) {
	if !t.setFlag(flagFailing, false) || !s.opts.Cluster {
		return
	}
	if n := s.failingTenants.Add(-1); n == 0 && s.opts.OnDegraded != nil {
		s.opts.OnDegraded(false, nil)
	}
}

// breakerOpen reports whether the circuit breaker is open (not probing)
// and when it lets a probe call through: just after an interval (its
// Timeout) from when it last opened, as read after the breaker's own
// clock (OnStateChange runs after it opened), so no earlier than the
// breaker's. Just after: gobreaker half-opens once its expiry is before
// now, so a call at the expiry itself is refused (in a synctest bubble,
// where a tick lands on it, every time). Never open in Cluster mode,
// which has no breaker.
func (s *Syncer) breakerOpen() (probe time.Time, open bool) {
	if s.opts.Cluster || !s.down.Load() {
		return time.Time{}, false
	}
	probe = time.Unix(0, s.breakerOpened.Load()).Add(s.planner.Config().Interval + time.Nanosecond)
	return probe, probe.After(s.opts.Now())
}

// newBreaker returns the circuit breaker of a Syncer without Cluster: it
// opens after breakerFailures failed calls in a row and lets one probe
// call through each interval iv; its changes wake requests waiting through
// an outage (Recovered) and are reported to Options.OnDegraded.
func (s *Syncer) newBreaker(iv time.Duration) *gobreaker.CircuitBreaker[[]lease.Result] {
	return gobreaker.NewCircuitBreaker[[]lease.Result](gobreaker.Settings{
		Name:    "leasequota-redis",
		Timeout: iv, // then one probe call is let through
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= breakerFailures
		},
		// Calls canceled because the limiter is closing say nothing
		// about Redis, and a busy Redis is not down (busy): while closed,
		// such a timeout does not count. But a probe (the breaker
		// half-open: down, and the call was let through, so not open)
		// that times out on a busy Redis says that Redis answers: it
		// closes the breaker. Why: excluded, it left the breaker
		// half-open, its next call the next probe; a limiter whose calls
		// timed out on a busy Redis after an outage stayed Degraded for
		// good, every call but the probe refused and its tenant put in
		// its failure mode (TestBusyProbeClosesBreaker in the root
		// package). The callbacks run under the breaker's lock: s.down,
		// not State, tells half-open.
		IsExcluded: func(err error) bool {
			return errors.Is(err, context.Canceled) ||
				!s.down.Load() && s.busy(context.Background(), err, s.opts.Now(), "")
		},
		IsSuccessful: func(err error) bool {
			// Not after replies that Redis runs no write (refusedWrites):
			// then a probe that timed out says nothing of them.
			s.busyProbe = err != nil && s.down.Load() && !s.refusedWrites.Load() && s.busy(context.Background(), err, s.opts.Now(), "")
			return err == nil || s.busyProbe
		},
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.down.Store(to != gobreaker.StateClosed)
			if to == gobreaker.StateOpen {
				// From closed, or from half-open when the probe failed:
				// either way the breaker's interval starts again.
				s.breakerOpened.Store(s.opts.Now().UnixNano())
			}
			switch {
			case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
				s.one.budget.outage()
			case to == gobreaker.StateClosed:
				// Redis answers again after calls failed in a row: the
				// probes' timeouts while it did not said nothing of how
				// busy it is (budget.recovered). Unless the probe timed out
				// on a busy Redis: then Redis is saturated, and its window
				// keeps the cuts. Given back, 256 instances of the queue
				// model came back at full windows while Redis was still
				// saturated, and 0.07-0.1 lease calls a pair and second
				// failed after the start where none had
				// (TestSaturatedSparseFleet).
				if !s.busyProbe {
					s.one.budget.recovered()
				}
				s.refusedWrites.Store(false)
				s.broadcastRecovered()
			}
			if s.opts.OnDegraded == nil {
				return
			}
			switch {
			case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
				var err error
				if p := s.lastErr.Load(); p != nil {
					err = *p
				}
				s.opts.OnDegraded(true, err)
			case to == gobreaker.StateClosed:
				s.opts.OnDegraded(false, nil)
			}
		},
	})
}
