package syncer

import (
	"math"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/leasequota/leasequota/bucket"
	"github.com/leasequota/leasequota/lease"
)

// Config tunes the Planner. The zero value of a field means its default,
// given by DefaultConfig.
type Config struct {
	// Interval is the period of each tenant's scheduled refresh.
	Interval time.Duration
	// Jitter is the range [0, Jitter) of the random delay added to each
	// scheduled refresh.
	Jitter time.Duration
	// Headroom multiplies the demand over one Interval to size a lease.
	Headroom float64
	// LowWatermark is the fraction of the lease target below which a
	// tenant is refreshed at once, before its scheduled time.
	LowWatermark float64
	// MinBackoff and MaxBackoff bound the wait after a failed lease call;
	// it doubles with each failure in a row, with jitter. MaxBackoff
	// defaults to Interval.
	MinBackoff, MaxBackoff time.Duration
	// HalfLife is the half-life of the demand and grant rate estimates.
	HalfLife time.Duration
	// FallbackHalfLife is how fast the local fallback rate moves from this
	// instance's recent share toward Rate/instances (see FallbackRate).
	FallbackHalfLife time.Duration
}

// DefaultConfig returns the defaults that zero fields of a Config take.
func DefaultConfig() Config {
	return Config{
		Interval:         100 * time.Millisecond,
		Jitter:           10 * time.Millisecond,
		Headroom:         2,
		LowWatermark:     0.5,
		MinBackoff:       10 * time.Millisecond,
		MaxBackoff:       100 * time.Millisecond,
		HalfLife:         bucket.DefaultHalfLife,
		FallbackHalfLife: 5 * time.Second,
	}
}

// withDefaults fills zero fields from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Interval <= 0 {
		c.Interval = d.Interval
	}
	if c.Jitter < 0 {
		c.Jitter = 0
	} else if c.Jitter == 0 {
		c.Jitter = c.Interval / 10
	}
	if !(c.Headroom >= 1) || math.IsInf(c.Headroom, 0) {
		c.Headroom = d.Headroom
	}
	if !(c.LowWatermark > 0 && c.LowWatermark < 1) {
		c.LowWatermark = d.LowWatermark
	}
	if c.MinBackoff <= 0 {
		c.MinBackoff = d.MinBackoff
	}
	if c.MaxBackoff <= 0 {
		// Back off at most one interval, so leasing resumes within two
		// intervals of Redis coming back.
		c.MaxBackoff = c.Interval
	}
	c.MaxBackoff = max(c.MaxBackoff, c.MinBackoff)
	if c.FallbackHalfLife <= 0 {
		c.FallbackHalfLife = d.FallbackHalfLife
	}
	if c.HalfLife <= 0 {
		c.HalfLife = d.HalfLife
	}
	return c
}

// State is the planner's record of one tenant. The zero value is a tenant
// never seen; Planner.Init gives it its schedule. It is plain data, owned
// by whoever holds the tenant's lock. Times are unix nanoseconds, to keep
// the record small (there is one per tenant).
type State struct {
	hash         uint64  // xxhash of the tenant name
	next         int64   // next scheduled refresh
	notBefore    int64   // no lease call before this: bucket dry, or backoff
	lastActive   int64   // last plan that saw tokens spent or asked for
	failingSince int64   // first failure of the current run of failures
	lastGrant    int64   // time of the last successful lease call
	target       int64   // lease size last planned
	needMax      int64   // largest request seen lately: a lease covers at least one
	needAt       int64   // when needMax was last raised
	grantRate    float64 // EWMA of tokens granted per second, kept at failure
	demand       bucket.Demand
	// A window of one Interval over which demand is counted, to catch a
	// sustained jump faster than the average can follow.
	winStart   int64   // start of the current window
	winCount   int64   // tokens asked for in it
	winPrev    int64   // tokens asked for in the previous half window
	winPrevLen int64   // its length
	winRate    float64 // demand over the last full window, tokens per second
	interval   int64   // the planner's Interval, for observe
	rising     bool    // demand jumped: use winRate while above the average
	scarce     bool    // the last lease call got less than it asked for
	ledger     Ledger
	failures   int32 // lease calls failed in a row
	instances  int32 // instances active on the tenant, as Redis last said
	granted    bool  // a lease call has succeeded at least once
}

