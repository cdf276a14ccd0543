package syncer

import (
	"cmp"
	"context"
	"iter"
	"math"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/telemetry"
)

// job is one tenant's lease call in a round; the tenant's lock is held
// from planning until the result is applied.
type job struct {
	t       *Tenant
	want    int64
	demand  float64       // tokens per second, reported to Redis for fair shares
	reserve time.Duration // the reservation length (Action.Reserve)
	// The rate share's operation (Action.Share, ShareTerms, ShareFrom),
	// and the accrual the plan stopped for it, given back if the call is
	// not made (Action.cut).
	share      lease.ShareOp
	shareTerms lease.ShareTerms
	shareFrom  time.Time
	cut        *reservation
	// node names the node that serves t in Cluster mode (NodeOf; "" when
	// unknown, and always without Cluster): the call budget the job took
	// room in, and the group its call goes in (byNode).
	node string
	read bool // a quota re-read (Action.Read), which always goes
	// ahead counts the calls to t's node that the round's admit refused
	// before this one's, in the order of turns; -1 when admit refused it
	// without putting it in that order (turnWait).
	ahead int32
}

// Round plans every tenant that tenants yields, but those whose plan could
// only observe their demand (quiet.go), and carries the plan out:
// expired tokens are taken back and returned, idle tenants evicted (their
// tokens returned), then leases are acquired in pipelines of up to
// batchSize tenants, at most maxInFlight at once to a node. A tenant that is
// locked (an urgent refill, or an earlier round's call, is running for
// it) is skipped. It must not run concurrently with Tick, Urgent, Wait or
// another Round.
//
// Without Cluster, Round returns once its calls have finished. In Cluster
// mode it groups the returns and acquires by the node of their tenant
// (see NodeLocator) and returns once it has sent each group on its way,
// in a goroutine of its own: a dead or slow node delays its own tenants,
// which stay locked (so later rounds skip them) until their results are
// applied, and no one else. Wait waits for those calls.
func (s *Syncer) Round(ctx context.Context, tenants iter.Seq[*Tenant]) {
	s.round(ctx, tenants, false, false, nil)
}

