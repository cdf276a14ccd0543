package leasequota

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"

	"github.com/leasequota/leasequota/quota"
)

// DefaultKeyPrefix is the prefix of every Redis key unless WithKeyPrefix
// says otherwise.
const DefaultKeyPrefix = "leasequota:"

// Defaults of the options.
const (
	DefaultRefreshInterval = 100 * time.Millisecond
	DefaultColdStartWait   = 100 * time.Millisecond
	DefaultLeaseTTL        = 2 * time.Second
	DefaultIdleTimeout     = time.Minute
	// DefaultReservation is WithReservation's default: off, for now (see
	// there).
	DefaultReservation = 0
	// MaxReservation is the longest WithReservation accepts.
	MaxReservation = time.Minute
	// MinSharePeriod and MaxSharePeriod bound WithRateShares' period.
	MinSharePeriod = time.Second
	MaxSharePeriod = time.Hour
	// DefaultPerCPUDemand is WithPerCPUTokens' default: a tenant deciding
	// 10,000 requests a second here, spent from several CPUs, keeps its
	// tokens in a slot per P.
	DefaultPerCPUDemand = 10_000
)

// An Option configures a Limiter in New.
type Option func(*config)

// config is what the options set; New validates it.
type config struct {
	defaultQuota    *Quota
	quotaFunc       func(tenant string) Quota
	quotaRefresh    time.Duration // set only by WithQuotaRefresh (quotaRefreshSet)
	quotaRefreshSet bool
	keyPrefix       string
	refreshInterval time.Duration
	coldStartWait   time.Duration
	maxWait         time.Duration
	leaseTTL        time.Duration
	redisTimeout    time.Duration // set only by WithRedisTimeout (redisTimeoutSet)
	redisTimeoutSet bool
	seed            *uint64
	failureMode     FailureMode
	maxTenants      int
	reservation     time.Duration
	sharePeriod     time.Duration // WithRateShares; 0: off
	shareHeadroom   float64
	perCPUDemand    float64 // WithPerCPUTokens; 0: never
	// now is the clock every decision, schedule and lease lifetime is
	// read from: nil (the default) for monoclock.New(wall()), made at
	// New, which does not step with the wall clock; tests inject their
	// own.
	now func() time.Time
	// wall is the wall clock that the default clock reads once, at New
	// (time.Now; tests inject their own).
	wall func() time.Time
	// manualSync leaves the syncer's loop to the caller (tests drive it
	// through export_test.go): New starts no goroutine.
	manualSync bool
	// instanceID, when set, is the limiter's id in the instance registries
	// instead of a random one (tests that must reproduce exactly).
	instanceID string
	// expectedInstances is WithExpectedInstances' hint; 0 for none.
	expectedInstances int
	idleTimeout       time.Duration
	logger            *slog.Logger
	meterProvider     metric.MeterProvider
	tracerProvider    trace.TracerProvider
	name              string
}

func defaultConfig() config {
	return config{
		keyPrefix:       DefaultKeyPrefix,
		refreshInterval: DefaultRefreshInterval,
		coldStartWait:   DefaultColdStartWait,
		leaseTTL:        DefaultLeaseTTL,
		failureMode:     FailLocal,
		idleTimeout:     DefaultIdleTimeout,
		reservation:     DefaultReservation,
		perCPUDemand:    DefaultPerCPUDemand,
		wall:            time.Now,
	}
}

// WithFailureMode sets what requests get when Redis cannot be reached and
// a tenant's lease is spent (default FailLocal); a Quota's FailureMode
// overrides it per tenant. See FailureMode.
func WithFailureMode(m FailureMode) Option {
	return func(c *config) { c.failureMode = m }
}

// WithMaxTenants bounds the tenants tracked at once. Each syncer round
// evicts the least recently active tenants beyond n (their tokens go back
// to Redis first); eviction never blocks a request. Between rounds up to
// 2n may be tracked, however many new tenants come at once; beyond that,
// requests of new tenants are denied with ReasonTooManyTenants. Default:
// no bound but idle eviction.
func WithMaxTenants(n int) Option {
	return func(c *config) { c.maxTenants = n }
}