// Target returns the lease size last planned for the tenant.
func (s *State) Target() int64 { return s.target }

// Failures returns how many lease calls in a row have failed.
func (s *State) Failures() int { return int(s.failures) }

// Held returns the tokens the ledger accounts for.
func (s *State) Held() int64 { return s.ledger.Total() }

// NotBefore returns the earliest time the next lease call may be made.
func (s *State) NotBefore() time.Time { return time.Unix(0, s.notBefore) }

// Next returns the time of the next scheduled refresh.
func (s *State) Next() time.Time { return time.Unix(0, s.next) }

// Demand returns the demand estimate in tokens per second at time now: an
// exponentially weighted average (HalfLife), except after a jump. When the
// demand counted over a whole Interval is at least jumpFactor times the
// average, the estimate is that interval's demand until the average has
// caught up with it: a jump shows in the lease within about two
// intervals, which the average alone (half-life 500 ms) would take seconds
// to follow, while a burst shorter than an interval moves it as before.
// While the global bucket is scarce (the last call got less than it asked
// for) the average alone applies: larger leases would only strand tokens.
func (s *State) Demand(now time.Time) float64 {
	avg := s.demand.Rate(now)
	if s.rising && !s.scarce {
		return max(avg, s.winRate)
	}
	return avg
}

// jumpFactor is how far above the average a whole interval's demand must
// be to count as a jump (see State.Demand).
const jumpFactor = 3

// jumpMin is the fewest tokens a window must count for its demand to be
// taken as a jump: fewer are noise (a few requests landing together).
const jumpMin = 32

// observe records count tokens asked for at now.
func (s *State) observe(now time.Time, count int64) {
	s.demand.Observe(now, count)
	ns := now.UnixNano()
	if s.winStart == 0 || ns < s.winStart {
		s.winStart, s.winCount, s.winPrev, s.winPrevLen = ns, 0, 0, 0
	}
	s.winCount += count
	// The window is the last two halves of an interval, slid every half.
	half := s.interval / 2
	if el := ns - s.winStart; half > 0 && el >= half {
		n := s.winCount + s.winPrev
		s.winRate = float64(n) / (float64(el+s.winPrevLen) / 1e9)
		s.winPrev, s.winPrevLen = s.winCount, el
		s.winStart, s.winCount = ns, 0
		avg := s.demand.Rate(now)
		switch {
		case s.winRate >= jumpFactor*avg && n >= jumpMin:
			s.rising = true
		case s.winRate <= 1.1*avg:
			s.rising = false
		}
	}
}

// Instances returns how many instances Redis last counted as active on the
// tenant (0 when unknown).
func (s *State) Instances() int { return int(s.instances) }

// IdleSince returns the last time the tenant was seen active (tokens spent
// or asked for); the zero time if never.
func (s *State) IdleSince() time.Time {
	if s.lastActive == 0 {
		return time.Time{}
	}
	return time.Unix(0, s.lastActive)
}

// ReportedDemand is the demand an instance reports to Redis with a lease
// call asking for want tokens: its estimate, or, when higher (a cold start,
// a jump), the demand that a lease of want tokens is sized for.
func (p *Planner) ReportedDemand(st *State, now time.Time, want int64) float64 {
	return max(st.Demand(now), float64(want)/(p.cfg.Interval.Seconds()*p.cfg.Headroom))
}

// Input is what the edge observed of a tenant since the previous plan.
type Input struct {
	Level  int64 // tokens the counter holds now
	Missed int64 // tokens asked for by requests that were denied
	Need   int64 // largest n of those requests
	Urgent bool  // a request is waiting for tokens, or ran short
	// QuotaCheck says a quota changed in Redis (the quota version moved):
	// a tenant active here re-reads its quota now.
	QuotaCheck bool
}

// Action is what the planner wants done for a tenant.
type Action struct {
	// Expire is the number of expired tokens to take back from the
	// counter. They are dropped, not returned to Redis: a returned token
	// could be leased again with a fresh lifetime, and tokens cycled that
	// way would let a burst exceed the window bound (docs/design.md).
	Expire int64
	// Acquire is the number of tokens to ask Redis for; zero for none.
	Acquire int64
	// Read asks for a lease call even when Acquire is zero: a quota changed
	// in Redis (Input.QuotaCheck), the tenant is active here, and the call
	// (an acquire of Acquire tokens, possibly 0) reports the tenant's quota
	// override. Follow it with Granted or Failed like an acquire.
	Read bool
}

