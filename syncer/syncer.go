package syncer

import (
	"cmp"
	"context"
	"errors"
	"iter"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasequota/leasequota/bucket"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/telemetry"
)

// ErrClosed is returned by Refill after Close.
var ErrClosed = errors.New("syncer: closed")

// Options configure a Syncer. Zero fields take the defaults documented on
// each.
type Options struct {
	// Planner decides what to do; default NewPlanner(Config{}, 0).
	Planner *Planner
	// CallTimeout is the deadline of every Redis call; default Interval/2.
	CallTimeout time.Duration
	// Now is the clock; default time.Now.
	Now func() time.Time

	// OnDegraded is called when the breaker opens (degraded true, with the
	// error that tripped it) and when it closes again (false, nil); with
	// Cluster, when the first tenant's lease calls start failing and when
	// the last one's succeed again. It is called once per change.
	OnDegraded func(degraded bool, err error)
	// Cluster says tenants live on different Redis nodes (a Redis Cluster):
	// a failed call then says nothing of other tenants' nodes, so no
	// breaker is shared between tenants, and each failing tenant backs off
	// on its own (up to one interval). Degraded reports whether any tenant
	// is failing. And a slow call says nothing of other nodes either: a
	// round sends each node's calls on their own (grouped by the Store's
	// NodeLocator, when it has one) and does not wait for them, nor for
	// the quota version's poll (see Round and Wait).
	Cluster bool

	// IdleTimeout is how long a tenant may see no request before it is
	// evicted (its tokens returned); default 1 minute.
	IdleTimeout time.Duration
	// MaxTenants, when positive, is the most tenants kept: each round
	// evicts the least recently active beyond it.
	MaxTenants int
	// Instances is the number of instances expected to share the tenants,
	// for the fallback rate of tenants whose own count is unknown (see
	// Planner.FallbackRate) until a lease call reports a count; zero means
	// unknown (1).
	Instances int
	// Telemetry records spans, metrics and logs of rounds and calls; nil
	// records nothing.
	Telemetry *telemetry.Telemetry

	// Driven says the caller runs the loop's steps itself (Tick, Urgent,
	// Refills, Deliver) instead of Run, and needs them to do the same on a
	// replay, as a deterministic simulation does: Refill queues its call
	// for Refills instead of starting a goroutine, wake-ups of waiting
	// requests wait for Deliver, and tenants are visited in name order
	// (see driven.go).
	Driven bool

	// Defaults resolve the quota overrides that Redis reports
	// (quota.Defaults.Resolve): the limiter's default LeaseTTL and
	// FailureMode. A zero Interval means the Planner's; a zero LeaseTTL,
	// the shortest allowed (quota.MinLeaseTTL).
	Defaults quota.Defaults
}

// Stats are running totals of what a Syncer did. All fields only grow.
type Stats struct {
	Calls     int64 // lease round trips to Redis (a pipeline counts once)
	Errors    int64 // lease calls (per tenant) that failed
	Requested int64 // tokens asked for
	Granted   int64 // tokens granted
	Returned  int64 // tokens given back to Redis and credited there (expiry, eviction, Close)
	Forfeited int64 // tokens given back that Redis did not credit, or whose return failed
	Expired   int64 // leased tokens taken back unspent at the end of their lifetime (and returned)
	Evicted   int64 // tenants evicted (idle or over MaxTenants)
}