// WithExpectedInstances tells the limiter how many instances are expected
// to share its tenants (default: unknown). It matters for a tenant whose
// own instance count Redis never reported to this instance (a tenant new
// here, or every tenant of an instance started during an outage), with n
// the larger of this hint and the most instances Redis reported on any
// tenant here: the tenant's first lease is at most Burst/n tokens (the
// instances of a fleet see its first requests together), and with
// FailLocal its fallback bucket gets Rate/n tokens per second and Burst/n
// capacity. With neither, n is 1: a first lease is then what the bucket
// refills in a refresh interval, and each instance falls back to the
// tenant's whole quota. With WithRateShares, n also caps the rate share a
// tenant young here asks for, at an even part of the rate among the
// larger of n and the tenant's own count (docs/design.md, "The Limiter's
// side"). See docs/failure-modes.md.
func WithExpectedInstances(n int) Option {
	return func(c *config) { c.expectedInstances = n }
}

// WithIdleTimeout sets how long a tenant may go without requests before it
// is evicted and its tokens returned (default 1 minute). A tenant holding
// a rate share (WithRateShares) is kept past it until the share is ended,
// up to a quarter period after its demand went, or its end has passed.
func WithIdleTimeout(d time.Duration) Option {
	return func(c *config) { c.idleTimeout = d }
}

// WithLogger sets the logger (default slog.Default()): failure mode changes
// are logged once per change, Redis errors at most once per second.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithDefaultQuota sets the quota of every tenant, unless WithQuotaFunc is
// also given: then the function decides.
func WithDefaultQuota(q Quota) Option {
	return func(c *config) { c.defaultQuota = &q }
}

// WithQuotaFunc sets a function that gives each tenant's quota. It is
// called once per tenant per instance, on the tenant's first request (not
// on the hot path), and again, from a background goroutine, with
// WithQuotaRefresh and after Limiter.Invalidate; it must be safe for
// concurrent use. A tenant whose quota is invalid is denied with
// ReasonInvalidQuota, and is not tracked: the function is called again
// on each of its requests, so it should answer such a tenant cheaply. A
// panic in a call made to resolve a quota again is logged, as an invalid
// quota is, and the tenant keeps its quota; in a call on a tenant's
// request it reaches that request's caller.
func WithQuotaFunc(f func(tenant string) Quota) Option {
	return func(c *config) { c.quotaFunc = f }
}

// WithQuotaRefresh sets how long a quota that WithQuotaFunc resolved is
// trusted: each tenant this instance tracks has its quota resolved again
// once every d, in the background, so that a change in what the function
// returns (a plan changed in the user's database) reaches tenants that
// stay busy. Without this option a tenant's quota is resolved once, when
// this instance starts tracking it, and again only after it went idle and
// was evicted, or after Limiter.Invalidate.
//
// The calls are spread over d (each tenant at its own phase) and made by
// one background goroutine of the limiter, never on the request path nor
// by the syncer's loop, one at a time: a slow function delays the next
// refresh, not requests. A tenant's quota therefore is at most about d
// plus a refresh interval old, or longer while the function is slow. The
// new quota applies as a SetQuota change does (see Limiter.Invalidate).
// d must be at least the refresh interval, and the option needs
// WithQuotaFunc; otherwise New fails with an error wrapping
// ErrInvalidOption.
func WithQuotaRefresh(d time.Duration) Option {
	return func(c *config) { c.quotaRefresh, c.quotaRefreshSet = d, true }
}

// WithKeyPrefix sets the prefix of the Redis keys (default
// DefaultKeyPrefix). It must not contain '{' or '}', which would take the
// cluster hash tag away from the tenant.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) { c.keyPrefix = prefix }
}

// WithRefreshInterval sets how often each tenant's lease is refreshed on
// schedule (default 100ms), from 1ms to MaxLeaseTTL/2 (a lease lives at
// least two intervals). Leases are sized to last about this long.
func WithRefreshInterval(d time.Duration) Option {
	return func(c *config) { c.refreshInterval = d }
}