// Planner decides, for one tenant at a time, when to refresh its lease and
// how many tokens to ask for. It is pure and immutable after NewPlanner:
// safe for concurrent use on distinct States. Its only randomness, the
// jitter, is derived from the seed, the tenant and the time, so a planner
// built with the same seed makes the same plans.
type Planner struct {
	cfg  Config
	seed uint64
}

// NewPlanner returns a planner with cfg (zero fields take their defaults)
// and a seed for the jitter: give each instance its own random seed, and
// tests a fixed one.
func NewPlanner(cfg Config, seed uint64) *Planner {
	return &Planner{cfg: cfg.withDefaults(), seed: seed}
}

// Config returns the planner's configuration with defaults resolved.
func (p *Planner) Config() Config { return p.cfg }

// Init prepares st for the tenant named name, as of time now: its phase is
// xxhash(name) modulo Interval, and its first scheduled refresh the next
// time at that phase, plus jitter.
func (p *Planner) Init(st *State, name string, now time.Time) {
	*st = State{}
	st.hash = xxhash.Sum64String(name)
	st.demand.HalfLife = p.cfg.HalfLife
	st.interval = int64(p.cfg.Interval)
	st.lastActive = now.UnixNano()
	st.next = p.nextScheduled(st, now.UnixNano())
}

// Phase returns the tenant's offset within the refresh interval:
// xxhash(tenant) modulo Interval.
func (p *Planner) Phase(st *State) time.Duration {
	return time.Duration(st.hash % uint64(p.cfg.Interval))
}

// nextScheduled returns the first time strictly after now that is at the
// tenant's phase, plus its jitter.
func (p *Planner) nextScheduled(st *State, now int64) int64 {
	iv := int64(p.cfg.Interval)
	phase := int64(p.Phase(st))
	t := now - phase
	base := t - mod(t, iv) + iv + phase
	return base + p.jitter(st, base, int64(p.cfg.Jitter))
}

// jitter returns a pseudo-random duration in [0, span) for the tenant at
// the given scheduling slot.
func (p *Planner) jitter(st *State, slot, span int64) int64 {
	if span <= 0 {
		return 0
	}
	return int64(mix(st.hash^p.seed^uint64(slot)) % uint64(span))
}

// mix is the splitmix64 finalizer: a cheap, well-spread hash of x.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

func mod(a, b int64) int64 {
	m := a % b
	if m < 0 {
		m += b
	}
	return m
}

// target is the lease size for the given demand in tokens per second:
// demand over Interval times Headroom, but no more than the demand over
// what is left of a lease's lifetime once it starts being spent (a
// replacement is fetched renewHorizon before the old lease expires, and
// the old one is spent first), so that little expires unspent. An idle
// tenant's target is zero, so it stops holding tokens.
func (p *Planner) target(lim Limits, demand float64) int64 {
	usable := lim.LeaseTTL - p.renewHorizon(lim)
	horizon := min(p.cfg.Interval.Seconds()*p.cfg.Headroom, usable.Seconds())
	raw := demand * horizon
	if raw < 0.05 { // less than one token every twenty intervals: idle
		return 0
	}
	t := int64(math.Ceil(raw))
	return clamp(t, lim.MinLease, lim.MaxLease)
}

// renewHorizon is how long before a lease expires its replacement is
// fetched: two intervals, at most half the lease lifetime.
func (p *Planner) renewHorizon(lim Limits) time.Duration {
	return min(2*p.cfg.Interval, lim.LeaseTTL/2)
}

// coldTarget is the lease size before any demand has been measured: what
// the global bucket refills in one interval, within the lease limits.
func (p *Planner) coldTarget(lim Limits) int64 {
	raw := lim.Rate * p.cfg.Interval.Seconds()
	if raw > float64(lim.MaxLease) {
		return lim.MaxLease
	}
	return clamp(int64(math.Ceil(raw)), lim.MinLease, lim.MaxLease)
}

func clamp(x, lo, hi int64) int64 {
	return min(max(x, lo), hi)
}

