package syncer

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/telemetry"
)

// fleetSize returns the number of instances assumed for a tenant whose own
// count is unknown: the largest count a lease call has reported on any
// tenant, or Options.Instances when larger; zero when neither is known.
func (s *Syncer) fleetSize() int { return int(s.fleet.Load()) }

// input is what a plan of t is given from the edge: what its requests
// recorded since the last plan, taken (Tenant.take), and the fleet size
// assumed for a tenant not leased here yet.
func (s *Syncer) input(t *Tenant) Input {
	in := t.take(t.tokens.Load())
	in.Fleet = s.fleetSize()
	return in
}

// noteFleet raises the fleet size to n.
func (s *Syncer) noteFleet(n int) { raise(&s.fleet, int64(n)) }

// acquire runs one pipeline for jobs, whose tenants node serves, and
// applies the results, unlocking each job's tenant. It returns the totals
// for the round's span.
func (s *Syncer) acquire(ctx context.Context, now time.Time, node *redisNode, jobs []job) (tot telemetry.Round) {
	defer func() {
		for _, j := range jobs {
			j.t.mu.Unlock()
		}
		s.unlocked.Broadcast()
	}()
	buf, _ := s.acquireBufs.Get().(*acquireBuf)
	if buf == nil {
		buf = new(acquireBuf)
	}
	defer buf.put(&s.acquireBufs)
	reqs := slices.Grow(buf.reqs[:0], len(jobs))[:len(jobs)]
	buf.reqs = reqs
	for i, j := range jobs {
		reqs[i] = lease.Request{Tenant: j.t.name, Limits: j.t.bucket(), Want: j.want, Demand: j.demand, Reserve: j.reserve,
			Share: j.share, ShareTerms: j.shareTerms, ShareFrom: j.shareFrom}
	}
	results, err := s.call(ctx, telemetry.OpAcquire, node, len(reqs), 0, func(ctx context.Context) ([]lease.Result, error) {
		res, err := s.client.AcquireMany(ctx, reqs, buf.results)
		if err == nil {
			// A Redis that runs no command answers each alike: an
			// outage, which the breaker counts (unavailable).
			err = allUnavailable(res)
		}
		return res, err
	})
	if cap(results) > cap(buf.results) {
		buf.results = results[:0] // the Store's, made for this call: the caller's to reuse
	}
	// A call the breaker refused was not sent: it is no lease request
	// (the metric's "sent to Redis"), though its tenants failed.
	sent := !refused(err)
	if sent {
		tot.Calls = 1
	}
	for i, j := range jobs {
		var r lease.Result
		if err != nil {
			r.Err = err
		} else {
			r = results[i]
		}
		s.apply(ctx, j.t, node, now, j.want, 0, j.share, j.cut, r)
		if sent {
			tot.Tenants++
			tot.Requested += j.want
		}
		if r.Err != nil {
			tot.Failed++
		} else {
			tot.Granted += r.Grant.Granted
		}
	}
	return tot
}

// acquireBuf is the requests and results of one acquire pipeline, kept
// for the next one (Syncer.acquireBufs): made anew, they were two blocks
// of 1,000 elements a pipeline, most of the bytes a round allocated
// (BenchmarkRoundAcquire: 3.4 MB a round of 10,000 tenants, 0.5 to 0.6
// MB with them reused). The Store is done with both when AcquireMany returns: the
// requests are its input, and the results slice is the caller's
// (lease.Client.AcquireMany).
type acquireBuf struct {
	reqs    []lease.Request
	results []lease.Result
}

// put clears b, so that what its elements name (tenants, overrides,
// errors) is not kept alive by the pool, and puts it in pool.
func (b *acquireBuf) put(pool *sync.Pool) {
	clear(b.reqs)
	clear(b.results[:cap(b.results)])
	b.reqs, b.results = b.reqs[:0], b.results[:0]
	pool.Put(b)
}