// Syncer refreshes the leases of a set of tenants: one goroutine (Run)
// plans every tenant each Interval/4 and carries the plan out in pipelined lease
// calls (in Cluster mode from a goroutine per node, which Run and Close
// wait for; see Round); Refill makes an urgent call for one tenant. All
// methods are safe for concurrent use, except where a method says which
// others it must not run beside.
type Syncer struct {
	client  lease.Store
	reg     registry // every tenant this instance tracks
	planner *Planner
	opts    Options

	urgent  chan *Tenant // tenants that ran short; never blocks a sender
	sf      singleflight.Group
	sem     *semaphore.Weighted // bounds concurrent Redis calls
	breaker *gobreaker.CircuitBreaker[[]lease.Result]
	lastErr atomic.Pointer[error] // last error of a Redis call, for OnDegraded

	// Owned by the loop (Run and Round are not called concurrently).
	lru         []lruEntry // reused by Round when MaxTenants is set
	short       []*Tenant  // reused by Urgent
	quotaVer    int64      // the quota version last seen
	quotaPolled int64      // unix nanoseconds of the last poll of it
	quotaKnown  bool       // quotaVer has been read once
	// nodeDone is closed when the last round's work on the node is done
	// (Cluster mode; see dispatch).
	nodeDone map[string]chan struct{}
	// stopping is Run's ctx.Done(), nil outside Run: once it is closed,
	// node work still waiting for its turn is dropped (Cluster mode; see
	// dispatch).
	stopping <-chan struct{}

	poll quotaPoll // Cluster mode: the quota version poll beside the rounds

	// lastBase is the base limits Track made last: tenants of the same
	// quota share them (see baseLimits).
	lastBase atomic.Pointer[limits]

	pendingMu sync.Mutex             // guards pending
	pending   []lease.ReleaseRequest // returns of expired tokens taken back by urgent refills

	ctx    context.Context // lifetime of urgent refills, ended by Close
	cancel context.CancelFunc

	closeMu  sync.RWMutex   // guards closed against inflight.Add and async.Add
	closed   bool           //
	inflight sync.WaitGroup // urgent refills running
	// async counts what rounds left running in Cluster mode: node groups
	// of calls (dispatch) and quota version polls (pollQuotaAsync). Only
	// the loop adds to it.
	async sync.WaitGroup

	calls, errs, requested, granted, returned, forfeited, expired, evicted atomic.Int64
	failingTenants                                                         atomic.Int64 // Cluster mode: tenants whose last call failed

	// fleet is the largest number of instances a lease call has reported
	// on any tenant (at least Options.Instances): the fleet size assumed
	// for a tenant whose own count is unknown.
	fleet atomic.Int64

	// recovered is closed, and replaced by a new channel, each time lease
	// calls succeed again after failing (the breaker closes; in Cluster
	// mode, a failing tenant's call succeeds): requests waiting through an
	// outage wake on it.
	recovered signal

	// driven is the state of driven mode (Options.Driven).
	driven driven

	// unlocked is broadcast after tenants' locks are released (a lease
	// call's result applied, a round planned, an eviction done): a refill
	// that finds its tenant locked waits on it instead of on the lock,
	// which may be held across a network call.
	unlocked signal
}

// perCommand is the time a pipeline gets for each of its commands on top
// of the call timeout.
const perCommand = 300 * time.Microsecond

// Bounds of the syncer's Redis traffic (docs/failure-modes.md states them).
const (
	maxInFlight = 8    // Redis calls made at once; a pipeline counts as one
	batchSize   = 1000 // the most tenants in one pipeline
	// breakerFailures failed Redis calls in a row open the circuit
	// breaker: calls then fail at once without reaching Redis, until after
	// an interval one probe call is let through, whose success closes it.
	breakerFailures = 3
)

// lruEntry is a tenant and when it was last active, for eviction.
type lruEntry struct {
	active int64
	t      *Tenant
}