// WithReservation sets the length of a reservation (0, the default, turns
// reservations off; a few seconds is the useful range). While a tenant is
// scarce (its demand over every instance exceeds its Rate), each of its
// lease calls also reserves this instance's fair share of the rate over
// d (over less when the demand the call reports would make more than
// 2^30 tokens in d: the tokens to come are counted in an int32;
// docs/design.md): Redis debits it from the global bucket's future
// refill, and the syncer hands it to requests here at that pace, each
// token no earlier than the bucket refills it. So the bound holds exactly, and a starved
// instance calls Redis about once per d instead of once per Burst/Rate,
// whatever its demand (docs/performance.md, "Reservations"). A tenant
// first seen here less than a half-life (500 ms) ago does not start one:
// its demand is not measured yet. A token
// reserved this way may come due up to d after the bucket refilled it,
// and up to 990 ms more behind other instances' reservations: the window
// bound's L is LeaseTTL + d + 990ms (docs/design.md). Reserved tokens
// still to come are dropped when the tenant is evicted, when the limiter
// closes, and when its rate falls (SetQuota, a new configured quota), so
// that a lower rate applies as soon as the limiter reads it.
//
// Rollout: Redis commits a bucket's refill at most 990 ms ahead of its
// clock (lease.ReserveAhead), which instances of earlier releases read
// safely, whatever d: no two-phase rollout is needed. At most
// MaxReservation.
//
// Off by default in this release: over a run of a few seconds an
// over-demanded tenant admits a few percent less with it (an instance's
// next reservation can start after its last one ended), which
// docs/performance.md measures; the calls it saves matter on a fleet of
// many instances per tenant.
func WithReservation(d time.Duration) Option {
	return func(c *config) { c.reservation = d }
}

// WithRateShares turns rate shares on (off by default; docs/design.md,
// "Rate shares"). While a tenant is scarce (its instances together ask for
// more than its Rate), each instance asks Redis for a share of the rate:
// its max-min fair share, out of what the shares in force leave of
// Rate*(1 - headroom), until the end of the tenant's current epoch of
// period (or of the next one, when asked for in an epoch's second half;
// the epochs of each tenant are offset by a hash of its name). The
// tenant's global bucket refills at the rate less the shares, and the
// instance hands its share to requests here at that pace, each token no
// earlier than the share accrued it in Redis's clock. So an instance of a
// scarce tenant calls Redis about once a period for it, to renew its
// share, whatever its demand, instead of once per lease; tokens beyond
// the share (bursts, the headroom's refill) come from the bucket as
// leases do, on those calls. The bound holds exactly: the bucket and the
// shares make Rate tokens a second together. A token accrued here expires
// after the tenant's LeaseTTL, which stays the window bound's L, and is
// then lost, not returned to Redis (it was never debited there). An
// instance whose demand is gone ends its share after a jitter of up to a
// quarter period, so that a whole fleet whose load stopped does not end
// all its shares at once.
//
// What it costs: a share follows the demands as Redis last summed them,
// so it lags a change of demand by up to one and a half periods (a
// renewal asks again); an instance that arrives while the shares in force
// hold all of Rate*(1 - headroom) gets tokens from the headroom's refill
// and the burst only, until the others renew; and the instance registry's
// window grows to two periods, so an instance that left is counted for
// that long. Close ends the shares the instance holds, and an idle tenant
// is kept past WithIdleTimeout until its share is ended; one held by a
// tenant evicted for WithMaxTenants, or whose end fails, stays in force
// in Redis until its epoch ends, unspent (or until a lease call of its
// tenant here reports it, which ends it: the rate it was granted under
// is not known then).
//
// Rollout: every instance sharing the tenants must run a release that
// honours shares (this one, or the release before it) before any turns
// shares on; Redis grants no share while an instance of an earlier
// release is active on the tenant. It replaces WithReservation: setting
// both is an error. period is in [MinSharePeriod, MaxSharePeriod], 0 for
// off; headroom in [0, 1).
func WithRateShares(period time.Duration, headroom float64) Option {
	return func(c *config) { c.sharePeriod, c.shareHeadroom = period, headroom }
}

// WithPerCPUTokens keeps the leased tokens of each tenant whose demand
// on this instance is at least minDemand requests a second (default
// DefaultPerCPUDemand; 0: never) in one slot per P (GOMAXPROCS) instead
// of one count, while its requests come on more than one P. A request
// then spends from the slot of the CPU it runs on, then from the shared
// count, then from the other slots, so that a hot tenant's count does
// not move between CPUs' caches on every decision; the syncer tops the
// slots up every quarter of the refresh interval and when a lease
// arrives. It joins them again once the demand falls under a quarter of
// minDemand, or once one P's slot gave seven eighths of a sample of 128
// tokens spent (one goroutine at a time: the slots only cost it), and
// then splits the tenant again only to look, for one refresh interval
// every 8 seconds.
// The bound, the ledger and every total are unchanged: a token is in one
// place at a time. A split tenant's Decision.Remaining, and so its
// FleetRemaining, counts the slot of the request's CPU and the shared
// count alone: a lower bound of the tokens the instance holds.
//
// What it costs: 128 bytes a P for each tenant split (a slot is two
// cache lines, as a line's neighbour moves with it), and a split tenant's
// decision on one goroutine is about 1.7 times as long (a call out of
// line, which P it runs on, one more cache line), which the joining above
// confines to those looks. docs/tuning.md ("Hot tenants on many cores") gives the
// figures measured with and without the split, and the command that
// prints them; docs/performance.md has the runs. A tenant
// that is not split pays nothing: its counter is one count, spent as
// before.
// minDemand must be 0 or at least 1; it does nothing with GOMAXPROCS 1.
func WithPerCPUTokens(minDemand float64) Option {
	return func(c *config) { c.perCPUDemand = minDemand }
}