// apply records the result of a lease call to node for t, whose lock is
// held; cut and forNeed are the plan's Action.cut and Action.ForNeed.
func (s *Syncer) apply(ctx context.Context, t *Tenant, node *redisNode, now time.Time, want, forNeed int64, op lease.ShareOp, cut *reservation, r lease.Result) {
	if !refused(r.Err) {
		// A call the breaker refused asked nothing of Redis: Requested
		// counts what the lease.tokens metric's "requested" does (see
		// acquire). Counted, an outage's refusals, a call every backoff
		// per tenant, made Requested several times what was asked.
		s.requested.Add(want)
	}
	ls := t.lease.Load() // planned: not dormant
	defer ls.st.ledger.trim()
	if r.Err != nil {
		s.errs.Add(1)
		if refused(r.Err) {
			// The circuit breaker refused the call: it was not sent, and
			// Redis holds the rate share the plan cut for it (uncut). A
			// call that failed otherwise may have replaced the share: it
			// stays cut.
			ls.st.uncut(cut)
		}
		s.planner.Failed(&ls.st, now)
		if probe, open := s.breakerOpen(); open {
			s.planner.AwaitProbe(&ls.st, now, probe)
		}
		s.setRetry(t) // the backoff's end, or a reserved token due before it
		if s.busy(ctx, r.Err, s.opts.Now(), t.name) {
			// Redis is busy, not down: the tenant backs off, and its
			// requests are decided by its lease, not its failure mode,
			// whatever an outage before said. Why: a tenant put in its
			// mode by an outage stayed there until a call of its own
			// succeeded, so one whose calls timed out on the busy Redis
			// that came back (a fleet's calls flooding it after the
			// outage) was decided by its mode with Redis up, the
			// breaker closed and Degraded false: a FailOpen tenant
			// admitted without a lease, outside the bound
			// (TestBusyAfterOutageEndsFailureMode in the root package).
			// Its fallback bucket goes too: a later failure starts one
			// empty, as the first did.
			s.setFailing(t, false, nil)
			ls.fallback.Store(nil)
			return
		}
		fb := ls.fallback.Load()
		fresh := fb == nil
		if fresh {
			fb = &fallback{}
		}
		// The rate share this instance accrued is part of its recent
		// share of the rate, which the fallback starts from: it counts
		// once the share stops accruing here, at its end when it is
		// held still (its tokens come due meanwhile), or now when this
		// call's plan cut it (a renewal that failed, not refused).
		// Counted by the grants alone, a share holder's fallback
		// started near its grant rate, the little the bucket's
		// headroom gave its renewals: at a period of 2 s, 4 instances
		// of a Rate of 100 admitted 180 in all in the outage's seconds
		// 1 to 4, against 399 holding leases
		// (TestShareHolderFallbackStartsAtItsShare).
		if sh := ls.st.share(); sh != nil {
			if ls.st.resv.pace > 0 {
				fb.shared, fb.sharedUntil = sh.rate, ls.st.at(sh.end)
			}
		} else if cut != nil && cut.shared != nil && cut.pace > 0 {
			fb.shared, fb.sharedUntil = cut.shared.rate, now.UnixNano()
		}
		rate, capacity := s.planner.FallbackRate(&ls.st, *t.Limits(), now, s.fleetSize(), fb.shared, fb.sharedUntil)
		if !fresh {
			// The capacity too, as requota retunes it: the quota, or
			// the instances Redis last counted, may have changed.
			fb.Retune(now, capacity, rate)
		} else {
			// Start empty: the lease just spent was this instance's share.
			fb.Reset(now, capacity, rate, 0)
		}
		// Redis did not answer the call: an answer to a later one ends
		// the outage for the tenant (Syncer.Failing).
		var outage int64
		if wholeFailure(r.Err) != nil {
			outage = s.opts.Now().UnixNano()
		}
		fb.node.Store(node)
		fb.outage.Store(outage)
		ls.fallback.Store(fb)
		s.setFailing(t, true, r.Err)
		return
	}
	g := r.Grant
	// Tokens for now; the reserved rest come due later (Planner.Reserved).
	immediate := g.Immediate()
	if t.flag(flagEvicted) {
		// Evicted while the call was in flight: nobody will spend these.
		// Reserved tokens are not returned: they are refill to come, not
		// tokens Redis holds.
		at := s.opts.Now()
		s.release(ctx, nil, node, []lease.ReleaseRequest{s.returnOf(t, immediate, at, now, g.ID())}, 0, at)
		return
	}
	s.setOverride(t, g.Override)
	if immediate > 0 && ls.st.ledger.n() == 0 {
		// Its batch will be the ledger's oldest: name it now, before
		// requests can spend its tokens (publish, below, comes after
		// Granted). A request reads the front before it spends; with the
		// front still unknown, a multi-tenant decision that gave a fresh
		// lease's tokens back took them for tokens of an unknown grant,
		// which Syncer.Unspend refuses while this call holds the lock:
		// forfeited (ExampleLimiter_AllowAll_gateway, under the race
		// detector, lost a tenant's token so).
		t.front.Store(uint32(g.ID()))
	}
	// The reply arrived no earlier than Redis ran the call.
	arrived := s.opts.Now()
	level := t.credit(immediate)
	s.spread(t, now)
	s.granted.Add(g.Granted)
	s.reserved.Add(g.Reserved)
	// The tokens live from when Redis debited them, as far as the node's
	// clock tells (serverclock.go), not from the plan: a call that waited
	// in a busy Redis's queue would have lost the wait from their life.
	debited := time.Unix(0, node.clock.debited(now.UnixNano(), arrived.UnixNano(), g))
	s.planner.GrantedFor(&ls.st, *t.Limits(), now, debited, want, forNeed, g, level)
	// The reservation's wait begins when the reply arrived.
	s.planner.Reserved(&ls.st, *t.Limits(), now, arrived, g)
	// The rate share the reply says this instance holds accrues from the
	// reply's arrival (share.go).
	s.planner.SharedAfter(&ls.st, *t.Limits(), op, now, arrived, g, cut)
	t.publish()
	if g.Instances > 0 {
		s.noteFleet(g.Instances)
	}
	// The level is anchored at the reply's arrival: Redis ran the call no
	// later, so the refill counted since is never more than the bucket
	// made (TestSeenLevelFromTheReply). Anchored at the plan, the call's
	// way to Redis counted as refill already in the bucket.
	ls.emptyAt.Store(arrived.UnixNano() - int64(durationCeil(g.Tokens/t.Limits().Rate)))
	ls.level.Store(floorLevel(g.Tokens))
	s.setRetry(t)
	t.setFlag(flagLeased, true)
	if (immediate > 0 || want > 0) && (ls.st.Target() > 0 || immediate < want) {
		// Tokens came, or the acquire answered (an empty bucket: the
		// tenant's next misses are its quota spent, not a cold start).
		// But a tenant whose plan keeps no lease (target 0: sparse, or
		// its demand too low) and got all it asked for stays cold: those
		// tokens are its waiting request's, and the syncer still keeps
		// no lease for it. Cleared, a request close behind the one that
		// spent them was denied at once (exhausted) with the bucket
		// full, until the next plan sized a lease
		// (TestPausedTenantAdmittedAfterItsPause in the root package).
		t.setFlag(flagIdle, false)
	}
	s.setFailing(t, false, nil)
	ls.fallback.Store(nil)
	s.opts.Telemetry.LeaseGranted(ctx, t.name, want, g.Granted, level, g.Tokens)
}