// New returns a Syncer, with no tenants yet, making lease calls through
// client. It starts no goroutine: call Run.
func New(client lease.Store, opts Options) *Syncer {
	if opts.Planner == nil {
		opts.Planner = NewPlanner(Config{}, 0)
	}
	iv := opts.Planner.Config().Interval
	if opts.CallTimeout <= 0 {
		opts.CallTimeout = max(iv/2, 10*time.Millisecond)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.IdleTimeout <= 0 {
		opts.IdleTimeout = time.Minute
	}
	if opts.Defaults.Interval <= 0 {
		opts.Defaults.Interval = iv
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Syncer{
		client:  client,
		planner: opts.Planner,
		opts:    opts,
		urgent:  make(chan *Tenant, 1024),
		sem:     semaphore.NewWeighted(maxInFlight),
		ctx:     ctx,
		cancel:  cancel,
	}
	s.fleet.Store(int64(max(opts.Instances, 0)))
	s.reg.init()
	s.breaker = gobreaker.NewCircuitBreaker[[]lease.Result](gobreaker.Settings{
		Name:    "leasequota-redis",
		Timeout: iv, // then one probe call is let through
		ReadyToTrip: func(c gobreaker.Counts) bool {
			return c.ConsecutiveFailures >= breakerFailures
		},
		// Calls canceled because the limiter is closing say nothing
		// about Redis.
		IsExcluded: func(err error) bool { return errors.Is(err, context.Canceled) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			if to == gobreaker.StateClosed {
				s.broadcastRecovered()
			}
			if opts.OnDegraded == nil {
				return
			}
			switch {
			case to == gobreaker.StateOpen && from == gobreaker.StateClosed:
				var err error
				if p := s.lastErr.Load(); p != nil {
					err = *p
				}
				opts.OnDegraded(true, err)
			case to == gobreaker.StateClosed:
				opts.OnDegraded(false, nil)
			}
		},
	})
	return s
}

// Degraded reports whether the circuit breaker is open or probing: Redis
// calls have been failing.
func (s *Syncer) Degraded() bool {
	if s.opts.Cluster {
		return s.failingTenants.Load() > 0
	}
	return s.breaker.State() != gobreaker.StateClosed
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

// fleetSize returns the number of instances assumed for a tenant whose own
// count is unknown: the largest count a lease call has reported on any
// tenant, or Options.Instances when larger; zero when neither is known.
func (s *Syncer) fleetSize() int { return int(s.fleet.Load()) }

// noteFleet raises the fleet size to n.
func (s *Syncer) noteFleet(n int) { raise(&s.fleet, int64(n)) }

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

// Stats returns the running totals.
func (s *Syncer) Stats() Stats {
	return Stats{
		Calls:     s.calls.Load(),
		Errors:    s.errs.Load(),
		Requested: s.requested.Load(),
		Granted:   s.granted.Load(),
		Returned:  s.returned.Load(),
		Forfeited: s.forfeited.Load(),
		Expired:   s.expired.Load(),
		Evicted:   s.evicted.Load(),
	}
}

// NoteMiss records that a request for n tokens found t short and, the
// first time since t was last planned, queues t for the loop. It never
// blocks: when the queue is full the next tick picks t up.
func (s *Syncer) NoteMiss(t *Tenant, n int64) {
	first := !t.flag(flagUrgent)
	t.NoteMiss(n)
	if first {
		select {
		case s.urgent <- t:
		default:
		}
	}
}

// Run plans and refreshes leases until ctx is done, then returns nil once
// every call its rounds started has finished (see Wait). In Cluster mode,
// calls not started when ctx ends, such as those waiting for their node's
// earlier calls, are not made (their returns are left to ReleaseAll). It is a
// loop of Tick every Interval/4 and Urgent whenever NoteMiss queues a
// tenant; a caller that drives the syncer itself (a deterministic
// simulation) calls those two instead of Run, and Wait.
func (s *Syncer) Run(ctx context.Context) error {
	tick := time.NewTicker(max(s.planner.Config().Interval/4, time.Millisecond))
	defer tick.Stop()
	s.stopping = ctx.Done()
	// A round in flight when ctx ends finishes its calls (each bounded by
	// CallTimeout): canceling them would lose tokens Redis already granted.
	calls := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			s.stopping = nil
			s.Wait()
			return nil
		case <-tick.C:
			s.Tick(calls)
		case t := <-s.urgent:
			s.urgentRound(calls, t)
		}
	}
}

// Tick runs one scheduled round: it polls the quota version when due, then
// plans every tenant and carries the plan out (see Round). Run calls it
// every Interval/4. It must not run concurrently with Urgent, Round,
// Wait or another Tick.
//
// Without Cluster, Tick returns once its calls have finished. In Cluster
// mode it does not wait for the calls (see Round), nor for the quota
// version: it uses the version the last poll read and leaves the next
// poll running, so a quota change is seen a tick later.
func (s *Syncer) Tick(ctx context.Context) {
	tenants := s.reg.all
	if s.opts.Driven {
		tenants = slices.Values(byName(s.reg.all))
	}
	s.round(ctx, tenants, s.pollQuota(ctx, s.opts.Now()))
}

// Urgent runs one round over the tenants that NoteMiss queued, up to
// batchSize of them, and reports whether any was queued. It never blocks
// waiting for one; in Cluster mode it does not wait for the round's calls
// either (see Round). It must not run concurrently with Tick, Round, Wait
// or another Urgent.
func (s *Syncer) Urgent(ctx context.Context) bool {
	select {
	case t := <-s.urgent:
		s.urgentRound(ctx, t)
		return true
	default:
		return false
	}
}

// urgentRound runs a round over first and whatever else is queued, up to
// batchSize tenants.
func (s *Syncer) urgentRound(ctx context.Context, first *Tenant) {
	short := append(s.short[:0], first)
drain:
	for len(short) < batchSize {
		select {
		case t := <-s.urgent:
			short = append(short, t)
		default:
			break drain
		}
	}
	if s.opts.Driven {
		// In name order, once each: the order in which requests queued
		// them is up to the scheduler.
		slices.SortFunc(short, func(a, b *Tenant) int { return cmp.Compare(a.name, b.name) })
		short = slices.Compact(short)
	}
	s.Round(ctx, slices.Values(short))
	clear(short)
	s.short = short[:0]
}

// job is one tenant's lease call in a round; the tenant's lock is held
// from planning until the result is applied.
type job struct {
	t      *Tenant
	want   int64
	demand float64 // tokens per second, reported to Redis for fair shares
}

// Round plans every tenant that tenants yields and carries the plan out:
// expired tokens are taken back and returned, idle tenants evicted (their
// tokens returned), then leases are acquired in pipelines of up to
// batchSize tenants, at most maxInFlight at once. A tenant that is
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
	s.round(ctx, tenants, false)
}

