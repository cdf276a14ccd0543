package syncer

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sony/gobreaker/v2"
	"golang.org/x/sync/singleflight"

	"github.com/leasequota/leasequota/internal/monoclock"
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
	// CallTimeout is the deadline of every Redis call; default Interval/2,
	// at least 10ms.
	CallTimeout time.Duration
	// Now is the clock: lease lifetimes, schedules, reservations and rate
	// shares are timed by it. It must not step: a step back keeps leases
	// that much longer, a step forward makes reserved and shared tokens
	// come due early (TestSyncerClockStepBackKeepsLeases,
	// TestShareClockStep). Default monoclock.New(time.Now()), which does
	// not step with the wall clock.
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
	// evicted (its tokens returned); default 1 minute. A tenant holding a
	// rate share is kept until the share is ended or past its end
	// (Syncer.sharing).
	IdleTimeout time.Duration
	// MaxTenants, when positive, is the most tenants kept: each round
	// evicts the least recently active beyond it.
	MaxTenants int
	// Instances is the number of instances expected to share the tenants,
	// for the first lease (Input.Fleet) and the fallback rate (see
	// Planner.FallbackRate) of tenants whose own count is unknown until a
	// lease call reports a count; zero means unknown (1).
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

	// PerCPUDemand, when positive, is the demand (tokens a second at this
	// instance) at or above which a tenant's leased tokens are kept in one
	// slot per P (bucket.Counter.Stripe), while they are spent from more
	// than one P (see Syncer.spread); 0 never.
	PerCPUDemand float64

	// Defaults resolve the quota overrides that Redis reports
	// (quota.Defaults.Resolve): the limiter's default LeaseTTL and
	// FailureMode. A zero Interval means the Planner's; a zero LeaseTTL,
	// the shortest allowed (quota.MinLeaseTTL).
	Defaults quota.Defaults
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

	// Safe for concurrent use on their own.
	urgent  chan *Tenant                              // tenants that ran short (NoteMiss); never blocks a sender
	sf      singleflight.Group                        // joins concurrent refills of a tenant (refill.go)
	breaker *gobreaker.CircuitBreaker[[]lease.Result] // health.go
	lastErr atomic.Pointer[error]                     // last error of a Redis call, for OnDegraded
	// refusedWrites says a reply by which Redis runs no command
	// (unavailable: READONLY, NOREPLICAS, ...) failed a call since the
	// breaker last closed: set by call, cleared when the breaker closes.
	// While it is set, only a write that runs ends the outage: the read
	// probe writes too (probeWrite), and a probe that timed out is not
	// taken for a busy Redis (newBreaker's IsSuccessful). Why not the
	// last error alone: one call that timed out in such an outage (a
	// redis-server starved of CPU) made it the last, and then the read,
	// which the replica answers, or the timed-out probe itself closed the
	// breaker while every write was still refused
	// (TestReadOnlyOutageOutlivesATimeout in the root package).
	refusedWrites atomic.Bool
	// one is the Redis this instance calls (its call budget and last
	// answer; redisnode.go) or, in Cluster mode, the stand-in for the
	// node of a tenant whose node is unknown.
	one redisNode
	// starved is the process's own delays to run, which a silence of
	// Redis does not count (starvation; unread in driven mode).
	starved starvation
	// nodes holds, in Cluster mode, each master's redisNode by address
	// (NodeOf): a busy master cuts its own window, not the others'.
	nodes sync.Map
	// nodesForgot is when (unix nanoseconds) node last ran forgetNodes.
	nodesForgot atomic.Int64
	// nodesMu serializes forgetNodes and windows, so that a forgotten
	// node's cuts move to cutsForgot (guarded by it) unseen by Stats.
	nodesMu    sync.Mutex
	cutsForgot int64
	// leaseTTL is the default lease TTL, as Options.Defaults resolves it:
	// how long a reply may take before it is congestion
	// (congestedAfter), and with MaxDownAfter how long Redis may be
	// silent before it is down (downAfter).
	leaseTTL time.Duration

	// acquireBufs holds *acquireBuf: the requests and results of an
	// acquire pipeline, reused by the next (acquire). A pool, not a
	// field of the loop's: a round's pipelines run at once, and in
	// Cluster mode outlive the round.
	acquireBufs sync.Pool

	// awake is the tenants a tick visits (awake.go): added to by
	// whoever makes or revives a tenant or wakes a dormant one, the rest
	// the loop's own.
	awake awake

	// Owned by the loop (Run and Round are not called concurrently).
	lru           []lruEntry // reused by Round when MaxTenants is set
	short         []*Tenant  // reused by Urgent
	lockedRefunds []string   // reused by Round: tenants it found locked with a refund's return queued
	// admitKeys and admitLate are reused by admit: a round under a cut
	// window sorts keys of its planned calls every time.
	admitKeys, admitLate []uint64
	// planned, admitted and refused are reused by round (its planned
	// calls) and admit (those that got room in the call budget, and those
	// that did not), cleared after each round so that they keep no
	// tenant alive: grown afresh every round, these slices took 0.6 s of
	// the 21 s of CPU in a profile of BenchmarkFleet/32x2000.
	planned, admitted, refused []job
	chunk                      chunk // the tenants a round reads ahead of planning them, empty between rounds
	quotaVer                   int64 // the quota version last seen
	quotaPolled                int64 // unix nanoseconds of the last poll of it
	quotaKnown                 bool  // quotaVer has been read once
	// quotaMoved is whether the last read of the quota version found it
	// moved from a version read before: not the first read, nor one that
	// failed (written and read by the loop: pollQuota, round).
	quotaMoved bool
	// quotaSeen is when (unix nanoseconds) the last read of the quota
	// version that found it moved (quotaMoved) ended: a lease call planned
	// before may have run in Redis before the change (Input.QuotaSeen).
	quotaSeen atomic.Int64
	// nodeDone is closed when the last round's work on the node is done
	// (Cluster mode; see dispatch).
	nodeDone map[string]chan struct{}
	// stopping is Run's ctx.Done(), nil outside Run: once it is closed,
	// node work still waiting for its turn is dropped (Cluster mode; see
	// dispatch).
	stopping <-chan struct{}
	// closeBegun is set by BeginClose: a refill that has sent nothing yet
	// sends nothing, and a Cluster look-up waits for no slot map (see
	// BeginClose).
	closeBegun atomic.Bool

	poll quotaPoll // the quota version's poll beside the rounds (but driven, without Cluster)

	// lastBase is the base limits Track made last: tenants of the same
	// quota share them (see baseLimits).
	lastBase atomic.Pointer[limits]

	pendingMu sync.Mutex     // guards pending and released
	pending   []queuedReturn // returns left to a later round: refunds', urgent refills', a dropped node's
	// released says ReleaseAll took the queue of returns: a return queued
	// after it would be made by nobody (queue refuses it).
	released bool

	ctx    context.Context // lifetime of urgent refills, ended by Close
	cancel context.CancelFunc

	closeMu  sync.RWMutex   // guards closed against inflight.Add and async.Add
	closed   bool           //
	inflight sync.WaitGroup // urgent refills running
	// async counts what rounds left running: in Cluster mode node groups
	// of calls (dispatch), and quota version polls (pollQuotaAsync). Only
	// the loop adds to it.
	async sync.WaitGroup

	// clock is the time of the latest plan (unix nanoseconds): a request
	// notes it with its admission, so that a refund can bound how long
	// ago its tokens were granted (see Refund).
	clock atomic.Int64
	// ttlFell holds the LeaseTTLs that tenants' quotas fell from, or
	// evicted tenants had (a re-tracked one may resolve a shorter one),
	// each with until when a refund whose admission noted a clock before
	// it must count that TTL in its age (noteTTLFell, leaseTTLOf). nil
	// before the first.
	ttlFell atomic.Pointer[ttlWindows]
	// plans counts the plans made (planWith), wrapping: a request notes
	// it with its admission, so that a give-back can tell whether any
	// tenant was planned since the spend (Unspend).
	plans atomic.Uint32

	// down is whether the circuit breaker is not closed (open or
	// probing), as its OnStateChange last said: Down reads it.
	down atomic.Bool
	// breakerTried is when (unix nanoseconds) a lease call last went to
	// the circuit breaker (call): while none has for an interval, the
	// read of the quota version probes it (readQuota).
	breakerTried atomic.Int64
	// breakerOpened is when (unix nanoseconds, Options.Now) the circuit
	// breaker last opened: it lets a probe through an interval after
	// (breakerOpen).
	breakerOpened atomic.Int64

	// Running totals (Stats).
	refunded                                                               atomic.Int64 // tokens refunded (Refund)
	calls, errs, requested, granted, returned, forfeited, expired, evicted atomic.Int64
	heldBack                                                               atomic.Int64 // acquires the budget held back (holdBack)
	reserved, dripped                                                      atomic.Int64 // reserved tokens granted, and come due
	failingTenants                                                         atomic.Int64 // Cluster mode: tenants whose last call failed

	// fleet is the largest number of instances a lease call has reported
	// on any tenant (at least Options.Instances): the fleet size assumed
	// for a tenant whose own count is unknown.
	fleet atomic.Int64
	// roster is the fleet's roster as this instance last counted it
	// (roster.go).
	roster fleetRoster

	// recovered is closed, and replaced by a new channel, each time lease
	// calls succeed again after failing (the breaker closes; in Cluster
	// mode, a failing tenant's call succeeds): requests waiting through an
	// outage wake on it.
	recovered signal
	// driven is the state of driven mode (Options.Driven).
	driven driven

	// tickEpoch is when Run's ticker started (unix nanoseconds of
	// Options.Now; 0 before Run, and in driven mode): its ticks, the
	// rounds that make a held-back tenant's call, come every tickEvery
	// after it (nextTick).
	tickEpoch atomic.Int64

	// busyProbe says the breaker's last success was a probe that timed
	// out on a busy Redis (newBreaker's IsSuccessful): the breaker closes
	// on it, but the call window keeps the cuts made since the outage.
	// Read and written only by the breaker's callbacks, which run under
	// the breaker's lock.
	busyProbe bool

	// unlocked is broadcast after tenants' locks are released (a lease
	// call's result applied, a round planned, an eviction done): a refill
	// that finds its tenant locked waits on it instead of on the lock,
	// which may be held across a network call.
	unlocked signal
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
		opts.Now = monoclock.New(time.Now())
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
		ctx:     ctx,
		cancel:  cancel,
	}
	s.roster.counter, _ = client.(lease.InstanceCounter)
	s.fleet.Store(int64(max(opts.Instances, 0)))
	s.reg.init()
	s.one.init(opts.Now())
	if !opts.Driven {
		s.starved.init(opts.CallTimeout, opts.Now())
	}
	s.breaker = s.newBreaker(iv)
	s.leaseTTL = opts.Defaults.Resolve(quota.Quota{}).LeaseTTL
	return s
}

