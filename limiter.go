package leasequota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
	"github.com/leasequota/leasequota/telemetry"
)

// Limiter enforces per-tenant quotas across every instance that shares its
// Redis. Decisions are made from tokens leased in advance; a background
// syncer keeps the leases topped up. A Limiter is safe for concurrent use
// by any number of goroutines; make one per process and Close it when done.
type Limiter struct {
	cfg      config
	leases   lease.Store
	sync     *syncer.Syncer
	instance string         // this limiter's id in Redis' instance registries
	defaults quota.Defaults // what a quota's zero fields mean here
	defQuota Quota          // the default quota, resolved

	tel    *telemetry.Telemetry
	stop   context.CancelFunc // ends the syncer's loop
	group  errgroup.Group     // runs the syncer's loop
	closed atomic.Bool
	ready  atomic.Bool // sync is set: telemetry may collect

	// decisions counts the decisions made off the hot path, by reason and
	// outcome ([reason][1] admitted, [reason][0] denied). Admissions from
	// a lease are counted per tenant (syncer.Tenant.Admits).
	decisions [numReasons][2]atomic.Int64
	turns     turnCount // for tests: see decide

	closeOnce sync.Once
	closeErr  error
}

// New returns a Limiter that keeps its global buckets in client and starts
// its syncer. client may be a *redis.Client, a *redis.ClusterClient, a
// failover client or any redis.UniversalClient; New does not contact
// Redis. Invalid options give an error wrapping ErrInvalidOption or
// ErrInvalidQuota that names the option or field.
func New(client redis.UniversalClient, opts ...Option) (*Limiter, error) {
	if client == nil {
		return nil, fmt.Errorf("%w: nil redis client", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	warnContextTimeout(cfg.logger, client)
	return newLimiter(cfg, redisBackend{client, cfg.keyPrefix}, isCluster(client))
}

// A Backend keeps the global buckets of the Limiters made by NewWithStore.
// It gives each Limiter its own view of them: Instance returns the view of
// the instance id, which counts as active on a tenant for window after
// each acquire. *memstore.Store (package lease/memstore) is the in-process
// Backend: the same semantics as Redis, in one process.
type Backend interface {
	Instance(id string, window time.Duration) (lease.Store, error)
}

// NewWithStore returns a Limiter that keeps its global buckets in b
// instead of Redis, and starts its syncer. With a *memstore.Store, every
// Limiter made on the same store shares its buckets as Limiters on one
// Redis do: for unit tests and single-process programs that need no
// Redis. WithKeyPrefix does not apply (the store has no key space); every
// other option does. Invalid options give the errors of New.
func NewWithStore(b Backend, opts ...Option) (*Limiter, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: nil Backend", ErrInvalidOption)
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return newLimiter(cfg, b, false)
}

// redisBackend is the Backend of a Limiter made by New: a lease.Client
// per instance on the user's Redis client.
type redisBackend struct {
	client redis.UniversalClient
	prefix string
}

func (r redisBackend) Instance(id string, window time.Duration) (lease.Store, error) {
	c, err := lease.NewClient(r.client, r.prefix, lease.WithInstance(id, window))
	if err != nil {
		return nil, fmt.Errorf("%w: WithKeyPrefix(%q): %s", ErrInvalidOption, r.prefix, stripPrefixes(err.Error()))
	}
	return c, nil
}

// newConfig applies opts to the defaults and validates the result.
func newConfig(opts []Option) (config, error) {
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return cfg, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		o(&cfg)
	}
	return cfg, cfg.validate()
}

// newLimiter builds a Limiter on the view of b that its instance id gets,
// and starts its syncer (unless cfg says a caller drives it). cluster says
// the tenants live on several nodes (see syncer.Options.Cluster).
func newLimiter(cfg config, b Backend, cluster bool) (*Limiter, error) {
	l := &Limiter{cfg: cfg, instance: cfg.instanceID}
	if l.instance == "" {
		var id [8]byte
		rand.Read(id[:])
		l.instance = hex.EncodeToString(id[:])
	}
	// An instance counts as active on a tenant for two lease lifetimes
	// after its last acquire: a busy instance re-acquires at least once
	// per lifetime.
	window := 2*cfg.leaseTTL + cfg.refreshInterval
	store, err := b.Instance(l.instance, window)
	if err != nil {
		if !errors.Is(err, ErrInvalidOption) {
			err = fmt.Errorf("leasequota: Backend.Instance: %w", err)
		}
		return nil, err
	}
	l.leases = store
	l.defaults = cfg.quotaDefaults()
	if cfg.defaultQuota != nil {
		l.defQuota = l.defaults.Resolve(*cfg.defaultQuota)
	}
	seed := mrand.Uint64()
	if cfg.seed != nil {
		seed = *cfg.seed
	}
	var attrs []attribute.KeyValue
	if cfg.name != "" {
		attrs = append(attrs, attribute.String("leasequota.limiter", cfg.name))
	}
	l.tel, err = telemetry.New(telemetry.Config{
		MeterProvider:  cfg.meterProvider,
		TracerProvider: cfg.tracerProvider,
		Logger:         cfg.logger,
		// The SDK may collect before New has finished: collect only once
		// the syncer is set (ready is stored after it).
		Collect: func(s *telemetry.Snapshot) {
			if l.ready.Load() {
				l.collect(s)
			}
		},
		Attributes: attrs,
	})
	if err != nil {
		return nil, fmt.Errorf("leasequota: creating instruments: %w", err)
	}
	planner := syncer.NewPlanner(syncer.Config{Interval: cfg.refreshInterval}, seed)
	l.sync = syncer.New(store, syncer.Options{
		Planner:     planner,
		CallTimeout: cfg.redisTimeout,
		OnDegraded:  l.onDegraded,
		IdleTimeout: cfg.idleTimeout,
		Instances:   cfg.expectedInstances,
		Now:         cfg.now,
		MaxTenants:  cfg.maxTenants,
		Cluster:     cluster,
		Telemetry:   l.tel,
		Defaults:    l.defaults,
		// A caller that drives the loop (the simulation) replays exactly.
		Driven: cfg.manualSync,
	})
	l.ready.Store(true)
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	if !cfg.manualSync {
		l.group.Go(func() error { return l.sync.Run(ctx) })
	}
	return l, nil
}

// warnContextTimeout warns when the client ignores context deadlines:
// go-redis then waits for its own read and write timeouts (3 s by
// default), not for WithRedisTimeout.
func warnContextTimeout(logger *slog.Logger, client redis.UniversalClient) {
	var enabled bool
	switch c := client.(type) {
	case *redis.Client:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		enabled = c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		enabled = c.Options().ContextTimeoutEnabled
	default:
		return // unknown client: nothing to check
	}
	if !enabled {
		logger.Warn("leasequota: the Redis client has ContextTimeoutEnabled false, so Redis calls wait for the client's own read/write timeouts instead of WithRedisTimeout; set ContextTimeoutEnabled: true in its options")
	}
}

// isCluster reports whether client spreads keys over several nodes.
func isCluster(client redis.UniversalClient) bool {
	_, ok := client.(*redis.ClusterClient)
	return ok
}

// onDegraded logs a change of the limiter's Redis health, once per change.
func (l *Limiter) onDegraded(degraded bool, err error) {
	if degraded {
		l.cfg.logger.Warn("leasequota: Redis unreachable, leases are not refreshed; tenants whose lease is spent follow their failure mode",
			"mode", l.cfg.failureMode.String(), "error", err)
		return
	}
	l.cfg.logger.Info("leasequota: Redis reachable again, leasing resumed")
}

// Degraded reports whether Redis calls are failing (the circuit breaker is
// open or probing).
func (l *Limiter) Degraded() bool { return l.sync.Degraded() }

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
// one map read, one compare-and-swap and one atomic add (the decision
// count): no lock, allocation, clock read or network call. Otherwise it
// tells the syncer (without blocking) and:
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
			if ok, left := t.Spend(n); ok {
				return Decision{Allowed: true, Remaining: left, Quota: *lim, Reason: ReasonLeased}
			}
		}
	}
	d, _ := l.decide(ctx, tenant, t, n, false)
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
	return l.decide(ctx, tenant, l.sync.Tenant(tenant), n, true)
}