// WithColdStartWait bounds how long a request waits for a lease when the
// syncer keeps none for its tenant on this instance (default 100ms; 0
// means do not wait, deny at once while the lease is fetched): the
// tenant's first request here, and a request of a tenant whose demand
// here is too low to size a lease for, or whose requests come too far
// apart for a lease to last till the next (docs/design.md, "Scheduling
// and sizing"). A request that finds its lease spent by other requests
// does not wait for this (see WithMaxWait); a cold request of a tenant
// leased here before waits up to WithMaxWait instead when that is
// longer, and no longer than WithMaxWait once its lease call answered
// leaving it short with a lease kept for the tenant (its bucket dry).
// The request's ctx bounds it too. A cold request does not wait either
// when this instance's last urgent lease call, ended within the last
// second, took d or longer (a saturated Redis, or a process too busy to
// read its replies): its lease would not come in time, so it is denied
// at once (ReasonColdStart) and its tenant goes in the next round; but
// while Redis is down for every tenant, its failure mode decides.
func WithColdStartWait(d time.Duration) Option {
	return func(c *config) { c.coldStartWait = d }
}

// WithMaxWait lets AllowN wait up to d for a fresh lease when the tenant's
// local tokens are exhausted (default 0: deny at once). ctx bounds it too.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) { c.maxWait = d }
}

// WithLeaseTTL sets how long leased tokens may be held before they expire
// (default 2s); a Quota's LeaseTTL overrides it per tenant. It must be at
// least twice the refresh interval: a lease is replaced before it expires.
// It is also the window in which Redis must answer something in time not
// to be taken for down (docs/failure-modes.md), up to 1 s: a longer lease
// does not slow the detection of an outage. It sets how long an instance
// that left counts in its tenants' fair shares (syncer.RegistryWindow).
func WithLeaseTTL(d time.Duration) Option {
	return func(c *config) { c.leaseTTL = d }
}

// WithRedisTimeout sets the deadline of every Redis call (default half the
// refresh interval, at least 10ms), at most MaxLeaseTTL.
func WithRedisTimeout(d time.Duration) Option {
	return func(c *config) { c.redisTimeout, c.redisTimeoutSet = d, true }
}

// WithSeed fixes the seed of the refresh jitter (default: random per
// Limiter). Tests and simulations use it for repeatable schedules.
func WithSeed(seed uint64) Option {
	return func(c *config) { c.seed = &seed }
}

// WithMeterProvider sets where the limiter's metrics go (default the otel
// global MeterProvider at New). docs/metrics.md lists the instruments.
func WithMeterProvider(mp metric.MeterProvider) Option {
	return func(c *config) { c.meterProvider = mp }
}

// WithTracerProvider sets where the spans of sync rounds and lease calls to
// Redis go (default the otel global TracerProvider at New).
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracerProvider = tp }
}

// WithName names the limiter in its telemetry: every metric gets the
// attribute leasequota.limiter=name. Use it to tell apart several limiters
// in one process sharing a MeterProvider (default: no attribute).
func WithName(name string) Option {
	return func(c *config) { c.name = name }
}

// quotaDefaults are what a Quota's zero fields mean on the limiter, and
// the refresh interval its LeaseTTL must allow for.
func (c *config) quotaDefaults() quota.Defaults {
	return quota.Defaults{LeaseTTL: c.leaseTTL, FailureMode: c.failureMode, Interval: c.refreshInterval}
}

