package leasequota

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"golang.org/x/sync/errgroup"

	"github.com/leasequota/leasequota/internal/monoclock"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
	"github.com/leasequota/leasequota/telemetry"
)

// Limiter enforces per-tenant quotas across every instance that shares its
// Redis. Decisions are made from tokens leased in advance; a background
// syncer keeps the leases topped up. A Limiter is safe for concurrent use
// by any number of goroutines; make one per process and Close it when done.
//
// Its parts: construction and Close here, the Backend in backend.go, the
// request path in allow.go (the hot path) and decide.go (everything
// else), denials and failure modes in deny.go, a tenant's quota and
// introspection in tenant.go, and the counts in stats.go. It keeps no
// tenant state: the syncer's Tenants hold it.
type Limiter struct {
	// Set by newLimiter, read-only afterwards.
	cfg      config
	leases   lease.Store
	sync     *syncer.Syncer
	instance string         // this limiter's id in Redis' instance registries
	defaults quota.Defaults // what a quota's zero fields mean here
	defQuota Quota          // the default quota, resolved

	tel     *telemetry.Telemetry
	stop    context.CancelFunc // ends the syncer's loop and the refresher
	group   errgroup.Group     // runs the syncer's loop and the refresher
	refresh refresher          // resolves quotas again (refresh.go)
	closed  atomic.Bool        // Close has begun: every decision is ReasonClosed
	// done is closed when Close begins: it wakes the requests waiting
	// for tokens (decide's sleeps), which then return ReasonClosed.
	done  chan struct{}
	ready atomic.Bool // sync is set: telemetry may collect

	// decisions counts the decisions made off the hot path, by reason and
	// outcome ([reason][1] admitted, [reason][0] denied). Admissions from
	// a lease are counted per tenant (syncer.Tenant.Admits).
	decisions [numReasons][2]atomic.Int64
	turns     turnCount // for tests: see decide

	// closing is claimed by the first Close, which does the work, sets
	// closeErr and closes closeDone; later calls wait on closeDone. (A
	// sync.Once made them wait on its mutex, which a testing/synctest
	// bubble does not count as durably blocked: its clock stopped, and
	// two concurrent Closes, the first waiting for a lease call's
	// deadline, hung for ever: TestConcurrentCloseInABubble.)
	closing   atomic.Bool
	closeDone chan struct{} // closed when Close's work is done
	closeErr  error         // Close's result, written before closeDone is closed
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
	if cfg.now == nil {
		cfg.now = monoclock.New(cfg.wall())
	}
	l := &Limiter{cfg: cfg, instance: cfg.instanceID, done: make(chan struct{}), closeDone: make(chan struct{})}
	if l.instance == "" {
		var id [8]byte
		rand.Read(id[:])
		l.instance = hex.EncodeToString(id[:])
	}
	window := syncer.RegistryWindow(cfg.leaseTTL, cfg.refreshInterval, cfg.reservation)
	if cfg.sharePeriod > 0 {
		// An instance holding a share calls about once a period: it
		// stays counted between its renewals, with a margin.
		window = max(window, 2*cfg.sharePeriod)
	}
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
	planner := syncer.NewPlanner(syncer.Config{Interval: cfg.refreshInterval, Reserve: cfg.reservation, Window: window,
		SharePeriod: cfg.sharePeriod, ShareHeadroom: cfg.shareHeadroom}, seed)
	l.sync = syncer.New(store, syncer.Options{
		Planner:      planner,
		CallTimeout:  cfg.redisTimeout,
		OnDegraded:   l.onDegraded,
		IdleTimeout:  cfg.idleTimeout,
		Instances:    cfg.expectedInstances,
		Now:          cfg.now,
		MaxTenants:   cfg.maxTenants,
		Cluster:      cluster,
		Telemetry:    l.tel,
		Defaults:     l.defaults,
		PerCPUDemand: cfg.perCPUDemand,
		// A caller that drives the loop (the simulation) replays exactly.
		Driven: cfg.manualSync,
	})
	l.ready.Store(true)
	ctx, stop := context.WithCancel(context.Background())
	l.stop = stop
	l.refresh.wake = make(chan struct{}, 1)
	l.refresh.last = cfg.now().UnixNano()
	if !cfg.manualSync {
		l.group.Go(func() error { return l.sync.Run(ctx) })
		if cfg.quotaFunc != nil {
			l.group.Go(func() error { return l.runRefresh(ctx) })
		}
	}
	return l, nil
}