// decide is the slow path of AllowN (untilAdmitted false) and WaitN
// (true): everything but a request that its tenant's lease covers. e is
// the tenant as the caller found it, or nil.
//
// It is one loop. Each turn either returns or waits (for a lease call, a
// sleep, or ctx); it looks the tenant up again only when it was evicted,
// and the syncer never hands out an evicted tenant. So it never
// recurses and never spins: turns are bounded by waits (turns counts them
// for tests).
func (l *Limiter) decide(ctx context.Context, tenant string, e *syncer.Tenant, n int64, untilAdmitted bool) (Decision, error) {
	var (
		sl     sleeper
		waits  int64
		cold   bool     // the tenant had no lease here when the first wait began
		budget struct { // AllowN: its wait, bounded by its limit and ctx; nil before the first
			ctx    context.Context
			cancel context.CancelFunc
		}
	)
	defer func() {
		sl.stop()
		if budget.cancel != nil {
			budget.cancel()
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
				if errors.Is(err, syncer.ErrTooManyTenants) && untilAdmitted {
					// Eviction is catching up: look again next round.
					waits++
					if err := sl.sleep(ctx, l.cfg.refreshInterval, nil); err != nil {
						return l.count(Decision{Quota: q, Reason: ReasonTooManyTenants}), waitError(tenant, n, err)
					}
					continue
				}
				return l.refuse(tenant, n, q, err, untilAdmitted)
			}
		}
		lim := e.Limits()
		if n <= 0 || n > lim.Burst {
			return l.invalidN(tenant, n, *lim, untilAdmitted)
		}
		if waits == 0 {
			if ok, left := e.Spend(n); ok {
				return Decision{Allowed: true, Remaining: left, Quota: *lim, Reason: ReasonLeased}, nil
			}
			cold = !e.Leased()
		} else if ok, left := e.SpendWaited(n); ok {
			return l.admitted(e.Limits(), left, cold), nil
		}
		if e.Failing() {
			// Redis is failing for the tenant: its failure mode decides.
			d := l.degraded(e, n)
			if d.Allowed || !untilAdmitted {
				l.sync.NoteMiss(e, n)
				return l.count(d), nil
			}
			// WaitN waits through the outage: until the fallback bucket
			// may admit, the tenant's next lease call, or Redis answering
			// again, whichever comes first; then it asks for a lease.
			waits++
			if err := sl.sleep(ctx, d.RetryAfter, l.sync.Recovered()); err != nil {
				return l.count(d), unavailableError(tenant, n, err)
			}
			select {
			case <-l.sync.Refill(ctx, e, n):
			case <-ctx.Done():
				return l.count(l.degraded(e, n)), unavailableError(tenant, n, ctx.Err())
			}
			continue
		}
		wctx := ctx
		if !untilAdmitted {
			if budget.ctx == nil {
				limit := l.cfg.maxWait
				if cold {
					limit = l.cfg.coldStartWait
				}
				if limit <= 0 {
					// The denial first: once the syncer is told, a lease
					// may land before the denial reads the tenant.
					d := l.deny(e, n)
					l.sync.NoteMiss(e, n)
					return l.count(d), nil
				}
				budget.ctx, budget.cancel = context.WithTimeout(ctx, limit)
			}
			wctx = budget.ctx
		}
		if waits == 0 {
			// The wait below makes the urgent call itself: record the miss
			// without queueing the tenant for the loop too.
			e.NoteMiss(n)
		}
		// Ask for an urgent refill (joining one in flight) and wait for it.
		waits++
		select {
		case <-l.sync.Refill(wctx, e, n):
		case <-wctx.Done():
			return l.gaveUp(ctx, tenant, e, n, untilAdmitted)
		}
		if ok, left := e.SpendWaited(n); ok {
			return l.admitted(e.Limits(), left, cold), nil
		}
		if e.Failing() || e.Evicted() || l.closed.Load() {
			continue // the top of the loop says what now
		}
		// Still short: the global bucket is dry. Sleep until the syncer
		// may call again.
		if err := sl.sleep(wctx, max(e.RetryAfter(l.cfg.now(), n), time.Millisecond), nil); err != nil {
			return l.gaveUp(ctx, tenant, e, n, untilAdmitted)
		}
	}
}

