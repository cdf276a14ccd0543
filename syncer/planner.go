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
	// it doubles with each failure in a row, with jitter.
	MinBackoff, MaxBackoff time.Duration
	// HalfLife is the half-life of the demand estimate.
	HalfLife time.Duration
}

// DefaultConfig returns the defaults that zero fields of a Config take.
func DefaultConfig() Config {
	return Config{
		Interval:     100 * time.Millisecond,
		Jitter:       10 * time.Millisecond,
		Headroom:     2,
		LowWatermark: 0.5,
		MinBackoff:   10 * time.Millisecond,
		MaxBackoff:   time.Second,
		HalfLife:     bucket.DefaultHalfLife,
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
	if c.MaxBackoff < c.MinBackoff {
		c.MaxBackoff = max(d.MaxBackoff, c.MinBackoff)
	}
	if c.HalfLife <= 0 {
		c.HalfLife = d.HalfLife
	}
	return c
}

// State is the planner's record of one tenant. The zero value is a tenant
// never seen; Planner.Init gives it its schedule. It is plain data, owned
// by whoever holds the tenant's lock.
type State struct {
	hash      uint64        // xxhash of the tenant name
	phase     time.Duration // offset of the scheduled refresh within Interval
	next      time.Time     // next scheduled refresh
	notBefore time.Time     // no lease call before this: bucket dry, or backoff
	failures  int           // lease calls failed in a row
	granted   bool          // a lease call has succeeded at least once
	target    int64         // lease size last planned
	demand    bucket.Demand
	ledger    Ledger
}

// Target returns the lease size last planned for the tenant.
func (s *State) Target() int64 { return s.target }

// Failures returns how many lease calls in a row have failed.
func (s *State) Failures() int { return s.failures }

// Held returns the tokens the ledger accounts for.
func (s *State) Held() int64 { return s.ledger.Total() }

// NotBefore returns the earliest time the next lease call may be made.
func (s *State) NotBefore() time.Time { return s.notBefore }

// Next returns the time of the next scheduled refresh.
func (s *State) Next() time.Time { return s.next }

// Demand returns the demand estimate in tokens per second at time now.
func (s *State) Demand(now time.Time) float64 { return s.demand.Rate(now) }

// Input is what the edge observed of a tenant since the previous plan.
type Input struct {
	Level  int64 // tokens the counter holds now
	Missed int64 // tokens asked for by requests that were denied
	Need   int64 // largest n of those requests
	Urgent bool  // a request is waiting for tokens, or ran short
}

// Action is what the planner wants done for a tenant.
type Action struct {
	// Release is the number of expired tokens to take back from the
	// counter and return to Redis.
	Release int64
	// Acquire is the number of tokens to ask Redis for; zero for none.
	Acquire int64
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
	st.phase = time.Duration(st.hash % uint64(p.cfg.Interval))
	st.demand.HalfLife = p.cfg.HalfLife
	st.next = p.nextScheduled(st, now)
}

// Phase returns the tenant's offset within the refresh interval.
func (p *Planner) Phase(st *State) time.Duration { return st.phase }

// nextScheduled returns the first time strictly after now that is at the
// tenant's phase, plus its jitter.
func (p *Planner) nextScheduled(st *State, now time.Time) time.Time {
	iv := int64(p.cfg.Interval)
	t := now.UnixNano() - int64(st.phase)
	base := t - mod(t, iv) + iv + int64(st.phase)
	return time.Unix(0, base+p.jitter(st, base, int64(p.cfg.Jitter)))
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

// target is the lease size for the given demand in tokens per second.
// An idle tenant's target is zero, so it stops holding tokens.
func (p *Planner) target(lim Limits, demand float64) int64 {
	raw := demand * p.cfg.Interval.Seconds() * p.cfg.Headroom
	if raw < 0.05 { // less than one token every twenty intervals: idle
		return 0
	}
	t := int64(math.Ceil(raw))
	return clamp(t, lim.MinLease, lim.MaxLease)
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
// to do. Every Action it returns must be followed by Released (when
// Release > 0) and by Granted or Failed (when Acquire > 0).
func (p *Planner) Plan(st *State, lim Limits, now time.Time, in Input) Action {
	spent := st.ledger.Sync(in.Level)
	st.demand.Observe(now, spent+in.Missed)

	var a Action
	a.Release = st.ledger.Expire(now)
	// Tokens that expire before the refresh after next cannot be counted
	// on: replace them ahead of time, so a busy tenant never finds its
	// counter empty when an old batch goes back.
	held := st.ledger.Total() - st.ledger.ExpiringBefore(now.Add(2*p.cfg.Interval))

	if st.granted {
		st.target = p.target(lim, st.demand.Rate(now))
	} else {
		st.target = p.coldTarget(lim)
	}
	scheduled := !now.Before(st.next)
	if scheduled {
		st.next = p.nextScheduled(st, now)
	}
	if now.Before(st.notBefore) {
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
	default:
		return a
	}
	if want <= 0 {
		return a
	}
	a.Acquire = min(want, lim.Burst)
	return a
}

// Released records that taken expired tokens were removed from the
// counter, leaving level.
func (p *Planner) Released(st *State, taken, level int64) {
	st.ledger.Sync(level)
}

// Granted records a successful lease call made at time now that asked for
// asked tokens and got g; level is the counter after the grant was added.
func (p *Planner) Granted(st *State, lim Limits, now time.Time, asked int64, g lease.Grant, level int64) {
	st.failures = 0
	st.granted = true
	st.ledger.Add(now.Add(lim.LeaseTTL), g.Granted)
	st.ledger.Sync(level)
	if g.Granted >= asked {
		return
	}
	// The global bucket ran dry. Do not call again until it has refilled
	// enough for a worthwhile lease: this keeps a starved tenant from
	// turning every denial into a Redis call.
	need := max(min(asked, st.target), 1)
	wait := max(g.RetryAfter(need, lim.Rate), p.cfg.Interval/10)
	st.notBefore = now.Add(wait + time.Duration(p.jitter(st, now.UnixNano(), int64(p.cfg.Jitter))))
}

// Failed records a failed lease call at time now: the next call waits a
// backoff that doubles with each failure in a row, with jitter.
func (p *Planner) Failed(st *State, now time.Time) {
	st.failures++
	b := p.cfg.MinBackoff << min(st.failures-1, 20)
	if b > p.cfg.MaxBackoff || b <= 0 {
		b = p.cfg.MaxBackoff
	}
	// Full jitter over the upper half: [b/2, b).
	half := int64(b / 2)
	st.notBefore = now.Add(time.Duration(half + p.jitter(st, now.UnixNano(), half)))
}

// Drained records that the counter was emptied (tokens returned on close
// or eviction) and returns the tokens the ledger held.
func (p *Planner) Drained(st *State) int64 {
	return st.ledger.Clear()
}