// Plan updates st with what the edge observed at time now and returns what
// to do. Every Action it returns must be followed by Expired (when
// Expire > 0) and by Granted or Failed (when Acquire > 0).
func (p *Planner) Plan(st *State, lim Limits, now time.Time, in Input) Action {
	ns := now.UnixNano()
	spent := st.ledger.Sync(in.Level)
	st.observe(now, spent+in.Missed)
	if spent+in.Missed > 0 || in.Urgent {
		st.lastActive = ns
	}
	// Remember the largest request of the last few half-lives, so that a
	// lease always covers one such request: a low-rate tenant's demand
	// times the interval can be below a single request's size.
	switch {
	case in.Need > 0 && in.Need >= st.needMax:
		st.needMax, st.needAt = in.Need, ns
	case ns-st.needAt > 4*int64(p.cfg.HalfLife):
		st.needMax, st.needAt = in.Need, ns // forget an old maximum
	}

	var a Action
	a.Expire = st.ledger.Expire(now)
	// Tokens that expire before the refresh after next cannot be counted
	// on: replace them ahead of time, so a busy tenant never finds its
	// counter empty when an old batch goes back. (Within half a lease
	// lifetime at most, or short leases would always look expiring.)
	held := st.ledger.Total() - st.ledger.ExpiringBefore(now.Add(p.renewHorizon(lim)))

	if st.granted {
		st.target = p.target(lim, st.Demand(now))
		if st.target > 0 && st.needMax > st.target {
			st.target = min(st.needMax, lim.MaxLease)
		}
	} else {
		st.target = p.coldTarget(lim)
	}
	scheduled := ns >= st.next
	if scheduled {
		st.next = p.nextScheduled(st, ns)
	}
	// When a quota changed in Redis, a tenant active here re-reads its own
	// (a lease call reports it) unless it made one just now. Idle tenants,
	// and every tenant while no quota changes, cost Redis nothing.
	read := in.QuotaCheck && st.granted && st.failures == 0 &&
		ns-st.lastActive < int64(lim.LeaseTTL) &&
		ns-st.lastGrant >= int64(p.cfg.Interval)/4
	if ns < st.notBefore {
		// Calls are held back. A read takes no tokens, so it may go
		// while the bucket refills (never during a failure backoff).
		a.Read = read
		return a
	}
	want := st.target - held
	switch {
	case in.Urgent && in.Need > held:
		// A request is short: ask for at least what it needs.
		want = max(want, in.Need-held)
	case held < int64(float64(st.target)*p.cfg.LowWatermark):
		// Below the low watermark: prefetch now.
	case scheduled && want > 0 && want*4 >= st.target:
		// The regular refresh, when it is worth a call.
	case read:
		// The quota re-read: top up what is missing, if anything.
	default:
		return a
	}
	a.Read = read
	if want <= 0 {
		return a
	}
	a.Acquire = min(want, lim.Burst)
	return a
}

// Expired records that taken expired tokens were removed from the
// counter, leaving level.
func (p *Planner) Expired(st *State, taken, level int64) {
	st.ledger.Sync(level)
}