// admitted is the admission of a request that waited for its tokens and
// spent them, leaving left: cold says it waited for the tenant's first
// lease here. lim is read after the wait: the lease call may have brought
// a quota override.
func (l *Limiter) admitted(lim *Quota, left int64, cold bool) Decision {
	d := Decision{Allowed: true, Remaining: left, Quota: *lim, Reason: ReasonRefilled}
	if cold {
		d.Reason = ReasonColdStart
	}
	return l.count(d)
}

// gaveUp is the answer of a wait for e's tokens that ran out of time: for
// AllowN (its wait budget spent, or ctx done) the decision Redis' state
// calls for; for WaitN the denial and ctx's error.
func (l *Limiter) gaveUp(ctx context.Context, tenant string, e *syncer.Tenant, n int64, untilAdmitted bool) (Decision, error) {
	if l.closed.Load() {
		return l.count(Decision{Quota: quotaOf(e), Reason: ReasonClosed}), l.errClosed(untilAdmitted)
	}
	if e.Failing() && !untilAdmitted {
		return l.count(l.degraded(e, n)), nil
	}
	d := l.count(l.deny(e, n))
	if !untilAdmitted {
		return d, nil
	}
	return d, waitError(tenant, n, context.Cause(ctx))
}

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
	return d, fmt.Errorf("%w (WaitN of %d for tenant %q)", err, n, truncate(tenant))
}