// round is Round, with quotaCheck telling the planner that quotas may
// have changed in Redis, with ahead reading the tenants in chunks
// ahead of planning them (chunk.visit), as Tick does:
// Round visits each one as it is yielded, before the next is asked for;
// and with seen, when not nil, called with each tenant once it is
// visited (Tick's awake.seen).
func (s *Syncer) round(ctx context.Context, tenants iter.Seq[*Tenant], quotaCheck, ahead bool, seen func(*Tenant)) {
	now := s.opts.Now()
	var (
		jobs     = s.planned[:0]
		releases []lease.ReleaseRequest
		evict    []*Tenant
	)
	track := s.capped()
	// In Cluster mode each call takes room in its node's budget, so the
	// planning looks up the node of each tenant it calls for (the look-ups
	// are local but for a slot map not loaded yet: bounded).
	locate := ctx
	if s.opts.Cluster {
		var cancel context.CancelFunc
		locate, cancel = context.WithTimeout(ctx, s.opts.CallTimeout)
		defer cancel()
	}
	s.lru = s.lru[:0]
	s.lockedRefunds = s.lockedRefunds[:0]
	ns := now.UnixNano()
	leftAlone := false // a tenant was left to a later tick (quiet.go)
	locked := 0        // tenants found locked: a call in flight for them
	// visit plans t, or passes it by.
	visit := func(t *Tenant) {
		s.awake.visited++
		if t.flag(flagEvicted) {
			return
		}
		// Held back with nothing but misses to observe, or dormant with
		// nothing to plan before its idle check: passed by without its
		// lock, unless the round must see every tenant's activity
		// (MaxTenants) or re-read quotas.
		if !quotaCheck && !track {
			if pass, dormant := s.passBy(t, ns); pass {
				leftAlone = leftAlone || !dormant
				return
			}
		}
		if !t.mu.TryLock() {
			locked++
			if t.flag(flagRefunded) {
				s.lockedRefunds = append(s.lockedRefunds, t.name)
			}
			if quotaCheck && s.quotaMoved {
				// Its call in flight may have run before the quota
				// changed, and this round is the only one that asks for
				// a re-read: the next plan of t does (planWith). Left
				// out, a tenant whose refill's reply came after this
				// round kept the old quota until its next call for
				// tokens, minutes for one held back on a dry bucket
				// (TestQuotaCheckRoundRereadsLockedTenant).
				t.setFlag(flagReread, true)
			}
			return
		}
		if t.lease.Load() == nil && !t.wakes() {
			// Dormant, and nothing to plan: only its idleness counts.
			s.idleOrKept(t, now, &evict)
			t.mu.Unlock()
			return
		}
		if !quotaCheck && s.quiet(t, now) {
			// Nothing to do but observe the demand: left to a later tick.
			leftAlone = true
			s.idleOrKept(t, now, &evict)
			t.mu.Unlock()
			return
		}
		in := s.input(t)
		in.QuotaCheck = quotaCheck
		// The round makes its returns, the queued ones with them, before
		// its acquires.
		in.Refunded = t.setFlag(flagRefunded, false)
		a, ret, ok := s.planWith(t, now, in)
		if ok {
			releases = append(releases, ret)
		}
		if a.Calls() {
			var node string
			if s.opts.Cluster {
				node, _ = s.nodeOf(locate, t.name) // "" when unknown
			}
			jobs = append(jobs, job{t: t, want: a.Acquire, demand: s.planner.ReportedDemand(t.st(), now, a.Acquire), reserve: a.Reserve,
				share: a.Share, shareTerms: a.ShareTerms, shareFrom: a.ShareFrom, cut: a.cut, node: node, read: a.Read})
			return // room is given below; unlocked once the result is applied, or then
		}
		s.rest(locate, t, now, &evict)
	}
	if seen != nil {
		plan := visit
		visit = func(t *Tenant) {
			plan(t)
			seen(t)
		}
	}
	// Ahead, the tenants are visited in chunks (chunk.visit): the reads
	// of a chunk's tenants, which are in no cache when the tenants are
	// many, then overlap.
	if ahead {
		c := &s.chunk
		tenants(func(t *Tenant) bool {
			if c.add(t) {
				c.visit(ns, visit)
			}
			return true
		})
		c.visit(ns, visit)
	} else {
		tenants(func(t *Tenant) bool {
			visit(t)
			return true
		})
	}
	if leftAlone {
		// The tenants left alone hold no batch that expires before now
		// (settle), so the clock may move on (see Refund).
		s.noteClock(now)
	}
	// The buffers are the next round's; what the calls name is not kept.
	s.planned = jobs[:0]
	defer clear(jobs)
	// The calls that find no room in their node's call budget are not
	// made (Redis busy): planned again a quarter interval on, or nearer
	// their turn (turnWait).
	jobs, refused := s.admit(now, jobs)
	defer clear(refused)
	defer clear(jobs)
	for _, j := range refused {
		s.holdBack(j.t, now, s.turnWait(j.t, s.node(j.node), j.ahead), j.cut)
		s.rest(locate, j.t, now, &evict)
	}
	// A refill may be waiting for a lock the planning held (free when
	// nobody waits).
	s.unlocked.Broadcast()
	// Over the cap: evict the least recently active of the tenants with
	// no call in flight. Tenants waiting for a lease count toward the cap
	// too, or a burst of new tenants would stall eviction: this round's
	// calls, and those found locked, whose call is in flight already (a
	// new tenant's first lease, a refill, an earlier round's call in
	// Cluster mode). Uncounted, a round over 4 old tenants and 4 new ones
	// with their first lease calls in flight, of MaxTenants 4, evicted
	// none (TestMaxTenantsCountsTenantsWithARefillInFlight).
	if over := len(s.lru) + len(jobs) + locked - s.opts.MaxTenants; track && over > 0 {
		slices.SortFunc(s.lru, func(a, b lruEntry) int {
			// Ties by name, so that the choice does not follow map order.
			return cmp.Or(cmp.Compare(a.active, b.active), cmp.Compare(a.t.name, b.t.name))
		})
		for _, e := range s.lru[:min(over, len(s.lru))] {
			evict = append(evict, e.t)
		}
	}
	clear(s.lru)
	releases = s.evict(evict, now, releases)
	s.awake.settle()
	releases = s.takePending(releases, now)
	if len(releases) == 0 && len(jobs) == 0 {
		return
	}
	ctx, round := s.opts.Telemetry.StartRound(ctx, false)
	if s.opts.Cluster {
		s.dispatch(ctx, round, now, releases, jobs)
		return
	}
	defer s.endRound(round)
	round.Add(s.carryOut(ctx, now, &nodeWork{node: &s.one, releases: releases, jobs: jobs}))
}