// closing reports whether Close has been called.
func (s *Syncer) closing() bool { return s.ctx.Err() != nil }

// BeginClose tells the syncer that its owner is closing, before it stops
// Run and calls Close: from then on an urgent refill that has not sent
// its lease call makes none (its tokens would only be returned by
// ReleaseAll), and in Cluster mode a look-up of a tenant's master (after
// a failed call, or before a refill's call) makes no round trip to load
// the slot map, answering from the map go-redis has. Why: Close waits for
// a refill in flight, whose master's look-up, lease call and look-up after
// a failed call were each bounded by CallTimeout, one after the other,
// and for a refill waiting for its tenant's lock behind a round's call:
// on a cluster that answers nothing Close took 975 ms with a 200 ms
// CallTimeout, where docs/design.md says a dead master delays Close by
// one deadline (TestClusterCloseWaitsOneDeadlineForARefill). Now Close
// waits for the one look-up or call in flight when it began.
func (s *Syncer) BeginClose() { s.closeBegun.Store(true) }

// lookupCtx is ctx for a look-up of a tenant's master: done once
// BeginClose was called, so that the look-up answers from the slot map
// go-redis has, without waiting to load one (see BeginClose).
func (s *Syncer) lookupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if s.closeBegun.Load() {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx, cancel
	}
	return context.WithTimeout(ctx, s.opts.CallTimeout)
}

// Close refuses new urgent refills and waits for those running, whose
// lease calls it does not cancel (each is bounded by CallTimeout), and for
// the calls rounds left running (see Wait); later rounds finish their
// calls before returning. It does not stop Run: cancel Run's context for that.
// Call BeginClose before stopping Run, so that refills not yet sent wait
// for nothing.
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