// setRetry publishes when t's requests may next find tokens without a
// lease call of their own: when the next reserved token comes due, or
// when a lease call may be made, whichever is first. A request that waits
// (WaitN, a max wait) makes its own call then; a client that comes back
// with a request of its own is answered at the tick that plans the tenant
// (Syncer.RetryAfter).
func (s *Syncer) setRetry(t *Tenant) {
	ls := t.lease.Load()
	at := ls.st.at(ls.st.notBefore)
	if due, ok := ls.st.NextDue(); ok {
		at = min(at, due.UnixNano())
	}
	ls.retryAt.Store(at)
}

// RetryAfter is t.RetryAfter for a client that comes back with a request
// of its own, the RetryAfter of a denial: the time when t's requests may
// next find tokens rounded up to the tick that makes the call or drips the
// reserved token (nextTick). Both are the work of a plan, and a held-back
// tenant is planned by Run's ticks (every quarter interval; its misses
// meanwhile do not queue it again: planWith), not when its hold ends:
// counted to the hold's end, a dry tenant's denials (Rate 10, Burst 10)
// sent clients back up to a quarter interval before the call, each retry
// then told 1 ms, about 20 in a row (TestRetryAfterWaitsForTheTick in the
// root package). A request that waits counts to the hold's end
// (t.RetryAfter): its own call, when it wakes, need not wait for a tick.
func (s *Syncer) RetryAfter(t *Tenant, now time.Time, n int64) time.Duration {
	wait := t.RetryAfter(now, n)
	if ls := t.lease.Load(); ls != nil {
		if r := time.Duration(s.nextTick(ls.retryAt.Load()) - now.UnixNano()); r > wait {
			wait = r
		}
	}
	return wait
}