// rest ends the round's planning of t, which makes no call: t counts as
// idle (to evict) or kept, may go dormant, and is unlocked. ctx bounds
// the look-up of t's node (followFailover).
func (s *Syncer) rest(ctx context.Context, t *Tenant, now time.Time, evict *[]*Tenant) {
	trim(t)
	s.followFailover(ctx, t)
	if t.flag(flagFailing) && !s.Failing(t) {
		// The outage its last call failed in has ended, and the tenant
		// plans no call that would say so (Failing): it is failing no
		// more. Why: in Cluster mode such a sparse tenant kept the
		// Syncer Degraded, after its master answered again, until its
		// next request (TestClusterSparseTenantAfterOutageLeasesAgain in
		// the root package); and its fallback bucket kept it from going
		// dormant.
		s.setFailing(t, false, nil)
		t.lease.Load().fallback.Store(nil)
	}
	if !s.idleOrKept(t, now, evict) {
		s.sleep(t, now)
	}
	t.mu.Unlock()
}

// followFailover points the outage that a failing Cold tenant t (whose
// lock is held) last failed in at the node that serves t now, when in
// Cluster mode that is another node than the one its call went to: a
// replica promoted in its master's place, under its own address, or a
// slot moved to another master. Failing then ends the tenant's failure
// once that node has answered a call in time since the outage began.
// Why: Failing waited for the node the failed call went to, which after
// a failover is gone and answers nothing again, so a sparse tenant whose
// call failed as its master died stayed failing with its slots served by
// the new master: its next request decided by its mode (a FailClosed
// tenant denied unavailable), and the limiter Degraded until then
// (TestClusterSparseTenantAfterFailoverLeasesAgain in the root package).
// A warm tenant needs none of this: its own scheduled call goes to the
// new node.
func (s *Syncer) followFailover(ctx context.Context, t *Tenant) {
	if !s.opts.Cluster || !t.flag(flagFailing) || !t.Cold() {
		return
	}
	ls := t.lease.Load()
	if ls == nil {
		return
	}
	fb := ls.fallback.Load()
	if fb == nil || fb.outage.Load() == 0 {
		return // Redis answered the failure: it stands (Failing)
	}
	name, ok := s.nodeOf(ctx, t.name)
	if !ok || name == "" {
		return
	}
	if v, ok := s.nodes.Load(name); ok && v.(*redisNode) == fb.node.Load() {
		// Still the node the call went to: not noted as used (node), so
		// that a dead master whose tenants only fail is forgotten as
		// before (nodeForget).
		return
	}
	fb.node.Store(s.node(name))
}

// trim drops the ledger batches of t (whose lock is held) if its plan
// drained them and no grant filled them again (Ledger.trim): its plan is
// carried out, and no Add comes before its next plan's call.
func trim(t *Tenant) {
	if ls := t.lease.Load(); ls != nil {
		ls.st.ledger.trim()
	}
}

// takePending appends the queued returns to releases and returns it,
// leaving queued those of the tenants the round found locked with a
// refund's return queued (s.lockedRefunds): the tenant's refill (or a
// later round) makes that return before its acquire, and so may lease the
// tokens again from a bucket its last call found dry (Input.Refunded).
// Taken by this round, the return could still be on its way when the
// tenant's refill acquired. The returns taken are aged to now, the
// round's time.
func (s *Syncer) takePending(releases []lease.ReleaseRequest, now time.Time) []lease.ReleaseRequest {
	return s.takeQueued(releases, now, func(tenant string) bool { return !slices.Contains(s.lockedRefunds, tenant) })
}