// Granted records a successful lease call made at time now that asked for
// asked tokens and got g; level is the counter after the grant was added.
func (p *Planner) Granted(st *State, lim Limits, now time.Time, asked int64, g lease.Grant, level int64) {
	ns := now.UnixNano()
	st.failures = 0
	st.failingSince = 0
	st.granted = true
	if asked > 0 {
		st.scarce = g.Granted < asked
	}
	if g.Instances > 0 {
		st.instances = int32(min(g.Instances, math.MaxInt32))
	}
	// The grant rate, an EWMA with the demand's half-life over irregular
	// grant times; it is this instance's recent share of the tenant.
	switch {
	case st.lastGrant == 0:
		// The first grant: a lease is sized to last about an interval.
		st.grantRate = float64(g.Granted) / p.cfg.Interval.Seconds()
	case ns > st.lastGrant:
		dt := float64(ns-st.lastGrant) / 1e9
		alpha := 1 - math.Exp2(-dt/p.cfg.HalfLife.Seconds())
		st.grantRate += alpha * (float64(g.Granted)/dt - st.grantRate)
	}
	st.lastGrant = ns
	st.ledger.Add(now.Add(lim.LeaseTTL), g.Granted)
	// Tokens spent while the call was in flight are demand too.
	st.observe(now, st.ledger.Sync(level))
	if g.Granted >= asked {
		return
	}
	// The global bucket ran dry. Do not call again until it has refilled
	// enough for a worthwhile lease: this keeps a starved tenant from
	// turning every denial into a Redis call.
	// Other instances are waiting for the same tokens. When Redis told
	// this instance its max-min fair share of the rate (among the demands
	// the active instances reported), wait until that share has accrued
	// another grant: each instance then takes about its share, and the
	// shares sum to the rate. Else wait for this instance's turn, as if
	// each of them took a lease of the same size.
	need := max(min(asked, st.target), 1)
	var wait time.Duration
	if g.Share > 0 {
		// Redis grants at most the credit this instance's share accrued,
		// up to its share of the burst: come back when half of that has
		// accrued, so that a late tick wastes no credit.
		need = max(1, min(need, int64(float64(lim.Burst)*g.Share/lim.Rate/2)))
		wait = durationOf(float64(need) / g.Share)
	} else {
		turn := need * int64(max(st.instances, 1))
		if turn/int64(max(st.instances, 1)) != need { // overflow
			turn = math.MaxInt64
		}
		wait = g.RetryAfter(turn, lim.Rate)
	}
	wait = max(wait, p.cfg.Interval/10)
	st.notBefore = satAdd(satAdd(ns, int64(wait)), p.jitter(st, ns, int64(p.cfg.Jitter)))
}

// durationOf converts seconds to a Duration, saturating.
func durationOf(sec float64) time.Duration {
	ns := sec * 1e9
	if !(ns < math.MaxInt64) {
		return math.MaxInt64
	}
	return time.Duration(ns)
}

// satAdd adds two non-negative int64s, saturating at math.MaxInt64.
func satAdd(a, b int64) int64 {
	if b > math.MaxInt64-a {
		return math.MaxInt64
	}
	return a + b
}

// Failed records a failed lease call at time now: the next call waits a
// backoff that doubles with each failure in a row, with jitter.
func (p *Planner) Failed(st *State, now time.Time) {
	ns := now.UnixNano()
	if st.failures == 0 {
		st.failingSince = ns
	}
	st.failures++
	b := p.cfg.MinBackoff << min(st.failures-1, 20)
	if b > p.cfg.MaxBackoff || b <= 0 {
		b = p.cfg.MaxBackoff
	}
	// Jitter over the upper half: [b/2, b).
	half := int64(b / 2)
	st.notBefore = ns + half + p.jitter(st, ns, half)
}

// FallbackRate returns the rate, in tokens per second, at which this
// instance may admit the tenant's requests without a lease at time now,
// while its lease calls fail (the local fallback mode), and the capacity
// of that local bucket.
//
// It starts at this instance's recent granted share of the tenant's rate
// (its grant rate when the failures began, at most Rate) and decays, with
// the configured FallbackHalfLife, toward Rate divided by the number of
// instances Redis last counted on the tenant: if every instance does the
// same, a fleet-wide outage admits about the tenant's quota, not the
// quota times the instances. The capacity is Burst over that number.
func (p *Planner) FallbackRate(st *State, lim Limits, now time.Time) (rate float64, capacity float64) {
	n := float64(max(st.instances, 1))
	fair := lim.Rate / n
	capacity = max(1, math.Floor(float64(lim.Burst)/n))
	if st.failingSince == 0 {
		return fair, capacity
	}
	share := min(st.grantRate, lim.Rate)
	elapsed := float64(now.UnixNano()-st.failingSince) / 1e9
	w := math.Exp2(-max(elapsed, 0) / p.cfg.FallbackHalfLife.Seconds())
	return fair + (share-fair)*w, capacity
}

// Idle reports whether the tenant has been inactive (no tokens spent or
// asked for) for at least d at time now.
func (p *Planner) Idle(st *State, now time.Time, d time.Duration) bool {
	return now.UnixNano()-st.lastActive >= int64(d)
}

// Drained records that the counter was emptied (tokens returned on close
// or eviction) and returns the tokens the ledger held.
func (p *Planner) Drained(st *State) int64 {
	return st.ledger.Clear()
}
