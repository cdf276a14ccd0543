package leasequota

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/syncer"
)

// Limiter enforces per-tenant quotas across every instance that shares its
// Redis. Decisions are made from tokens leased in advance; a background
// syncer keeps the leases topped up. A Limiter is safe for concurrent use
// by any number of goroutines; make one per process and Close it when done.
type Limiter struct {
	cfg    config
	reg    *registry
	leases *lease.Client
	sync   *syncer.Syncer

	stop   context.CancelFunc // ends the syncer's loop
	group  errgroup.Group     // runs the syncer's loop
	closed atomic.Bool

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
	cfg := defaultConfig()
	for _, o := range opts {
		if o == nil {
			return nil, fmt.Errorf("%w: nil Option", ErrInvalidOption)
		}
		o(&cfg)
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	leases, err := lease.NewClient(client, cfg.keyPrefix)
	if err != nil {
		return nil, fmt.Errorf("%w: WithKeyPrefix(%q): %w", ErrInvalidOption, cfg.keyPrefix, err)
	}
	seed := rand.Uint64()
	if cfg.seed != nil {
		seed = *cfg.seed
	}
	l := &Limiter{cfg: cfg, reg: newRegistry(), leases: leases}
	planner := syncer.NewPlanner(syncer.Config{Interval: cfg.refreshInterval}, seed)
	l.sync = syncer.New(leases, l.reg.tenants, syncer.Options{
		Planner:     planner,
		CallTimeout: cfg.redisTimeout,
	})
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	l.group.Go(func() error { return l.sync.Run(ctx) })
	return l, nil
}

// Allow is AllowN(context.Background(), tenant, 1).Allowed.
func (l *Limiter) Allow(tenant string) bool {
	// The hot path of AllowN, without building a Decision.
	if e := l.reg.load(tenant); e != nil {
		if ok, _ := e.Tokens.TrySpend(1); ok {
			return true
		}
	}
	return l.AllowN(context.Background(), tenant, 1).Allowed
}

// AllowN reports whether n tokens of tenant's quota may be spent now, and
// spends them if so.
//
// When this instance holds enough leased tokens for the tenant, AllowN is
// one map read and one compare-and-swap: no lock, allocation, clock read
// or network call. Otherwise it tells the syncer (without blocking) and:
//   - on the tenant's first request here, waits for its first lease, up to
//     WithColdStartWait and ctx;
//   - when WithMaxWait is set, waits up to that long (and ctx) for a fresh
//     lease;
//   - else denies at once, with RetryAfter estimated from the global
//     bucket as last seen.
//
// n <= 0 and n > Burst are denied with ReasonInvalidN. AllowN never
// returns an error: the Decision's Reason says why it denied.
func (l *Limiter) AllowN(ctx context.Context, tenant string, n int64) Decision {
	if e := l.reg.load(tenant); e != nil {
		if n > 0 && n <= e.quota.Burst {
			if ok, left := e.Tokens.TrySpend(n); ok {
				return Decision{Allowed: true, Remaining: left, Quota: e.quota, Reason: ReasonLeased}
			}
		}
		return l.allowSlow(ctx, e, n)
	}
	return l.allowFirst(ctx, tenant, n)
}

// allowFirst handles a tenant this instance has not seen.
func (l *Limiter) allowFirst(ctx context.Context, tenant string, n int64) Decision {
	if n <= 0 {
		return Decision{Reason: ReasonInvalidN}
	}
	if l.closed.Load() {
		return Decision{Reason: ReasonClosed}
	}
	e, q, err := l.entry(tenant)
	if err != nil {
		return Decision{Quota: q, Reason: ReasonInvalidQuota}
	}
	if n <= e.quota.Burst {
		if ok, left := e.Tokens.TrySpend(n); ok {
			return Decision{Allowed: true, Remaining: left, Quota: e.quota, Reason: ReasonLeased}
		}
	}
	return l.allowSlow(ctx, e, n)
}

// entry returns the tenant's entry, creating it. When the tenant's quota is
// invalid it returns the quota and an error wrapping ErrInvalidQuota, and
// tracks nothing.
func (l *Limiter) entry(tenant string) (*entry, Quota, error) {
	if e := l.reg.load(tenant); e != nil {
		return e, e.quota, nil
	}
	q, err := l.quotaOf(tenant)
	if err != nil {
		return nil, q, err
	}
	e := &entry{quota: q}
	e.Init(tenant, q.limits(), l.sync.Planner(), time.Now())
	e, _ = l.reg.loadOrStore(e)
	return e, e.quota, nil
}

// quotaOf resolves and validates the tenant's quota.
func (l *Limiter) quotaOf(tenant string) (Quota, error) {
	var q Quota
	if l.cfg.quotaFunc != nil {
		q = l.cfg.quotaFunc(tenant)
	} else {
		q = *l.cfg.defaultQuota
	}
	if err := q.Validate(); err != nil {
		return q, err
	}
	if q.LeaseTTL != 0 && q.LeaseTTL < l.cfg.refreshInterval {
		return q, fmt.Errorf("%w: LeaseTTL %v is below the refresh interval %v", ErrInvalidQuota, q.LeaseTTL, l.cfg.refreshInterval)
	}
	return q.resolve(l.cfg.leaseTTL), nil
}

// allowSlow decides a request the leased tokens could not: invalid n, a
// closed limiter, or too few tokens.
func (l *Limiter) allowSlow(ctx context.Context, e *entry, n int64) Decision {
	if n <= 0 || n > e.quota.Burst {
		return Decision{Quota: e.quota, Reason: ReasonInvalidN}
	}
	if l.closed.Load() {
		return Decision{Quota: e.quota, Reason: ReasonClosed}
	}
	l.sync.NoteMiss(&e.Tenant, n)
	reason, wait := ReasonRefilled, l.cfg.maxWait
	if !e.Leased() {
		reason, wait = ReasonColdStart, l.cfg.coldStartWait
	}
	if wait > 0 {
		wctx, cancel := context.WithTimeout(ctx, wait)
		d, err := l.wait(wctx, e, n, reason)
		cancel()
		if err == nil {
			return d
		}
	}
	return l.deny(e, n)
}

// deny builds the denial of n tokens for e.
func (l *Limiter) deny(e *entry, n int64) Decision {
	d := Decision{Quota: e.quota, Remaining: e.Tokens.Load(), Reason: ReasonExhausted}
	switch {
	case l.closed.Load():
		d.Reason = ReasonClosed
		return d
	case e.Failing():
		d.Reason = ReasonUnavailable
	case !e.Leased():
		d.Reason = ReasonColdStart
	}
	d.RetryAfter = max(e.RetryAfter(time.Now(), n), time.Millisecond)
	return d
}

// wait waits until n tokens are spent for e (returning the admission with
// reason), or ctx is done (returning ctx's error). Each round asks the
// syncer for an urgent refill, joining one in flight, and when Redis holds
// calls back (its bucket is dry) sleeps until the estimated refill.
func (l *Limiter) wait(ctx context.Context, e *entry, n int64, reason Reason) (Decision, error) {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ok, left := e.Tokens.TrySpend(n); ok {
			return Decision{Allowed: true, Remaining: left, Quota: e.quota, Reason: reason}, nil
		}
		if l.closed.Load() {
			return Decision{}, ErrClosed
		}
		select {
		case r := <-l.sync.Refill(&e.Tenant, n):
			if errors.Is(r.Err, syncer.ErrClosed) {
				return Decision{}, ErrClosed
			}
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		}
		if ok, left := e.Tokens.TrySpend(n); ok {
			return Decision{Allowed: true, Remaining: left, Quota: e.quota, Reason: reason}, nil
		}
		// Still short: the global bucket is dry or Redis failed. Sleep
		// until the syncer may call again.
		d := max(e.RetryAfter(time.Now(), n), time.Millisecond)
		if timer == nil {
			timer = time.NewTimer(d)
		} else {
			timer.Reset(d)
		}
		select {
		case <-timer.C:
		case <-ctx.Done():
			return Decision{}, ctx.Err()
		}
	}
}