// warnContextTimeout warns when the client ignores context deadlines:
// go-redis then waits for its own read and write timeouts (5 s by
// default in go-redis v9), not for WithRedisTimeout.
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
// A Redis that still answers, but only after the call deadline, is not
// called unreachable: the operator's remedy is a larger WithRedisTimeout
// (or a less loaded machine), not a look at Redis's health.
func (l *Limiter) onDegraded(degraded bool, err error) {
	if degraded && l.sync.AnswersLate() {
		l.cfg.logger.Warn("leasequota: Redis answers, but only after WithRedisTimeout's deadline, and has for 4 outage windows (min(lease TTL, 1 s) each), so leases are not refreshed; tenants whose lease is spent follow their failure mode; a larger WithRedisTimeout, or more CPU for this process, lets leases through",
			"mode", l.cfg.failureMode.String(), "timeout", l.cfg.redisTimeout, "error", err)
		return
	}
	if degraded {
		l.cfg.logger.Warn("leasequota: Redis unreachable, leases are not refreshed; tenants whose lease is spent follow their failure mode",
			"mode", l.cfg.failureMode.String(), "error", err)
		return
	}
	l.cfg.logger.Info("leasequota: Redis reachable again, leasing resumed")
}

// Degraded reports whether Redis calls are failing: on one Redis server
// (or Sentinel), while the circuit breaker is open or probing; on a Redis
// Cluster, which has no shared breaker, while any tenant's last lease call
// failed (but a tenant that keeps no lease here, once its master has
// answered another call since: docs/failure-modes.md).
func (l *Limiter) Degraded() bool { return l.sync.Degraded() }

// Close stops the syncer, waits for its goroutines and for the lease
// calls they have in flight (each bounded by WithRedisTimeout's deadline,
// so that no token Redis granted is lost to a canceled reply; a refill
// that has not sent its call when Close begins sends none, and on a Redis
// Cluster a look-up of a tenant's master begun after that loads no slot
// map, so a refill delays Close by one deadline at most) and for a
// read of the quota version in flight and the count of the fleet's roster
// after it (each bounded by its own deadline, the lease TTL or a second,
// whichever is less: go-redis ends a read at its deadline, not when its
// context is canceled, so on a Redis that accepts connections and answers
// nothing Close may take up to twice that), and returns every unused
// leased token to Redis (in the time below), then takes this limiter out of
// the fleet's roster (lease.RosterLeaver; an error there is not returned:
// the entry expires by itself). The returns get the time ctx gives (each
// pipeline at most ten minutes more than a lease call's deadline: a
// return sent later could not name its grant to Redis), or a
// lease call's deadline (WithRedisTimeout, plus 300 µs a tenant) when ctx
// has no deadline or a shorter one, or is done already: give a ctx with a deadline of a few
// seconds, or tokens held when Redis is busy may be forfeited (lost to
// the bucket until it refills). It waits for a call of the WithQuotaFunc
// function that the limiter made to resolve a quota again
// (WithQuotaRefresh, Invalidate) to return.
//
// Admissions stop when Close is called, not when it returns: a decision
// that starts after the call began is denied with ReasonClosed (WaitN
// returns ErrClosed), and waiting requests return at once, ReasonClosed
// (WaitN: ErrClosed), even those whose lease call is still in flight
// (Close waits for the call, not they). Only a
// decision already past that check when Close began may still spend from
// its lease. Once Close has returned, every decision is denied with
// ReasonClosed. Close is idempotent: later calls return the first call's
// result.
func (l *Limiter) Close(ctx context.Context) error {
	if !l.closing.CompareAndSwap(false, true) {
		<-l.closeDone
		return l.closeErr
	}
	defer close(l.closeDone)
	l.closed.Store(true)
	close(l.done)
	l.cfg.logger.Info("leasequota: closing: admissions stopped, returning leased tokens")
	l.sync.BeginClose()
	l.stop()
	l.group.Wait()
	l.sync.Close()
	if err := l.sync.ReleaseAll(ctx); err != nil {
		l.closeErr = fmt.Errorf("leasequota: Close: returning leased tokens and ending rate shares: %w", err)
	}
	// Driven mode (WithManualSync) held the answers of refills that
	// Close canceled until the tokens were returned; Deliver does
	// nothing otherwise.
	l.sync.Deliver()
	l.tel.Close()
	return l.closeErr
}

// Tenants returns the number of tenants this instance tracks.
func (l *Limiter) Tenants() int { return l.sync.Len() }