// invalidN answers a request for n tokens that can never be admitted.
func (l *Limiter) invalidN(tenant string, n int64, q Quota, untilAdmitted bool) (Decision, error) {
	d := l.count(Decision{Quota: q, Reason: ReasonInvalidN})
	switch {
	case !untilAdmitted:
		return d, nil
	case n <= 0:
		return d, fmt.Errorf("%w: WaitN(%q, %d)", ErrInvalidN, truncate(tenant), n)
	default:
		return d, fmt.Errorf("%w: WaitN(%q, %d): Burst is %d", ErrExceedsBurst, truncate(tenant), n, q.Burst)
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

// waitError is WaitN's error when its wait ends without an admission.
func waitError(tenant string, n int64, err error) error {
	return fmt.Errorf("leasequota: WaitN(%q, %d): %w", truncate(tenant), n, err)
}

// unavailableError is WaitN's error when its ctx ended while Redis could
// not be reached: it wraps both ErrUnavailable and ctx's error.
func unavailableError(tenant string, n int64, err error) error {
	return fmt.Errorf("%w: WaitN(%q, %d) waited for Redis until: %w", ErrUnavailable, truncate(tenant), n, err)
}

// track returns the tenant, which the syncer tracks from now on; never an
// evicted one. When the tenant's quota is invalid it returns the quota and
// an error wrapping ErrInvalidQuota, and tracks nothing; when the syncer
// tracks too many tenants, syncer.ErrTooManyTenants.
func (l *Limiter) track(tenant string) (*syncer.Tenant, Quota, error) {
	if t := l.sync.Tenant(tenant); t != nil {
		return t, quotaOf(t), nil
	}
	q, err := l.baseQuota(tenant)
	if err != nil {
		return nil, q, err
	}
	t, err := l.sync.Track(tenant, q)
	if err != nil {
		return nil, q, err
	}
	return t, quotaOf(t), nil
}

// quotaOf returns the quota applied to t now, defaults resolved.
func quotaOf(t *syncer.Tenant) Quota { return *t.Limits() }

// baseQuota is tenant's configured quota, resolved: the default quota, or
// the one WithQuotaFunc gives, checked as New checks the default (an
// invalid one is returned as given, with an error wrapping
// ErrInvalidQuota).
func (l *Limiter) baseQuota(tenant string) (Quota, error) {
	if l.cfg.quotaFunc == nil {
		return l.defQuota, nil
	}
	q := l.cfg.quotaFunc(tenant)
	if err := l.defaults.Check(q); err != nil {
		return q, err
	}
	return l.defaults.Resolve(q), nil
}

// count records a decision made off the hot path and returns it.
func (l *Limiter) count(d Decision) Decision {
	i := 0
	if d.Allowed {
		i = 1
	}
	if d.Reason < numReasons {
		l.decisions[d.Reason][i].Add(1)
	}
	return d
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
	lease := max(e.RetryAfter(now, n), time.Millisecond)
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

// deny builds the denial of n tokens for e.
func (l *Limiter) deny(e *syncer.Tenant, n int64) Decision {
	d := Decision{Quota: quotaOf(e), Remaining: e.Held(), Reason: ReasonExhausted}
	switch {
	case l.closed.Load():
		d.Reason = ReasonClosed
		return d
	case !e.Leased():
		d.Reason = ReasonColdStart
	}
	d.RetryAfter = max(e.RetryAfter(l.cfg.now(), n), time.Millisecond)
	return d
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

// sleeper sleeps on one timer, reused across the sleeps of a wait loop,
// and wakes early when ctx is done.
type sleeper struct{ t *time.Timer }

// sleep waits d, or until wake is closed (nil: never), or until ctx is
// done (returning ctx's error).
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
	case <-ctx.Done():
		return ctx.Err()
	}
}

// turnCount keeps the most turns one call of decide made without waiting
// in between, for tests: a decision path that spun or went round an
// evicted tenant would raise it.
type turnCount struct{ max atomic.Int64 }

func (c *turnCount) note(turns int64) {
	for {
		cur := c.max.Load()
		if turns <= cur || c.max.CompareAndSwap(cur, turns) {
			return
		}
	}
}

func (s *sleeper) stop() {
	if s.t != nil {
		s.t.Stop()
	}
}

// truncate shortens a tenant name for an error message.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "…"
}

// Close stops the syncer, waits for its goroutines, and returns every
// unused leased token to Redis (bounded by ctx).
//
// Admissions stop when Close is called, not when it returns: a decision
// that starts after the call began is denied with ReasonClosed (WaitN
// returns ErrClosed), and waiting WaitN calls return ErrClosed. Only a
// decision already past that check when Close began may still spend from
// its lease. Once Close has returned, every decision is denied with
// ReasonClosed. Close is idempotent: later calls return the first call's
// result.
func (l *Limiter) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.cfg.logger.Info("leasequota: closing: admissions stopped, returning leased tokens")
		l.stop()
		l.group.Wait()
		l.sync.Close()
		if err := l.sync.ReleaseAll(ctx); err != nil {
			l.closeErr = fmt.Errorf("leasequota: Close: returning leased tokens: %w", err)
		}
		// Driven mode (WithManualSync) held the answers of refills that
		// Close canceled until the tokens were returned; Deliver does
		// nothing otherwise.
		l.sync.Deliver()
		l.tel.Close()
	})
	return l.closeErr
}