func (c *config) validate() error {
	if c.defaultQuota == nil && c.quotaFunc == nil {
		return fmt.Errorf("%w: no quota: give WithDefaultQuota or WithQuotaFunc", ErrInvalidOption)
	}
	if c.defaultQuota != nil {
		if err := c.quotaDefaults().Check(*c.defaultQuota); err != nil {
			return fmt.Errorf("%w (WithDefaultQuota)", err)
		}
	}
	if c.refreshInterval < time.Millisecond || c.refreshInterval > MaxLeaseTTL/2 {
		return fmt.Errorf("%w: WithRefreshInterval(%v): want 1ms to %v (half of MaxLeaseTTL: a lease lives at least two intervals)", ErrInvalidOption, c.refreshInterval, MaxLeaseTTL/2)
	}
	if c.quotaRefreshSet && c.quotaFunc == nil {
		return fmt.Errorf("%w: WithQuotaRefresh(%v) without WithQuotaFunc: there is nothing to resolve again", ErrInvalidOption, c.quotaRefresh)
	}
	if c.quotaRefreshSet && c.quotaRefresh < c.refreshInterval {
		return fmt.Errorf("%w: WithQuotaRefresh(%v): want >= the refresh interval (%v)", ErrInvalidOption, c.quotaRefresh, c.refreshInterval)
	}
	if c.coldStartWait < 0 {
		return fmt.Errorf("%w: WithColdStartWait(%v): want >= 0", ErrInvalidOption, c.coldStartWait)
	}
	if c.maxWait < 0 {
		return fmt.Errorf("%w: WithMaxWait(%v): want >= 0", ErrInvalidOption, c.maxWait)
	}
	if c.leaseTTL > MaxLeaseTTL {
		return fmt.Errorf("%w: WithLeaseTTL(%v): want at most %v", ErrInvalidOption, c.leaseTTL, MaxLeaseTTL)
	}
	if shortest := quota.MinLeaseTTL(c.refreshInterval); c.leaseTTL < shortest {
		return fmt.Errorf("%w: WithLeaseTTL(%v): want >= twice the refresh interval (%v)", ErrInvalidOption, c.leaseTTL, shortest)
	}
	if c.failureMode == FailDefault || c.failureMode > FailOpen {
		return fmt.Errorf("%w: WithFailureMode(%d): want FailLocal, FailClosed or FailOpen", ErrInvalidOption, c.failureMode)
	}
	if c.reservation < 0 || c.reservation > MaxReservation {
		return fmt.Errorf("%w: WithReservation(%v): want 0 to %v", ErrInvalidOption, c.reservation, MaxReservation)
	}
	if c.sharePeriod != 0 && (c.sharePeriod < MinSharePeriod || c.sharePeriod > MaxSharePeriod) {
		return fmt.Errorf("%w: WithRateShares(%v, ...): want a period of 0 (off) or %v to %v", ErrInvalidOption, c.sharePeriod, MinSharePeriod, MaxSharePeriod)
	}
	if !(c.shareHeadroom >= 0 && c.shareHeadroom < 1) {
		return fmt.Errorf("%w: WithRateShares(..., %v): want a headroom in [0, 1)", ErrInvalidOption, c.shareHeadroom)
	}
	if !(c.perCPUDemand == 0 || c.perCPUDemand >= 1 && !math.IsInf(c.perCPUDemand, 1)) {
		return fmt.Errorf("%w: WithPerCPUTokens(%v): want 0 (off) or a demand of at least 1 request a second", ErrInvalidOption, c.perCPUDemand)
	}
	if c.sharePeriod > 0 && c.reservation > 0 {
		return fmt.Errorf("%w: WithRateShares and WithReservation: rate shares replace reservations, set one", ErrInvalidOption)
	}
	if c.expectedInstances < 0 {
		return fmt.Errorf("%w: WithExpectedInstances(%d): want >= 0", ErrInvalidOption, c.expectedInstances)
	}
	if c.maxTenants < 0 {
		return fmt.Errorf("%w: WithMaxTenants(%d): want >= 0", ErrInvalidOption, c.maxTenants)
	}
	if c.idleTimeout <= 0 {
		return fmt.Errorf("%w: WithIdleTimeout(%v): want > 0", ErrInvalidOption, c.idleTimeout)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	if c.meterProvider == nil {
		c.meterProvider = otel.GetMeterProvider()
	}
	if c.tracerProvider == nil {
		c.tracerProvider = otel.GetTracerProvider()
	}
	if c.redisTimeoutSet && (c.redisTimeout <= 0 || c.redisTimeout > MaxLeaseTTL) {
		return fmt.Errorf("%w: WithRedisTimeout(%v): want > 0 and at most %v (MaxLeaseTTL: a call that takes longer brings a lease already expired)", ErrInvalidOption, c.redisTimeout, MaxLeaseTTL)
	}
	if !c.redisTimeoutSet {
		c.redisTimeout = max(c.refreshInterval/2, 10*time.Millisecond)
	}
	return nil
}