// setOverride applies the quota override a lease call reported for t
// (whose lock is held): nil means none, and the tenant's base limits
// apply. An override is resolved with Options.Defaults, as a configured
// quota is with the limiter's; its limits are replaced only when the
// resolved quota changed, or when they are the base limits: an override
// equal to the base quota is recorded as one all the same, so that Rebase
// keeps it in force over a new base quota
// (TestRebaseKeepsAnOverrideEqualToTheBase).
func (s *Syncer) setOverride(t *Tenant, o *lease.Override) {
	cur := t.limits.Load()
	base := cur.baseOf()
	if o == nil {
		if cur != base {
			s.ttlFalls(&cur.Quota, &base.Quota)
			t.limits.Store(base)
			s.requota(t, &cur.Quota, &base.Quota)
		}
		return
	}
	if q := s.opts.Defaults.Resolve(quota.FromOverride(*o)); q != cur.Quota || cur == base {
		s.ttlFalls(&cur.Quota, &q)
		t.limits.Store(&limits{Quota: q, base: base})
		s.requota(t, &cur.Quota, &q)
	}
}

// requota follows a change of the quota in force from old to next. It
// retunes a failing t's fallback bucket to next; lets rounds plan t again
// at once (its quiet time was reckoned from the old quota: the expiry of
// its batches from the old LeaseTTL, which a shorter one brings forward;
// TestRebaseShorterLeaseTTLExpiresAQuietTenantsTokens); and lifts its
// hold-back when the rate or burst rose (Planner.Raised). t.mu must be
// held.
//
// Why the fallback bucket: it was made under the old quota, and retuned
// only by the tenant's failed lease calls, which a tenant whose requests
// stopped makes none of; filled to its capacity under a Burst of 1,000,
// it admitted 500 requests at once after the Burst fell to 10 during the
// outage (TestFallbackFollowsLoweredBurst in the root package), where it
// holds at most Burst/n.
func (s *Syncer) requota(t *Tenant, old, next *quota.Quota) {
	ls := t.lease.Load()
	if ls == nil || *next == *old {
		return
	}
	if fb := ls.fallback.Load(); fb != nil {
		now := s.opts.Now()
		rate, capacity := s.planner.FallbackRate(&ls.st, *next, now, s.fleetSize(), fb.shared, fb.sharedUntil)
		fb.Retune(now, capacity, rate)
	}
	ls.st.flags &^= flagQuiet | flagQuietHeld
	t.quietUntil.Store(0)
	if next.Rate <= old.Rate && next.Burst <= old.Burst {
		return
	}
	s.planner.Raised(&ls.st, s.opts.Now())
	s.setRetry(t)
}