// Tenants returns the number of tenants this instance tracks.
func (l *Limiter) Tenants() int { return l.sync.Len() }

// Stats are running totals of a Limiter's lease traffic and decisions:
// every count only grows. Degraded is a state, not a count.
type Stats struct {
	Calls     int64 // lease round trips to Redis (a pipeline counts once)
	Errors    int64 // lease calls (per tenant) that failed
	Requested int64 // tokens asked for
	Granted   int64 // tokens granted
	Returned  int64 // tokens given back to Redis and credited there (expiry, eviction, Close)
	Forfeited int64 // tokens given back that Redis did not credit, or whose return failed
	Expired   int64 // leased tokens taken back unspent at the end of their lifetime (and returned)
	Evicted   int64 // tenants evicted (idle or over WithMaxTenants)

	// Decisions counts every decision by its Reason, the hot path's
	// included (ReasonLeased). A reason that no decision had yet is
	// absent; a Reason added in a later version adds a key, not a field.
	Decisions map[Reason]Outcomes

	// Degraded is true while Redis calls are failing.
	Degraded bool
}

// Outcomes counts the decisions of one Reason by outcome.
type Outcomes struct {
	Allowed, Denied int64
}

// Admitted returns the decisions that admitted, whatever their reason.
func (s Stats) Admitted() (n int64) {
	for _, o := range s.Decisions {
		n += o.Allowed
	}
	return n
}