// WaitN blocks until n tokens of tenant's quota are admitted and returns
// the admission, or until ctx is done (returning ctx's error), or the
// limiter is closed (ErrClosed). It returns an error at once when n can
// never be admitted: n <= 0 (ErrInvalidN), n > Burst (ErrExceedsBurst) or
// an invalid quota (ErrInvalidQuota).
func (l *Limiter) WaitN(ctx context.Context, tenant string, n int64) (Decision, error) {
	if n <= 0 {
		return Decision{Reason: ReasonInvalidN}, fmt.Errorf("%w: WaitN(%q, %d)", ErrInvalidN, truncate(tenant), n)
	}
	if l.closed.Load() {
		return Decision{Reason: ReasonClosed}, ErrClosed
	}
	e, q, err := l.entry(tenant)
	if err != nil {
		return Decision{Quota: q, Reason: ReasonInvalidQuota}, fmt.Errorf("WaitN(%q): %w", truncate(tenant), err)
	}
	if n > e.quota.Burst {
		return Decision{Quota: e.quota, Reason: ReasonInvalidN},
			fmt.Errorf("%w: WaitN(%q, %d): Burst is %d", ErrExceedsBurst, truncate(tenant), n, e.quota.Burst)
	}
	if ok, left := e.Tokens.TrySpend(n); ok {
		return Decision{Allowed: true, Remaining: left, Quota: e.quota, Reason: ReasonLeased}, nil
	}
	reason := ReasonRefilled
	if !e.Leased() {
		reason = ReasonColdStart
	}
	l.sync.NoteMiss(&e.Tenant, n)
	d, err := l.wait(ctx, e, n, reason)
	if err != nil {
		d = l.deny(e, n)
		if errors.Is(err, ErrClosed) {
			return d, err
		}
		return d, fmt.Errorf("leasequota: WaitN(%q, %d): %w", truncate(tenant), n, err)
	}
	return d, nil
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
// unused leased token to Redis (bounded by ctx). After Close, AllowN denies
// with ReasonClosed and WaitN returns ErrClosed. Close is idempotent: later
// calls return the first call's result.
func (l *Limiter) Close(ctx context.Context) error {
	l.closeOnce.Do(func() {
		l.closed.Store(true)
		l.stop()
		l.group.Wait()
		l.sync.Close()
		if err := l.sync.ReleaseAll(ctx); err != nil {
			l.closeErr = fmt.Errorf("leasequota: Close: returning leased tokens: %w", err)
		}
	})
	return l.closeErr
}

// Tenants returns the number of tenants this instance tracks.
func (l *Limiter) Tenants() int { return l.reg.len() }

// Stats are running totals of a Limiter's lease traffic with Redis.
type Stats = syncer.Stats

// Stats returns the running totals of lease calls and tokens.
func (l *Limiter) Stats() Stats { return l.sync.Stats() }

// TenantInfo describes one tenant's lease on this instance.
type TenantInfo struct {
	Quota    Quota         // the quota applied, defaults resolved
	Tokens   int64         // leased tokens held now
	Lease    int64         // lease size the syncer aims for now
	Demand   float64       // estimated demand here, tokens per second
	Failures int           // lease calls failed in a row
	Phase    time.Duration // offset of its scheduled refresh within the interval
}

// Tenant returns what this instance knows of tenant's lease, and false if
// it does not track the tenant. It is for introspection (dashboards,
// simulations, tests), not for the request path: it takes the tenant's lock.
func (l *Limiter) Tenant(tenant string) (TenantInfo, bool) {
	e := l.reg.load(tenant)
	if e == nil {
		return TenantInfo{}, false
	}
	s := e.Snapshot(time.Now())
	return TenantInfo{
		Quota:    e.quota,
		Tokens:   s.Tokens,
		Lease:    s.Target,
		Demand:   s.Demand,
		Failures: s.Failures,
		Phase:    s.Phase,
	}, true
}
