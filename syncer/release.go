package syncer

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/telemetry"
)

// returnOf is the release of n of t's tokens (t.mu held), the oldest of
// them granted at oldest (local clock, as now) by the grant with ID id
// (zero when unknown). The release names that grant, so that the bucket
// credits the tokens against its levels after it only. Its age is
// an upper bound of how long before the release script runs the tokens
// were granted: oldest is the time the acquire was sent (before Redis ran
// it), and the release may take up to its pipeline's deadline to reach
// Redis.
func (s *Syncer) returnOf(t *Tenant, n int64, now, oldest time.Time, id lease.GrantID) lease.ReleaseRequest {
	return lease.ReleaseRequest{Tenant: t.name, Limits: t.bucket(), Amount: n,
		Age: max(now.Sub(oldest), 0) + s.callTimeout(batchSize), Grant: id}
}

// queuedReturn is a return left to a later round (Syncer.pending), with
// the time its Age was reckoned at: the age grows by the time it waits
// (aged), so that a return sent late is not credited as if its tokens
// were younger.
type queuedReturn struct {
	r  lease.ReleaseRequest
	at time.Time
}

// queue leaves returns whose Age was reckoned at at to a later round,
// and reports whether it did: not once ReleaseAll has taken the queue
// (Close), when nobody would make them; the caller forfeits them
// (queueOrForfeit). Why: a Refund that passed the closed check as Close
// began queued its return after ReleaseAll had made the queue's, and the
// tokens were lost, counted as refunded but neither returned nor
// forfeited (TestRefundAfterReleaseAllIsForfeited).
func (s *Syncer) queue(at time.Time, rs ...lease.ReleaseRequest) bool {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	if s.released {
		return false
	}
	for _, r := range rs {
		s.pending = append(s.pending, queuedReturn{r, at})
	}
	return true
}

// queueOrForfeit is queue, counting the returns it refused forfeited.
func (s *Syncer) queueOrForfeit(at time.Time, rs ...lease.ReleaseRequest) {
	if !s.queue(at, rs...) {
		for _, r := range rs {
			s.forfeited.Add(r.Amount)
		}
	}
}

// aged returns q's request with its Age reckoned at now instead of at q.at.
func (q queuedReturn) aged(now time.Time) lease.ReleaseRequest {
	r := q.r
	r.Age += max(now.Sub(q.at), 0)
	return r
}

