package syncer

import (
	"context"

	"github.com/sony/gobreaker/v2"
	"go.opentelemetry.io/otel/trace"
	"golang.org/x/sync/singleflight"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/telemetry"
)

// lock takes t's lock for a refill. The loop holds tenants' locks across
// lease calls, so rather than block on the lock it waits for the next
// release of locks (s.unlocked) and tries again; it gives up, returning
// false, when the syncer closes.
func (s *Syncer) lock(t *Tenant) bool {
	for !t.mu.TryLock() {
		wake := s.unlocked.C()
		// The holder may have unlocked, and broadcast, before C: try
		// again now that a later broadcast will wake us.
		if t.mu.TryLock() {
			return true
		}
		select {
		case <-wake:
		case <-s.ctx.Done():
			return false
		}
	}
	return true
}

// unlock releases t's lock and wakes the refills waiting for it (lock):
// a release without the broadcast left them waiting for the next one, a
// round's, up to a quarter interval of a cold request's wait.
func (s *Syncer) unlock(t *Tenant) {
	t.mu.Unlock()
	s.unlocked.Broadcast()
}

// Refill makes an urgent lease call for t now, joining one already in
// flight for the same tenant (by name: a call that finds its tenant
// evicted is made for the tenant made anew with the name, if any, whose
// requests may have joined it). The channel yields the call's error (nil
// when it succeeded, or when the planner held the call back because the
// tenant already holds enough or Redis asked it to wait). It is meant for
// requests that wait: a tenant's first request on this instance, and
// requests that may wait for a fresh lease.
//
// need is the tokens the caller is waiting for: the call asks for at least
// that many beyond what the tenant holds. Callers coalesced into one call
// share the first caller's need.
//
// The call's span links to the span in ctx, if any: the request that
// asked for it. ctx does not bound the call (other callers may share it);
// callers stop waiting on their own.
//
// In driven mode (Options.Driven) the call is queued for Refills, callers
// coalesced into it share the largest need, and the answer waits for
// Deliver.
func (s *Syncer) Refill(ctx context.Context, t *Tenant, need int64) <-chan singleflight.Result {
	if s.opts.Driven {
		return s.queueRefill(ctx, t, need)
	}
	return s.sf.DoChan(t.name, func() (any, error) {
		return nil, s.refill(trace.LinkFromContext(ctx), t, need)
	})
}

func (s *Syncer) refill(link trace.Link, t *Tenant, need int64) error {
	s.closeMu.RLock()
	if s.closed {
		s.closeMu.RUnlock()
		return ErrClosed
	}
	s.inflight.Add(1)
	s.closeMu.RUnlock()
	defer s.inflight.Done()

	if !s.lock(t) {
		return ErrClosed
	}
	if t.flag(flagEvicted) {
		// Calls are joined by the tenant's name, so this one may have
		// been joined by requests of the tenant made anew with t's name
		// since t was removed: the call is for that tenant, the one the
		// registry holds now. Once this call is forgotten no request
		// joins it, and one that joined before had the tenant it holds
		// from the registry (Track) before it joined, so the look-up
		// below finds that tenant, or one made since if it was evicted
		// too (its requests then look it up again). One look, no loop:
		// a tenant found evicted again leases nothing (refillLocked).
		// Without it, the call leased nothing, and the new tenant's
		// requests were left to retry within a refresh interval
		// (TestRefillJoinedAcrossEviction).
		s.unlock(t)
		s.sf.Forget(t.name)
		if t = s.reg.load(t.name); t == nil {
			return nil
		}
		if !s.lock(t) {
			return ErrClosed
		}
	}
	defer s.unlock(t)
	// Close does not cancel the call, which CallTimeout bounds, but waits
	// for it (inflight), as for a round's: a reply lost to a cancel would
	// lose the tokens Redis granted, and a rate share it asked for, which
	// Close could then neither return nor end.
	return s.refillLocked(context.WithoutCancel(s.ctx), link, t, need)
}

// refillLocked is the urgent lease call of a refill for t, whose lock is
// held; ctx is the lifetime of the call (s.ctx without its cancel from a
// refill's own goroutine; the step's in driven mode).
func (s *Syncer) refillLocked(ctx context.Context, link trace.Link, t *Tenant, need int64) error {
	if t.flag(flagEvicted) {
		return nil
	}
	now := s.opts.Now()
	node := s.nodeOfTenant(ctx, t.name)
	if s.closeBegun.Load() {
		// Nothing sent yet: a call now would only lease what ReleaseAll
		// returns, and Close would wait for it (BeginClose).
		return ErrClosed
	}
	in := s.input(t)
	in.Urgent = true
	in.Need = max(in.Need, need)
	// Redis answers again (the breaker closed after this tenant's calls
	// failed): a waiting request need not sit out the tenant's backoff.
	in.Recovered = t.flag(flagFailing) && !s.opts.Cluster && s.breaker.State() == gobreaker.StateClosed
	var links []trace.Link
	if link.SpanContext.IsValid() {
		links = append(links, link)
	}
	// The refill's span, begun by its first Redis call (none may be made).
	var round *telemetry.Round
	defer func() {
		if round != nil {
			s.endRound(round)
		}
	}()
	// Tokens refunded here wait in the queue of returns (Refund): return
	// them first, so that the acquire may find them in a bucket that the
	// last call found dry. Without that, the tenant's waiting requests
	// would be denied until the next round.
	if t.flag(flagRefunded) {
		ctx, round = s.returnQueued(ctx, t, node, links)
		in.Refunded = t.setFlag(flagRefunded, false)
	}
	a, ret, ok := s.planWith(t, now, in)
	defer trim(t) // after apply, or at once when no call is made
	if ok {
		// Returned by the next round: not worth a round trip here, where
		// requests wait for the acquire.
		s.queueOrForfeit(now, ret)
	}
	if !a.Calls() {
		return nil
	}
	if !s.roomFor(t, node, now, a) {
		// Redis is busy (the call budget is full): no lease comes soon.
		node.refillDelay.failed(now, false)
		return nil
	}
	if round == nil {
		ctx, round = s.opts.Telemetry.StartRound(ctx, true, links...)
	}
	var r lease.Result
	defer func() { // r is the call's result, below
		if r.Err != nil {
			node.refillDelay.failed(s.opts.Now(), t.flag(flagFailing)) // apply said whether it is an outage
		} else {
			node.refillDelay.note(now, s.opts.Now())
		}
	}()
	r, sent := s.refillCall(ctx, node, lease.Request{Tenant: t.name, Limits: t.bucket(), Want: a.Acquire, Demand: s.planner.ReportedDemand(t.st(), now, a.Acquire), Reserve: a.Reserve,
		Share: a.Share, ShareTerms: a.ShareTerms, ShareFrom: a.ShareFrom})
	s.apply(ctx, t, node, now, a.Acquire, a.ForNeed, a.Share, a.cut, r)
	if !refused(r.Err) { // a call the breaker refused was not sent (acquire)
		calls := 0
		if sent {
			calls = 1 // a refill that joined another's call made none
		}
		round.Add(telemetry.Round{Tenants: 1, Calls: calls, Requested: a.Acquire, Granted: r.Grant.Granted})
	}
	if r.Err != nil {
		round.Failed++
	}
	return r.Err
}