// round is Round, with quotaCheck telling the planner that quotas may
// have changed in Redis.
func (s *Syncer) round(ctx context.Context, tenants iter.Seq[*Tenant], quotaCheck bool) {
	now := s.opts.Now()
	var (
		jobs     []job
		releases []lease.ReleaseRequest
		evict    []*Tenant
	)
	track := s.opts.MaxTenants > 0
	s.lru = s.lru[:0]
	for t := range tenants {
		if t.flag(flagEvicted) || !t.mu.TryLock() {
			continue
		}
		in := t.take(t.tokens.Load())
		in.QuotaCheck = quotaCheck
		a, ret, ok := s.planWith(t, now, in)
		if ok {
			releases = append(releases, ret)
		}
		if a.Acquire > 0 || a.Read {
			jobs = append(jobs, job{t: t, want: a.Acquire, demand: s.planner.ReportedDemand(&t.st, now, a.Acquire)})
			continue // unlocked once the result is applied
		}
		if s.planner.Idle(&t.st, now, s.opts.IdleTimeout) {
			evict = append(evict, t)
		} else if track {
			s.lru = append(s.lru, lruEntry{active: t.st.at(t.st.lastActive), t: t})
		}
		t.mu.Unlock()
	}
	// A refill may be waiting for a lock the planning held (free when
	// nobody waits).
	s.unlocked.Broadcast()
	// Over the cap: evict the least recently active of the tenants with
	// no call in flight. Tenants waiting for a lease count toward the cap
	// too, or a burst of new tenants would stall eviction.
	if over := len(s.lru) + len(jobs) - s.opts.MaxTenants; track && over > 0 {
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
	s.pendingMu.Lock()
	releases = append(releases, s.pending...)
	clear(s.pending)
	s.pending = s.pending[:0]
	s.pendingMu.Unlock()
	if len(releases) == 0 && len(jobs) == 0 {
		return
	}
	ctx, round := s.opts.Telemetry.StartRound(ctx, false)
	if s.opts.Cluster {
		s.dispatch(ctx, round, now, releases, jobs)
		return
	}
	defer s.endRound(round)
	round.Add(s.carryOut(ctx, now, &nodeWork{releases: releases, jobs: jobs}))
}

// carryOut makes a round's calls of w: the returns, then the acquires in
// pipelines of up to batchSize tenants, which it waits for. It returns the
// totals for the round's span.
func (s *Syncer) carryOut(ctx context.Context, now time.Time, w *nodeWork) (tot telemetry.Round) {
	if len(w.releases) > 0 {
		tot.Returned, _ = s.release(ctx, &tot, w.releases)
	}
	if len(w.jobs) == 0 {
		return tot
	}
	if s.opts.Driven {
		// One pipeline after the other, in order.
		for start := 0; start < len(w.jobs); start += batchSize {
			tot.Add(s.acquire(ctx, now, w.jobs[start:min(start+batchSize, len(w.jobs))]))
		}
		return tot
	}
	var g errgroup.Group
	var mu sync.Mutex // guards tot
	for start := 0; start < len(w.jobs); start += batchSize {
		chunk := w.jobs[start:min(start+batchSize, len(w.jobs))]
		g.Go(func() error {
			t := s.acquire(ctx, now, chunk)
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

// evict removes the tenants ts from the registry, then marks them
// evicted and drains their tokens; it returns releases with the returns
// of the drained tokens appended. A tenant whose lock is taken (a lease
// call is in flight for it) is left for a later round.
//
// The order is what keeps readers safe: once a tenant is marked evicted a
// request holding it looks the tenant up again, and that lookup must not
// find the same tenant, or the request would go round in circles. So the
// registry drops the tenants (one step for the whole batch) before any of
// them is marked. A request that loaded a tenant before the removal may
// still spend the tokens it holds until the drain below: they were leased,
// so they are good.
func (s *Syncer) evict(ts []*Tenant, now time.Time, releases []lease.ReleaseRequest) []lease.ReleaseRequest {
	// Each tenant stays locked from here until it is marked, so no lease
	// call starts for it in between.
	locked := ts[:0]
	for _, t := range ts {
		if t.mu.TryLock() {
			locked = append(locked, t)
		}
	}
	ts = locked
	if len(ts) == 0 {
		return releases
	}
	s.reg.remove(ts)
	for _, t := range ts {
		t.setFlag(flagEvicted, true)
		if r, ok := s.drainLocked(t, now); ok {
			releases = append(releases, r)
		}
		t.mu.Unlock()
	}
	s.unlocked.Broadcast()
	s.evicted.Add(int64(len(ts)))
	return releases
}

// drainLocked empties t's counter and returns the release that gives its
// tokens back, if any. t.mu must be held.
func (s *Syncer) drainLocked(t *Tenant, now time.Time) (lease.ReleaseRequest, bool) {
	n := t.tokens.Drain()
	_, oldest, id := s.planner.Drained(&t.st)
	if n <= 0 {
		return lease.ReleaseRequest{}, false
	}
	return s.returnOf(t, n, now, oldest, id), true
}

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
		Age: max(now.Sub(oldest), 0) + s.opts.CallTimeout + perCommand*time.Duration(batchSize), Grant: id}
}

// planWith runs the planner for t (whose lock is held) on what requests
// recorded (in), takes expired tokens back from the counter, and returns
// the action and the release that returns the expired tokens, if any.
func (s *Syncer) planWith(t *Tenant, now time.Time, in Input) (a Action, ret lease.ReleaseRequest, ok bool) {
	a = s.planner.Plan(&t.st, *t.Limits(), now, in)
	if in.Urgent && a.Acquire == 0 && now.Before(t.st.NotBefore()) {
		// Calls are held back (bucket dry or backoff): stay urgent, so the
		// tick retries once allowed, without re-queueing on every miss.
		t.setFlag(flagUrgent, true)
	}
	if a.Expire > 0 {
		taken, left := t.tokens.Take(a.Expire)
		s.planner.Expired(&t.st, taken, left)
		s.expired.Add(taken)
		s.opts.Telemetry.Expired(taken)
		if taken > 0 {
			return a, s.returnOf(t, taken, now, a.ExpiredGranted, a.ExpiredGrant), true
		}
	}
	return a, ret, false
}

// acquire runs one pipeline for jobs and applies the results, unlocking
// each job's tenant. It returns the totals for the round's span.
func (s *Syncer) acquire(ctx context.Context, now time.Time, jobs []job) (tot telemetry.Round) {
	defer func() {
		for _, j := range jobs {
			j.t.mu.Unlock()
		}
		s.unlocked.Broadcast()
	}()
	reqs := make([]lease.Request, len(jobs))
	for i, j := range jobs {
		reqs[i] = lease.Request{Tenant: j.t.name, Limits: j.t.bucket(), Want: j.want, Demand: j.demand}
	}
	results, err := s.call(ctx, telemetry.OpAcquire, len(reqs), func(ctx context.Context) ([]lease.Result, error) {
		return s.client.AcquireMany(ctx, reqs, nil)
	})
	tot.Calls = 1
	for i, j := range jobs {
		var r lease.Result
		if err != nil {
			r.Err = err
		} else {
			r = results[i]
		}
		s.apply(ctx, j.t, now, j.want, r)
		tot.Tenants++
		tot.Requested += j.want
		if r.Err != nil {
			tot.Failed++
		} else {
			tot.Granted += r.Grant.Granted
		}
	}
	return tot
}

// call runs one Redis round trip of op (size commands) under the
// concurrency bound, the call deadline and the circuit breaker, in a span.
// f's error must be a failure of the round trip as a whole (Redis not
// answering), not an error reply about one tenant: only the former trips
// the breaker.
func (s *Syncer) call(ctx context.Context, op string, size int, f func(context.Context) ([]lease.Result, error)) ([]lease.Result, error) {
	if err := s.sem.Acquire(ctx, 1); err != nil {
		return nil, err
	}
	defer s.sem.Release(1)
	// A pipeline of many commands queues behind the others in Redis'
	// single thread: give it time for its size (about 15µs of Redis CPU
	// per script call, with margin) on top of the call deadline.
	ctx, cancel := context.WithTimeout(ctx, s.opts.CallTimeout+time.Duration(size)*perCommand)
	defer cancel()
	ctx, span := s.opts.Telemetry.StartCall(ctx, op, size)
	if s.opts.Cluster || s.closing() {
		// Closing: the last returns are worth a try whatever the breaker
		// says, or the tokens are lost for a refill.
		s.calls.Add(1)
		res, err := f(ctx)
		span.End(err)
		return res, err
	}
	res, err := s.breaker.Execute(func() ([]lease.Result, error) {
		s.calls.Add(1)
		res, err := f(ctx)
		if err != nil {
			s.lastErr.Store(&err)
		}
		return res, err
	})
	span.End(err)
	return res, err
}

// wholeFailure returns err when it means Redis did not answer (as opposed
// to an error reply about one command), else nil.
func wholeFailure(err error) error {
	var rerr redis.Error
	if err == nil || errors.As(err, &rerr) || errors.Is(err, lease.ErrBadRequest) || errors.Is(err, lease.ErrBadReply) {
		return nil
	}
	return err
}

// apply records the result of a lease call for t, whose lock is held.
func (s *Syncer) apply(ctx context.Context, t *Tenant, now time.Time, want int64, r lease.Result) {
	s.requested.Add(want)
	if r.Err != nil {
		s.errs.Add(1)
		s.planner.Failed(&t.st, now)
		t.retryAt.Store(t.st.at(t.st.notBefore))
		rate, capacity := s.planner.FallbackRate(&t.st, *t.Limits(), now, s.fleetSize())
		if fb := t.fallback.Load(); fb != nil {
			fb.SetRate(now, rate)
		} else {
			// Start empty: the lease just spent was this instance's share.
			fb = &bucket.TokenBucket{}
			fb.Reset(now, capacity, rate, 0)
			t.fallback.Store(fb)
		}
		s.setFailing(t, true, r.Err)
		return
	}
	if t.flag(flagEvicted) {
		// Evicted while the call was in flight: nobody will spend these.
		s.release(ctx, nil, []lease.ReleaseRequest{s.returnOf(t, r.Grant.Granted, s.opts.Now(), now, r.Grant.ID())})
		return
	}
	g := r.Grant
	s.setOverride(t, g.Override)
	level := t.tokens.Add(g.Granted)
	s.granted.Add(g.Granted)
	s.planner.Granted(&t.st, *t.Limits(), now, want, g, level)
	if g.Instances > 0 {
		s.noteFleet(g.Instances)
	}
	t.emptyAt.Store(now.UnixNano() - int64(durationCeil(g.Tokens/t.Limits().Rate)))
	t.retryAt.Store(t.st.at(t.st.notBefore))
	t.setFlag(flagLeased, true)
	s.setFailing(t, false, nil)
	t.fallback.Store(nil)
	s.opts.Telemetry.LeaseGranted(ctx, t.name, want, g.Granted, level, g.Tokens)
}

// setOverride applies the quota override a lease call reported for t
// (whose lock is held): nil means none, and the tenant's base limits
// apply. An override is resolved with Options.Defaults, as a configured
// quota is with the limiter's; its limits are replaced only when the
// resolved quota changed.
func (s *Syncer) setOverride(t *Tenant, o *lease.Override) {
	cur := t.limits.Load()
	base := cur.baseOf()
	if o == nil {
		if cur != base {
			t.limits.Store(base)
		}
		return
	}
	if q := s.opts.Defaults.Resolve(quota.FromOverride(*o)); q != cur.Quota {
		t.limits.Store(&limits{Quota: q, base: base})
	}
}

// release returns tokens to Redis. Redis credits each return only with
// what the bucket would hold had the tokens never been leased (an aged
// return); the rest, and tokens whose release fails, are forfeited: lost
// to the global bucket until it refills, which costs utilization, never
// the bound. It returns the tokens credited (rounded down), and counts a
// call per pipeline in round (which may be nil).
func (s *Syncer) release(ctx context.Context, round *telemetry.Round, reqs []lease.ReleaseRequest) (int64, error) {
	var (
		errs     []error
		returned int64
	)
	for start := 0; start < len(reqs); start += batchSize {
		chunk := reqs[start:min(start+batchSize, len(reqs))]
		_, err := s.call(ctx, telemetry.OpRelease, len(chunk), func(ctx context.Context) ([]lease.Result, error) {
			var whole error
			answered := false
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
		if round != nil {
			round.Calls++
		}
		if err != nil && len(errs) == 0 {
			errs = append(errs, err)
		}
	}
	return returned, errors.Join(errs...)
}

// Refill makes an urgent lease call for t now, joining one already in
// flight for the same tenant. The channel yields the call's error (nil
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
	defer s.unlocked.Broadcast() // after the unlock below
	defer t.mu.Unlock()
	return s.refillLocked(s.ctx, link, t, need)
}

// refillLocked is the urgent lease call of a refill for t, whose lock is
// held; ctx is the lifetime of the call (s.ctx from a refill's own
// goroutine; the step's in driven mode).
func (s *Syncer) refillLocked(ctx context.Context, link trace.Link, t *Tenant, need int64) error {
	if t.flag(flagEvicted) {
		return nil
	}
	now := s.opts.Now()
	in := t.take(t.tokens.Load())
	in.Urgent = true
	in.Need = max(in.Need, need)
	// Redis answers again (the breaker closed after this tenant's calls
	// failed): a waiting request need not sit out the tenant's backoff.
	in.Recovered = t.flag(flagFailing) && !s.opts.Cluster && s.breaker.State() == gobreaker.StateClosed
	a, ret, ok := s.planWith(t, now, in)
	if ok {
		// Returned by the next round: not worth a round trip here, where
		// requests wait for the acquire.
		s.pendingMu.Lock()
		s.pending = append(s.pending, ret)
		s.pendingMu.Unlock()
	}
	if a.Acquire == 0 && !a.Read {
		return nil
	}
	var links []trace.Link
	if link.SpanContext.IsValid() {
		links = append(links, link)
	}
	ctx, round := s.opts.Telemetry.StartRound(ctx, true, links...)
	defer s.endRound(round)
	var r lease.Result
	_, err := s.call(ctx, telemetry.OpAcquire, 1, func(ctx context.Context) ([]lease.Result, error) {
		r.Grant, r.Err = acquireOne(ctx, s.client, lease.Request{Tenant: t.name, Limits: t.bucket(), Want: a.Acquire, Demand: s.planner.ReportedDemand(&t.st, now, a.Acquire)})
		return nil, wholeFailure(r.Err)
	})
	if err != nil {
		r.Err = err
	}
	s.apply(ctx, t, now, a.Acquire, r)
	round.Add(telemetry.Round{Tenants: 1, Calls: 1, Requested: a.Acquire, Granted: r.Grant.Granted})
	if r.Err != nil {
		round.Failed++
	}
	return r.Err
}

// closing reports whether Close has been called.
func (s *Syncer) closing() bool { return s.ctx.Err() != nil }

// Close stops urgent refills and waits for those running, and for the
// calls rounds left running (see Wait); later rounds finish their calls
// before returning. It does not stop Run: cancel Run's context for that.
// In driven mode it answers the queued refills with ErrClosed, and the
// caller delivers the answers (Deliver) after ReleaseAll.
func (s *Syncer) Close() {
	s.closeMu.Lock()
	s.closed = true
	s.closeMu.Unlock()
	s.cancel()
	s.inflight.Wait()
	s.async.Wait()
	if s.opts.Driven {
		s.closeDriven()
	}
}

// ReleaseAll drains every tenant's tokens and returns them to Redis. Call
// it after Run has returned and Close, so nothing refills behind it. Its
// calls bypass the circuit breaker: they are the last chance to return
// the tokens.
func (s *Syncer) ReleaseAll(ctx context.Context) error {
	var reqs []lease.ReleaseRequest
	now := s.opts.Now()
	tenants := s.reg.all
	if s.opts.Driven {
		tenants = slices.Values(byName(s.reg.all))
	}
	for t := range tenants {
		t.mu.Lock()
		if r, ok := s.drainLocked(t, now); ok {
			reqs = append(reqs, r)
		}
		t.mu.Unlock()
	}
	s.pendingMu.Lock()
	reqs = append(reqs, s.pending...)
	s.pending = nil
	s.pendingMu.Unlock()
	if len(reqs) == 0 {
		return nil
	}
	ctx, round := s.opts.Telemetry.StartRound(ctx, false)
	defer s.endRound(round)
	var err error
	round.Returned, err = s.release(ctx, round, reqs)
	return err
}