// release returns tokens to Redis. Redis credits each return only with
// what the bucket would hold had the tokens never been leased (an aged
// return); the rest, and tokens whose release fails, are forfeited: lost
// to the global bucket until it refills, which costs utilization, never
// the bound. It returns the tokens credited (rounded down), and counts a
// call per pipeline in round (which may be nil). Each pipeline's deadline
// is timeout, or its callTimeout when 0: a longer one must be in the
// requests' Age (see returnOf). The calls go to node (s.one for returns
// of several nodes' tenants; a cluster client splits them). The requests'
// ages were reckoned at planned: each pipeline adds the time from then to
// its send to its requests' Age (in reqs), which a wait for an earlier
// pipeline, for a call slot or for a node's earlier round may make long.
// (Without it, such a release reached Redis later than its Age allowed,
// and one that names no grant could be credited as if its tokens were
// younger.)
func (s *Syncer) release(ctx context.Context, round *telemetry.Round, node *redisNode, reqs []lease.ReleaseRequest, timeout time.Duration, planned time.Time) (int64, error) {
	var (
		errs     []error
		returned int64
	)
	for start := 0; start < len(reqs); start += batchSize {
		chunk := reqs[start:min(start+batchSize, len(reqs))]
		// Returns always go (or the tokens are lost for a refill), but
		// they load Redis like the rest.
		node.budget.take(len(chunk), true, s.opts.Now())
		sent := false
		_, err := s.call(ctx, telemetry.OpRelease, node, len(chunk), timeout, func(ctx context.Context) ([]lease.Result, error) {
			sent = true
			var whole error
			answered := false
			if late := s.opts.Now().Sub(planned); late > 0 {
				for i := range chunk {
					chunk[i].Age += late
				}
			}
			for i, res := range s.client.ReleaseMany(ctx, chunk) {
				err := res.Err
				credited := int64(0)
				if err == nil {
					credited = min(int64(res.Return.Credited), chunk[i].Amount)
				}
				s.forfeited.Add(chunk[i].Amount - credited)
				switch {
				case err == nil:
					answered = true
					returned += credited
					s.returned.Add(credited)
					s.sawReturn(chunk[i].Tenant, res.Return.Tokens)
				case wholeFailure(err) == nil:
					answered = true
					fallthrough
				default:
					s.errs.Add(1)
					errs = append(errs, err)
					whole = err
				}
			}
			if answered {
				return nil, nil
			}
			return nil, whole
		})
		if !sent {
			// Refused by the open breaker, or no call slot before ctx
			// ended: the tokens are lost to the bucket as a failed
			// return's are. (Counted neither returned nor forfeited, they
			// read as spent: TestRefusedReturnIsForfeited.)
			// Each request failed, as a refused acquire's does (Errors).
			for _, r := range chunk {
				s.forfeited.Add(r.Amount)
			}
			s.errs.Add(int64(len(chunk)))
		}
		if round != nil && !refused(err) { // the breaker's refusal was not sent
			round.Calls++
		}
		if err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	if round == nil {
		// A release outside a round (a grant that came back for an
		// evicted tenant): no round's totals carry it to the metric, so
		// it goes there now.
		s.opts.Telemetry.Leases(0, 0, 0, returned)
	}
	return returned, errors.Join(errs...)
}

// maxCloseExtra is the most time ReleaseAll's returns get beyond a
// call's deadline when Close's ctx gives more. Why a cap: each return's
// Age grows by that time (the release may run that much later), and a
// return whose Age passes 2^32 µs (71.6 minutes) can no longer be judged
// from the grant it names, only by its age, from before its grant: a
// Close with a deadline hours away had every return credited as if its
// tokens were that old, nothing for tokens leased from a full bucket
// (and one of a far date overflowed the Age: TestReleaseAllWithAFarDeadline).
// Ten minutes is longer than any Redis call worth waiting for.
const maxCloseExtra = 10 * time.Minute

// sawReturn tells the tenant named tenant, if tracked, the level of its
// global bucket that a release of its tokens reported (leaseState.sawReturn):
// the tokens given back are in the bucket for its requests' RetryAfter and
// waits. (A tenant tracked anew under the name since has the same bucket.)
func (s *Syncer) sawReturn(tenant string, level float64) {
	t := s.reg.load(tenant)
	if t == nil {
		return
	}
	if ls := t.lease.Load(); ls != nil {
		ls.sawReturn(s.opts.Now(), level, t.Limits().Rate)
	}
}

// ReleaseAll drains every tenant's tokens and returns them to Redis, and
// ends the rate shares the tenants hold (an acquire of nothing with
// lease.ShareEnd: Redis refills the bucket at the whole rate again,
// rather than for a share nobody spends until its epoch ends), and then
// takes the instance out of the fleet's roster (leaveRoster). Call it
// after Run has returned and Close, so nothing refills or counts behind
// it. Its calls bypass the circuit breaker: they are the last chance to
// return the tokens. They get the time ctx gives, when it gives more than
// a call's deadline (a pipeline's deadline is then a call's plus at most
// maxCloseExtra), and a call's deadline otherwise (one for them all, plus
// perCommand a request): a ctx with a shorter deadline, or done already,
// does not cut them short, nor makes them outlive ctx by more.
// A return queued after it (a Refund racing Close) is forfeited (queue).
func (s *Syncer) ReleaseAll(ctx context.Context) error {
	// The roster's leave comes last, in the calls' ctx (detached below
	// when ctx gives less than a call's deadline: with ctx as it was, a
	// done one, it failed at once, and the other instances counted this
	// one for a window more: TestReleaseAllWithADoneCtxLeavesTheRoster).
	callCtx, cancel := ctx, context.CancelFunc(func() {})
	defer func() {
		s.leaveRoster(callCtx)
		cancel()
	}()
	var (
		reqs []lease.ReleaseRequest
		ends []lease.Request
	)
	now := s.opts.Now()
	tenants := s.reg.all
	if s.opts.Driven {
		tenants = slices.Values(byName(s.reg.all))
	}
	for t := range tenants {
		t.mu.Lock()
		if ls := t.lease.Load(); ls != nil {
			if sh, ok := ls.st.HeldShare(); ok {
				// Its accrual stops with the drain below, before the
				// end is sent.
				ends = append(ends, lease.Request{Tenant: t.name, Limits: t.bucket(), Share: lease.ShareEnd, ShareFrom: sh.From})
			}
		}
		if r, ok := s.drainLocked(t, now); ok {
			reqs = append(reqs, r)
		}
		t.mu.Unlock()
	}
	s.pendingMu.Lock()
	for _, q := range s.pending {
		reqs = append(reqs, q.aged(now))
	}
	s.pending, s.released = nil, true
	s.pendingMu.Unlock()
	// callCtx, the calls' ctx, is ctx (extended below), or detached: when
	// ctx gives less than a lease call's deadline plus perCommand a
	// request (budget), what Close's doc promises. Compared with one
	// pipeline's deadline instead, a ctx between the two got less than a
	// done one (more than 1,000 tenants: TestReleaseAllShortDeadlineGetsADoneCtxsTime),
	// and one that gave more than budget (fewer tenants) got budget.
	budget := s.callTimeout(len(reqs) + len(ends))
	extend := true // the returns may take the time ctx gives
	if dl, ok := ctx.Deadline(); !ok || dl.Sub(s.opts.Now()) <= budget {
		// Derived from ctx, a call got no more than it gives: with a ctx
		// done already, the returns failed at once and their tokens
		// were lost uncounted (TestCloseWithAShortCtxReturnsTokens).
		// Detached, the calls together get one lease call's deadline
		// (plus perCommand a request), not one each: pipelines made one
		// after the other against a Redis that answers nothing outlived
		// ctx by a deadline apiece
		// (TestCloseWithADoneCtxIsBoundedByOneCallDeadline).
		detached, stop := context.WithTimeout(context.WithoutCancel(ctx), budget)
		callCtx, cancel = detached, stop // canceled after the roster's leave
		extend = false
	}
	if len(reqs) == 0 && len(ends) == 0 {
		return nil
	}
	// One span for Close's calls, the shares' ends with the returns.
	rctx, round := s.opts.Telemetry.StartRound(callCtx, false)
	defer s.endRound(round)
	endErr := s.endShares(rctx, round, ends)
	if len(reqs) == 0 {
		return endErr
	}
	// The returns get the caller's time, when it gives more than a
	// call's deadline: tokens whose return times out are forfeited, and a
	// limiter closing while Redis is busy would otherwise lose them all.
	// At most maxCloseExtra more (see there).
	// Each request's Age grows by the extra time, as returnOf counts the
	// standard deadline in it: the release may run that much later.
	var timeout time.Duration
	if dl, ok := ctx.Deadline(); ok && extend {
		if extra := min(dl.Sub(s.opts.Now())-s.callTimeout(batchSize), maxCloseExtra); extra > 0 {
			timeout = s.callTimeout(batchSize) + extra
			for i := range reqs {
				reqs[i].Age += extra
			}
		}
	}
	var err error
	round.Returned, err = s.release(rctx, round, &s.one, reqs, timeout, now)
	return errors.Join(endErr, err)
}

// endShares ends the rate shares ends name, in pipelines of up to
// batchSize tenants, counting the calls and lease requests in round. A
// share whose end fails stays in force in Redis until its epoch ends,
// unspent: a loss of quota, never of the bound.
func (s *Syncer) endShares(ctx context.Context, round *telemetry.Round, ends []lease.Request) error {
	var errs []error
	for start := 0; start < len(ends); start += batchSize {
		chunk := ends[start:min(start+batchSize, len(ends))]
		s.one.budget.take(len(chunk), true, s.opts.Now())
		failed := 0
		_, err := s.call(ctx, telemetry.OpAcquire, &s.one, len(chunk), 0, func(ctx context.Context) ([]lease.Result, error) {
			res, err := s.client.AcquireMany(ctx, chunk, nil)
			for _, r := range res {
				if r.Err != nil {
					errs = append(errs, r.Err)
					failed++
				}
			}
			return nil, err
		})
		if err != nil {
			errs = append(errs, err)
			failed = len(chunk)
		}
		if !refused(err) { // the breaker's refusal was not sent (acquire)
			round.Add(telemetry.Round{Tenants: len(chunk), Calls: 1})
		}
		round.Failed += failed
	}
	return errors.Join(errs...)
}