// Stats returns the running totals. It visits every tenant, so it costs in
// proportion to the tenants tracked; call it from metrics collection, not
// per request.
func (l *Limiter) Stats() Stats {
	c := l.counts()
	ss := l.sync.Stats()
	s := Stats{
		Calls: ss.Calls, Errors: ss.Errors, Requested: ss.Requested, Granted: ss.Granted,
		Returned: ss.Returned, Forfeited: ss.Forfeited, Expired: ss.Expired, Evicted: ss.Evicted,
		Decisions: map[Reason]Outcomes{},
		Degraded:  l.sync.Degraded(),
	}
	for r := Reason(1); r < numReasons; r++ {
		if o := (Outcomes{Allowed: c.allowed[r], Denied: c.denied[r]}); o != (Outcomes{}) {
			s.Decisions[r] = o
		}
	}
	return s
}

// decisionCounts are the decisions by reason, and the leased tokens held
// now, from one visit of the tenants.
type decisionCounts struct {
	allowed, denied [numReasons]int64
	held            int64
}

func (l *Limiter) counts() (c decisionCounts) {
	var leased int64
	leased, c.held = l.sync.LeaseTotals()
	for r := range c.allowed {
		c.denied[r] = l.decisions[r][0].Load()
		c.allowed[r] = l.decisions[r][1].Load()
	}
	c.allowed[ReasonLeased] += leased
	return c
}

// reasonNames and reasonModes label the decisions metric, by Reason.
var (
	reasonLabels, reasonModes = func() (names, modes []string) {
		names = make([]string, numReasons)
		modes = make([]string, numReasons)
		for r := Reason(0); r < numReasons; r++ {
			names[r] = r.String()
		}
		modes[ReasonUnavailable] = FailClosed.String()
		modes[ReasonFallback] = FailLocal.String()
		modes[ReasonFailOpen] = FailOpen.String()
		return names, modes
	}()
)

// collect fills a telemetry snapshot; the SDK calls it when it collects.
func (l *Limiter) collect(s *telemetry.Snapshot) {
	c := l.counts()
	st := l.sync.Stats()
	s.Allowed = append(s.Allowed, c.allowed[:]...)
	s.Denied = append(s.Denied, c.denied[:]...)
	s.Reasons = reasonLabels
	s.ModeOf = reasonModes
	s.Tenants = int64(l.sync.Len())
	s.Degraded = l.sync.Degraded()
	s.TokensGranted = st.Granted
	// Every token taken back (expired, evicted, closed) is given back, and
	// counted as returned or forfeited.
	s.TokensSpent = max(st.Granted-st.Returned-st.Forfeited-c.held, 0)
}

// TenantInfo describes one tenant's lease on this instance.
type TenantInfo struct {
	Quota     Quota   // the quota applied, defaults resolved
	Tokens    int64   // leased tokens held now
	Lease     int64   // lease size the syncer aims for now
	Demand    float64 // estimated demand here, tokens per second
	Failures  int     // lease calls failed in a row (counted up to 255)
	Instances int     // instances active on the tenant, as Redis last counted
}

// Tenant returns what this instance knows of tenant's lease, and false if
// it does not track the tenant. It is for introspection (dashboards,
// simulations, tests), not for the request path: it takes the tenant's lock.
func (l *Limiter) Tenant(tenant string) (TenantInfo, bool) {
	e := l.sync.Tenant(tenant)
	if e == nil {
		return TenantInfo{}, false
	}
	s := e.Snapshot()
	return TenantInfo{
		Quota:     quotaOf(e),
		Tokens:    s.Tokens,
		Lease:     s.Target,
		Demand:    s.Demand,
		Failures:  s.Failures,
		Instances: s.Instances,
	}, true
}