// takeQueued moves the queued returns (s.pending) of the tenants that
// take names to out, in their order, their ages reckoned at now (aged),
// and returns out; the others stay queued.
func (s *Syncer) takeQueued(out []lease.ReleaseRequest, now time.Time, take func(tenant string) bool) []lease.ReleaseRequest {
	s.pendingMu.Lock()
	defer s.pendingMu.Unlock()
	kept := s.pending[:0]
	for _, q := range s.pending {
		if take(q.r.Tenant) {
			out = append(out, q.aged(now))
		} else {
			kept = append(kept, q)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	return out
}

// carryOut makes a round's calls of w: the returns, then the acquires in
// pipelines of up to batchSize tenants, which it waits for. It returns the
// totals for the round's span.
func (s *Syncer) carryOut(ctx context.Context, now time.Time, w *nodeWork) (tot telemetry.Round) {
	if len(w.releases) > 0 {
		tot.Returned, _ = s.release(ctx, &tot, w.node, w.releases, 0, now)
	}
	jobs := w.jobs
	if len(jobs) > probeTenants && s.Down() {
		// The breaker is open or lets a probe through: the first
		// tenants' call goes alone, and the others' after it, once it
		// has closed the breaker (or been refused, as they then are).
		// Why: every failed tenant's next call is the probe's time
		// (Planner.AwaitProbe), so the round there planned them all,
		// and the pipeline the breaker let through carried up to 1,000
		// tenants' scripts to a Redis that runs none, each run up to its
		// first write on a replica answering READONLY: 300 tenants, 300
		// scripts a probe, where they had come to 87 on average with
		// the backoffs spread (TestProbeCarriesFewTenants in the root
		// package). Redis back, the others lease in the same round.
		tot.Add(s.acquire(ctx, now, w.node, jobs[:probeTenants]))
		jobs = jobs[probeTenants:]
	}
	if len(jobs) == 0 {
		return tot
	}
	if s.opts.Driven {
		// One pipeline after the other, in order.
		for start := 0; start < len(jobs); start += batchSize {
			tot.Add(s.acquire(ctx, now, w.node, jobs[start:min(start+batchSize, len(jobs))]))
		}
		return tot
	}
	var g errgroup.Group
	var mu sync.Mutex // guards tot
	for start := 0; start < len(jobs); start += batchSize {
		chunk := jobs[start:min(start+batchSize, len(jobs))]
		g.Go(func() error {
			t := s.acquire(ctx, now, w.node, chunk)
			mu.Lock()
			tot.Add(t)
			mu.Unlock()
			return nil
		})
	}
	g.Wait()
	return tot
}

// endRound ends a round's span and records its lease totals.
func (s *Syncer) endRound(r *telemetry.Round) {
	s.opts.Telemetry.Leases(r.Tenants, r.Requested, r.Granted, r.Returned)
	r.End()
}

// planWith runs the planner for t (whose lock is held) on what requests
// recorded (in), takes expired tokens back from the counter, and returns
// the action and the release that returns the expired tokens, if any.
func (s *Syncer) planWith(t *Tenant, now time.Time, in Input) (a Action, ret lease.ReleaseRequest, ok bool) {
	s.revive(t, now)
	defer t.publish()
	s.plans.Add(1)
	reread := t.setFlag(flagReread, false)
	if reread {
		in.QuotaCheck = true
	}
	if in.QuotaCheck {
		in.QuotaSeen = s.quotaSeen.Load()
	}
	if reread {
		in.QuotaSeen = math.MaxInt64 // no call made so far spares it (Input.QuotaSeen)
	}
	s.noteClock(now)
	if ex := in.Level - t.st().Held(); ex > 0 {
		// Tokens a multi-tenant decision gave back (Tenant.UnspendWaited) after
		// this ledger had accounted for their spend: their grant is no
		// longer known, so they cannot be kept (they might outlive their
		// lease) nor returned naming it. Forfeit them, as a failed return
		// would. (So are tokens a failed split spend put back after the
		// last plan's expiry missed them: debit takes what waits there
		// first, bucket.Counter.Take.)
		taken, left := t.debit(ex)
		s.forfeited.Add(taken)
		in.Level = left
	}
	// What failed split spends put back since the last plan is spendable
	// again once the excess above has been taken from it, and not later
	// in this plan: one put back while this plan's expiry below takes
	// tokens back (a gather holds its tokens in no count, and the take-back
	// misses them) waits for the next plan's excess, where it was restored
	// at once when Restore ran at this plan's end (a reviewer's stress
	// test: 8,903 of 18,398 such put-backs spendable).
	t.restore()
	reserved := t.st().Reserved()
	a = s.planner.Plan(t.st(), *t.Limits(), now, in)
	t.keepActive()
	if a.Unobserved > 0 {
		t.Unmiss(a.Unobserved)
	}
	t.quietUntil.Store(s.quietUntil(t))
	if a.Drip > 0 {
		// Reserved tokens that came due: into the counter before the
		// expiry below reads it (the ledger holds them already).
		t.credit(a.Drip)
		t.setFlag(flagIdle, false)
		s.dripped.Add(a.Drip)
		s.setRetry(t)
	} else if reserved > 0 && t.st().Reserved() == 0 {
		// Dropped (the quota's rate fell: State.dropFallen): requests
		// are no longer told to wait for a token of it.
		s.setRetry(t)
	}
	if in.Urgent && a.Acquire == 0 && now.Before(t.st().NotBefore()) {
		// Calls are held back (bucket dry or backoff): stay urgent, so the
		// tick retries once allowed, without re-queueing on every miss.
		t.setFlag(flagUrgent, true)
	}
	s.spread(t, now)
	setIdle(t, t.st().Target() == 0, a)
	if a.Expire > 0 {
		taken, left := t.debit(a.Expire)
		s.planner.Expired(t.st(), taken, left)
		s.expired.Add(taken)
		s.opts.Telemetry.Expired(taken)
		switch {
		case taken > 0 && !s.planner.ReturnsExpired(t.st(), a, t.lease.Load().refilled(now, t.Limits())):
			s.forfeited.Add(taken)
		case taken > 0:
			return a, s.returnOf(t, taken, now, a.ExpiredGranted, a.ExpiredGrant), true
		}
	}
	return a, ret, false
}

// setIdle sets t's flagIdle when its plan a found it idle, and else
// clears it, but not while the plan's acquire is out: a tenant idle until
// then stays cold until that call answers (apply), as a tenant before
// its first lease does. Cleared at the plan, a request whose wait for
// that lease ended before the call answered was denied as a warm miss,
// ReasonExhausted, with its bucket full (TestLapsedColdDenialIsAColdStart
// in the root package).
func setIdle(t *Tenant, idle bool, a Action) {
	if idle || a.Acquire == 0 {
		t.setFlag(flagIdle, idle)
	}
}

// roundChunk is how many tenants a round reads ahead of planning them.
const roundChunk = 32

// chunk holds the tenants a round has read ahead of planning them. The
// Syncer's is reused by every round (the loop's).
type chunk struct {
	ts [roundChunk]*Tenant
	n  int
}

// add adds t, and reports whether the chunk is full.
func (c *chunk) add(t *Tenant) bool {
	c.ts[c.n] = t
	c.n++
	return c.n == len(c.ts)
}

// visit reads the fields of the chunk's tenants that a round at ns reads
// first, then calls visit for each and empties the chunk, keeping none
// alive. Reading them first starts their cache lines on their way before
// the first is planned: those of the next tenants otherwise waited for
// the lock of the one before. For a tenant the round will not pass by
// without its lock, that is also the first cache line of its leaseState.
func (c *chunk) visit(ns int64, visit func(*Tenant)) {
	ts := c.ts[:c.n]
	for _, t := range ts {
		// The Tenant's fields that every visit reads (its flags, quiet
		// time and counter), on one or two cache lines: its 96 bytes
		// start on a line or half-way through one.
		q, _, _ := t.quietUntil.Load(), t.flags.Load(), t.tokens.Back()
		if ns >= q {
			// Not to be passed by without its lock (passBy): a
			// leased tenant's visit reads the first
			// fields of its State, on this field's cache line.
			if ls := t.lease.Load(); ls != nil {
				_ = ls.retryAt.Load()
			}
		}
	}
	for _, t := range ts {
		visit(t)
	}
	clear(ts)
	c.n = 0
}
