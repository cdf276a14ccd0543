package syncer

import (
	"math"
	"math/bits"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/leasequota/leasequota/bucket"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
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
	// Reserve is the length of a reservation: while a tenant is scarce,
	// its lease calls also reserve this instance's fair share of the rate
	// over Reserve from the global bucket's refill, paced at that share
	// (lease.Request.Reserve; see reserve.go). Zero (the default) reserves
	// nothing.
	Reserve time.Duration
	// Window is the instance registry's window that the limiter's lease
	// calls send (lease.WithInstance): Redis lets a starved instance's
	// credit accrue for half of it (creditCap). Zero: the credit of a
	// share of the burst only, as Redis gives callers without a window.
	Window time.Duration
	// SharePeriod turns rate shares on (share.go): while a tenant is
	// scarce, its lease calls ask for this instance's fair share of the
	// rate (lease.ShareAsk), in epochs of SharePeriod, and renew it
	// about once a period. Zero (the default): off. It replaces
	// reservations: with it, Reserve is ignored.
	SharePeriod time.Duration
	// ShareHeadroom is the part of the rate never granted as shares, in
	// [0, 1) (lease.ShareTerms.Headroom).
	ShareHeadroom float64
}

// RegistryWindow is the instance registry's window a limiter sends with
// its lease calls (lease.WithInstance) and gives its planner
// (Config.Window): how long an instance counts as active on a tenant
// after its last acquire, six lease lifetimes and a refresh interval. A
// busy instance re-acquires at least once per lease lifetime; a starved
// one at least once per half window, as its credit at Redis accrues for
// that long (creditCap), so it stays counted between its calls with a
// margin of as much again. With two lease lifetimes and an interval, the
// window before, instances of a starved tenant called once per fill
// time, more than twice as often (TestReservationsCutFleetCalls). With
// reservations (reserve > 0) the window stays that: they space a
// starved instance's calls themselves, and with the longer window 16
// instances x 50 tenants with 4 s ones used 94.8 % of the rate instead of
// 98.7 % (TestReservationsCutFleetCalls).
func RegistryWindow(leaseTTL, interval, reserve time.Duration) time.Duration {
	if reserve > 0 {
		return 2*leaseTTL + interval
	}
	return 6*leaseTTL + interval
}

// DefaultConfig returns the defaults that zero fields of a Config take,
// as they are at the default Interval: a zero Jitter takes a tenth of the
// Config's own Interval, and a zero MaxBackoff that Interval.
func DefaultConfig() Config {
	return Config{
		Interval:         100 * time.Millisecond,
		Jitter:           10 * time.Millisecond,
		Headroom:         2,
		LowWatermark:     0.5,
		MinBackoff:       10 * time.Millisecond,
		MaxBackoff:       100 * time.Millisecond,
		HalfLife:         500 * time.Millisecond,
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
	c.Reserve = max(c.Reserve, 0)
	if c.SharePeriod > 0 {
		c.SharePeriod = max(c.SharePeriod, time.Millisecond)
		c.Reserve = 0
	} else {
		c.SharePeriod = 0
	}
	if !(c.ShareHeadroom >= 0 && c.ShareHeadroom < 1) {
		c.ShareHeadroom = 0
	}
	return c
}

// State is the planner's record of one tenant. The zero value is a tenant
// never seen; Planner.Init gives it its schedule. It is plain data, owned
// by whoever holds the tenant's lock.
//
// There is one per tenant, so it is packed (96 bytes; the ledger's batches
// and the reservation are apart, nil while empty): times are stamps,
// whole milliseconds after the ledger's base time (rounded down; moved to
// a new base when the clock runs 12 days past it), rates and the largest
// request are float32 (that one rounded up), and counts that cannot matter
// beyond 65535 (instances) or 255 (failures in a row) saturate there.
type State struct {
	// The fields a round reads of a tenant it may pass by (Syncer.quiet)
	// come first: with the leaseState's first 32 bytes they fill its first
	// cache line, which a round reads ahead (chunk.visit).
	ledger     Ledger // leased tokens by grant time; its base is the stamps' base
	lastActive stamp  // last plan that saw tokens spent or asked for
	// quiet, with flagQuiet, is when a plan can first do more than observe
	// the demand (Planner.settle; rounded down).
	quiet     stamp
	flags     uint8
	failures  uint8   // lease calls failed in a row, saturating
	instances uint16  // instances active on the tenant, as Redis last said
	needMax   float32 // largest request seen lately, rounded up: a lease covers at least one

	target int64 // lease size last planned

	next      stamp // next scheduled refresh (rounded up)
	notBefore stamp // no lease call before this: bucket dry, or backoff (rounded up)
	// lastGrant is the time of the last successful lease call; before the
	// first one, that of the first failed call (see FallbackRate).
	lastGrant stamp
	needAt    stamp // when needMax was last raised
	observed  stamp // last demand observation

	// Demand: an average with the configured HalfLife (slow) and one with
	// half an Interval (fast), which catches a sustained jump; tokens/s.
	slow, fast float32
	grantRate  float32 // average tokens granted per second, kept at failure
	hash       uint32  // xxhash of the tenant name, folded to 32 bits

	// dripLag is how long before they came due the reserved tokens the
	// ledger holds were granted, at most (ms; see reservation): returns
	// add it to their age. Zero once the ledger is empty.
	dripLag int32
	// born is when the tenant was first seen (Init; Revive starts it
	// again), for the slow demand average's weight (Planner.seen).
	born stamp
	// shareAfter: no rate share is asked for before it (an ask refused;
	// and, while a share is held with flagEnding, no end is made before
	// it;
	// see Planner.Shared).
	shareAfter stamp

	// resv is what is left of the reservation (reserve.go); nil when no
	// reserved token is to come, as for every tenant without
	// Config.Reserve: 8 bytes here instead of 24.
	resv *reservation
}

// State.flags.
const (
	flagGranted   uint8 = 1 << iota // a lease call has succeeded at least once
	flagRising                      // demand jumped: use fast while above slow
	flagScarce                      // the last lease call got less than it asked for, or left the bucket with less than it got
	flagShort                       // the last lease call's fair share (Grant.Share) was below the demand: the tenant's instances ask for more than its rate
	flagEnding                      // the rate share's demand is gone: it ends at shareAfter (Planner.endAfter)
	flagQuiet                       // quiet is set: a plan before it would only observe (Planner.settle)
	flagQuietHeld                   // quiet because a call is held back: whatever the level and misses
	flagSparse                      // the last request came a lease's usable lifetime or more after the one before: no lease is kept (Planner.sparse)
)

// stampOf returns ns as a stamp of st, rounded down.
func (st *State) stampOf(ns int64) stamp { return st.ledger.stampOf(ns) }

// stampCeil returns ns as a stamp of st, rounded up: for the times before
// which something must not happen.
func (st *State) stampCeil(ns int64) stamp { return st.ledger.stampCeil(ns) }

// at returns the unix nanoseconds of a stamp of st.
func (st *State) at(s stamp) int64 { return st.ledger.at(s) }

// setClock makes sure that times near ns have stamps: it rebases st when
// ns is too far from the base.
func (st *State) setClock(ns int64) {
	if d := ns - st.ledger.base; d <= rebaseAfter && d >= -rebaseAfter {
		return
	}
	shift := st.ledger.rebaseTo(ns)
	for _, s := range []*stamp{&st.next, &st.notBefore, &st.lastActive, &st.lastGrant, &st.needAt, &st.observed, &st.born, &st.shareAfter, &st.quiet} {
		*s = shiftStamp(*s, shift)
	}
	if r := st.resv; r != nil {
		r.start, r.granted = shiftStamp(r.start, shift), shiftStamp(r.granted, shift)
		if sh := r.shared; sh != nil {
			sh.end = shiftStamp(sh.end, shift)
		}
	}
}

// Target returns the lease size last planned for the tenant.
func (s *State) Target() int64 { return s.target }

// Failures returns how many lease calls in a row have failed (saturating
// at 255).
func (s *State) Failures() int { return int(s.failures) }

// Held returns the tokens the ledger accounts for.
func (s *State) Held() int64 { return s.ledger.Total() }

// NotBefore returns the earliest time the next lease call may be made.
func (s *State) NotBefore() time.Time { return time.Unix(0, s.at(s.notBefore)) }

// Next returns the time of the next scheduled refresh.
func (s *State) Next() time.Time { return time.Unix(0, s.at(s.next)) }

// Demand returns the demand estimate in tokens per second as of the last
// plan: the average with the configured HalfLife (for a tenant seen for
// less than a few of them, its mean since: see seen), except after a
// jump.
// When the average over half an interval is at least jumpFactor times the
// slow one, the estimate is the fast average until the slow one has caught
// up with it: a jump shows in the lease within about two intervals, which
// the slow average alone (half-life 500 ms) would take seconds to follow,
// while a burst shorter than an interval moves it little. While the global
// bucket is scarce (the last call got less than it asked for) the slow
// average alone applies: larger leases would only strand tokens.
func (s *State) Demand() float64 {
	if s.flags&flagRising != 0 && s.flags&flagScarce == 0 {
		return float64(max(s.slow, s.fast))
	}
	return float64(s.slow)
}

// jumpFactor is how far above the slow average the fast one must be to
// count as a jump (see State.Demand).
const jumpFactor = 3

// jumpMin is the fewest tokens per interval a jump must reach: fewer are
// noise (a few requests landing together).
const jumpMin = 32

// seen returns the weight that the slow demand average of st's tenant
// has gathered by stamp s since the tenant was first seen (st.born):
// 1 - 2^(-age/HalfLife), the age counted as an interval at least (the
// first requests are an interval's demand, not an instant's), and 1 once
// the rest would not show in a float32.
func (p *Planner) seen(st *State, s stamp) float64 {
	age := p.age(st, s)
	if age >= 32*p.cfg.HalfLife {
		return 1
	}
	return 1 - math.Exp2(-age.Seconds()/p.cfg.HalfLife.Seconds())
}

// age is how long st's tenant has been seen by stamp s (since st.born),
// an interval at least: the first requests are an interval's demand, not
// an instant's.
func (p *Planner) age(st *State, s stamp) time.Duration {
	return max(time.Duration(s-st.born)*time.Millisecond, p.cfg.Interval)
}

// young reports whether st's tenant has been seen for less than a
// half-life by stamp s: its demand estimate, the mean since it was first
// seen, reads one request as a token an interval, sustained. A young
// tenant starts no reservation (reserves) and leases no more than its
// requests asked for (askedSoFar).
func (p *Planner) young(st *State, s stamp) bool { return p.age(st, s) < p.cfg.HalfLife }

// observe records count tokens asked for at ns.
func (p *Planner) observe(st *State, ns int64, count int64) {
	now := st.stampOf(ns)
	dt := time.Duration(now-st.observed) * time.Millisecond
	// The slow average starts at zero, and for its first half-lives it
	// leans toward that start: divided by the weight it has gathered
	// (seen), it is the mean over the time the tenant has been seen.
	st.slow = float32(bucket.UpdateRate(float64(st.slow)*p.seen(st, st.observed), count, dt, p.cfg.HalfLife) / p.seen(st, now))
	st.fast = float32(bucket.UpdateRate(float64(st.fast), count, dt, p.cfg.Interval/2))
	st.observed = max(st.observed, now)
	fast, slow := float64(st.fast), float64(st.slow)
	switch {
	case fast >= jumpFactor*slow && fast*p.cfg.Interval.Seconds() >= jumpMin:
		st.flags |= flagRising
	case fast <= 1.1*slow:
		st.flags &^= flagRising
	}
}

// ReportedDemand is the demand an instance reports to Redis with a lease
// call asking for want tokens: its estimate, or, when higher (a cold start,
// a jump), the demand that a lease of want tokens is sized for.
//
// A call that reserves (see reserves) reports the estimate alone: Redis
// sizes the reservation by the share the report earns, and a lease's
// worth over an interval would earn a reservation many times the demand.
func (p *Planner) ReportedDemand(st *State, now time.Time, want int64) float64 {
	if p.reserves(st) {
		return st.Demand()
	}
	return max(st.Demand(), float64(want)/(p.cfg.Interval.Seconds()*p.cfg.Headroom))
}

// reserves reports whether a scarce tenant's next lease call reserves
// (Config.Reserve): its demand is sustained (over the instances it
// shares the tenant with, as this one's, a token an interval at least: a
// request now and then is served at once, not paced) and runs above what
// it has been granted lately (starved, not short after a cold start or a
// lost reply), or it is renewing a reservation. (This instance's demand
// alone, the threshold before, kept every instance of a tenant of Rate
// 100 offered 3x over 32 instances, 9.4 requests a second each, from
// reserving: TestReservationsCutFleetCalls. A token over the
// reservation's length made instances of quiet tenants reserve at a
// trickle, and merged reservations at such a pace held their next call
// back for tens of seconds: TestSimulation's seeds 173 and 219.)
//
// A first reservation also waits until the tenant is no longer young
// (seen for a half-life): before that, its demand reads a single request
// as a token an interval, sustained. Four instances whose first requests came
// together after an outage, one request each, reserved tens of tokens
// apiece on that estimate, and the last one's request waited past its
// deadline behind their reservations (TestSimulation's seeds 37861,
// 47506 and 50897; TestNewTenantDoesNotReserve).
func (p *Planner) reserves(st *State) bool {
	if p.cfg.Reserve <= 0 || st.flags&flagScarce == 0 {
		return false
	}
	d := st.Demand()
	return d*float64(max(st.instances, 1))*p.cfg.Interval.Seconds() >= 1 && (st.Reserved() > 0 || d > float64(st.grantRate) && !p.young(st, st.observed))
}

// noRoomOutlived reports whether st's calls are held back only by what
// the bucket's reply said, with reservations on, to a tenant that is no
// longer starved, long enough ago that the bucket would have refilled:
// then a request that waits may call through the hold. Why: a reply that
// found the bucket's refill committed to other instances' reservations
// (Reserved) holds the next call until its turn among them, up to the
// reservation's length and more (the others' turns), and it holds every
// call, not only the next reservation. When the tenant's demand fell back
// below what it was granted meanwhile, nothing takes that hold's place:
// three instances starting together on a tenant of Rate 100, Burst 10,
// one of them told at 0.68 s to wait for room until 2.06 s, asked again
// at 1.42 s by one request while the bucket stood at 9 tokens, and that
// WaitN waited out the whole hold (TestSimulation, seed 1066877). A
// starved tenant (reserves' demand test) keeps its hold: its calls would
// find no room again. So does a tenant with reserved tokens to come, or
// in a failure's backoff.
func (p *Planner) noRoomOutlived(st *State, lim quota.Quota, ns int64) bool {
	if p.cfg.Reserve <= 0 || st.flags&flagScarce == 0 || st.failures > 0 || st.Reserved() > 0 {
		return false
	}
	if d := st.Demand(); d*float64(max(st.instances, 1))*p.cfg.Interval.Seconds() >= 1 && d > float64(st.grantRate) {
		return false
	}
	fill := max(durationCeil(float64(lim.Burst)/lim.Rate), p.cfg.Interval)
	return ns-st.at(st.lastGrant) >= int64(fill)
}

// Input is what the edge observed of a tenant since the previous plan.
type Input struct {
	Level  int64 // tokens the counter holds now
	Missed int64 // tokens asked for by requests that were denied, less those of requests admitted after a wait (Tenant.Unmiss): may be negative
	Need   int64 // largest n of those requests
	Urgent bool  // a request is waiting for tokens, or ran short
	// QuotaCheck says a quota changed in Redis (the quota version moved):
	// a tenant active here re-reads its quota now.
	QuotaCheck bool
	// QuotaSeen is when (unix nanoseconds) the read that found the quota
	// version moved ended, with QuotaCheck: a call made within a quarter
	// interval spares the tenant its re-read only if it was planned after
	// that (Redis ran it after the change). 0 when unknown; math.MaxInt64
	// when the round that saw the move found the tenant locked
	// (flagReread): no call made so far spares it, since Redis may have
	// run the one in flight then before the change.
	QuotaSeen int64
	// Recovered says Redis answers again after the tenant's lease calls
	// failed: the failure backoff no longer holds the call back.
	Recovered bool
	// Fleet is the number of instances assumed for a tenant that this
	// instance has not leased yet (the most any lease call reported on a
	// tenant, or Options.Instances): a first lease is at most an even
	// share of the burst among them (coldTarget). 0 when unknown.
	Fleet int
	// Refunded says tokens refunded here go back to the tenant's bucket
	// before this plan's acquire (a round makes its returns first, and a
	// refill the tenant's queued ones): a
	// wait for the bucket to refill no longer holds the call back (a
	// failure backoff still does).
	Refunded bool
}

// Action is what the planner wants done for a tenant.
type Action struct {
	// Expire is the number of expired tokens to take back from the
	// counter, and ExpiredGranted when the oldest of them was granted. The
	// edge returns them to Redis as an aged return (lease.ReleaseRequest
	// with Age now - ExpiredGranted): the bucket credits only what it
	// would hold had they never been leased, so cycling tokens through
	// returns cannot lift a window above the bound (docs/design.md).
	Expire         int64
	ExpiredGranted time.Time
	// ExpiredGrant is the ID of the oldest grant the expired tokens come
	// from, for the return to name (lease.ReleaseRequest.Grant); zero when
	// unknown.
	ExpiredGrant lease.GrantID
	// Acquire is the number of tokens to ask Redis for; zero for none.
	Acquire int64
	// ForNeed is what a short request lacks beyond what the tenant holds
	// (Input.Urgent with Input.Need beyond it), when Acquire was asked
	// for it; zero for none. A refill (the call the request waits for)
	// whose partial grant left the request short then holds the tenant's
	// next call back only until the bucket has refilled what the call
	// still lacks (GrantedFor).
	ForNeed int64
	// Reserve is the reservation length to send with the acquire
	// (lease.Request.Reserve): zero but while the tenant is scarce and
	// Config.Reserve is set.
	Reserve time.Duration
	// Unobserved is the tokens of misses taken back (Input.Missed below
	// zero) that no spend seen by the plan offset: the edge gives them
	// back to the tenant's misses (Tenant.Unmiss), for a later plan to
	// offset against the spends it sees. A multi-tenant decision that
	// spent a tenant's tokens after a wait, gave them back while another
	// tenant was short and spent them again later would otherwise count
	// that request twice: a closed loop of WaitAll over two tenants
	// counted the first tenant's demand at 35.8 a second while it was
	// admitted 18.7 a second (TestWaitAllCountsOnceInDemand).
	Unobserved int64
	// Drip is the number of reserved tokens that came due (see
	// reservation): the edge adds them to the counter before anything
	// else. The ledger already holds them.
	Drip int64
	// Share is the rate share operation to send with the call
	// (lease.Request.Share; share.go), ShareTerms the terms of an ask, and
	// ShareFrom the From of the share an end ends. An ask or an end
	// makes the call even when Acquire is zero (a renewal). Follow it with
	// Shared once the reply is in.
	Share      lease.ShareOp
	ShareTerms lease.ShareTerms
	ShareFrom  time.Time
	// cut is the rate share's accrual that the plan stopped for an ask
	// (State.cutShare), nil for none: a call not made (Skipped; or
	// refused by the circuit breaker, or dropped as Run ended) gives it
	// back (State.uncut), since Redis still holds that share.
	cut *reservation
	// Read asks for a lease call even when Acquire is zero: a quota changed
	// in Redis (Input.QuotaCheck), the tenant is active here, and the call
	// (an acquire of Acquire tokens, possibly 0) reports the tenant's quota
	// override. Follow it with Granted or Failed like an acquire.
	Read bool
}

// Calls reports whether a carries out a lease call: for tokens, a quota
// re-read, or a rate share's operation.
func (a Action) Calls() bool { return a.Acquire > 0 || a.Read || a.Share != lease.ShareKeep }

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
	ns := now.UnixNano()
	*st = State{hash: hashOf(name)}
	st.ledger.init(ns)
	st.lastActive = st.stampOf(ns)
	st.observed = st.lastActive
	st.born = st.lastActive
	st.next = st.stampCeil(p.nextScheduled(st, ns))
}

// hashOf returns xxhash of a tenant's name folded to 32 bits: the hash
// of its phase and jitter (State.hash).
func hashOf(name string) uint32 {
	h := xxhash.Sum64String(name)
	return uint32(h>>32) ^ uint32(h)
}

// dormantHalfLives is how many of the demand's half-lives a tenant must
// have been idle to go dormant (see Dormant): its estimates are down to
// 2^-16 of what they were, about what a float32 average would keep.
const dormantHalfLives = 16

// Dormant reports whether st's tenant may drop its State at time now, lim
// being its quota in force, and be revived later (Revive) with nothing
// lost that a plan would use: it has been idle for dormantHalfLives
// half-lives of the demand and for a lease lifetime (so that a quota
// change would not have it re-read its quota), and holds no leased or
// reserved token, no failure streak and no call held back. What it drops
// beyond that: its demand and grant rate (2^-16 of their last values, or
// less), the largest request (forgotten after four half-lives anyway),
// the instances on the tenant and whether its bucket was scarce, both of
// which the next grant says again.
func (p *Planner) Dormant(st *State, lim quota.Quota, now time.Time) bool {
	ns := now.UnixNano()
	return st.ledger.Total() == 0 && st.resv == nil && st.failures == 0 &&
		ns >= st.at(st.notBefore) && ns-st.at(st.lastActive) >= int64(p.dormantAfter(lim))
}

// dormantAfter is how long a tenant of quota lim must be idle before it
// may go dormant (Dormant).
func (p *Planner) dormantAfter(lim quota.Quota) time.Duration {
	return max(dormantHalfLives*p.cfg.HalfLife, lim.LeaseTTL)
}

// Revive prepares st for a dormant tenant named name at time now: as Init
// does for a new tenant, but active last at lastActive (unix nanoseconds)
// and, when granted, as having leased before, its last grant long ago.
func (p *Planner) Revive(st *State, name string, now time.Time, lastActive int64, granted bool) {
	p.Init(st, name, now)
	st.lastActive = st.stampOf(lastActive)
	if granted {
		st.flags |= flagGranted
		st.lastGrant = stampMin
	}
}

// Phase returns the tenant's offset within the refresh interval:
// xxhash(tenant), folded to 32 bits, scaled to [0, Interval).
func (p *Planner) Phase(st *State) time.Duration {
	hi, lo := bits.Mul64(uint64(st.hash), uint64(p.cfg.Interval))
	return time.Duration(hi<<32 | lo>>32)
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
	return int64(mix(uint64(st.hash)^p.seed^uint64(slot)) % uint64(span))
}

// sparse records whether the requests that a plan at ns observes, asked
// tokens since the last plan that saw any, came a lease's usable lifetime
// or more apart on average (flagSparse; asked over the largest request
// lately, needMax, or over need, the largest of the plan's own requests
// (Input.Need), when that is larger, counts them, at least one). Why
// need: needMax is forgotten after 4 half-lives (2 s by default), before
// a sparse tenant's next request, and the plan takes that request's size
// into it only after this count, so requests of 2 tokens 3 s apart with
// 2 s leases read as 2 requests, not sparse, at 2 lease calls and 3
// expired tokens a request (TestSparseCountsRequestsOfSeveralTokens). Tokens leased for such a
// tenant expire before its next request: a tenant of one request every
// 5 s on an instance, with 2 s leases, made two lease calls a request (the
// lease its request waited for, then a top-up as the demand estimate,
// raised by that one request for a second or so, asked for) and let two
// tokens expire. While sparse, its lease is sized at nothing, so the
// syncer keeps none (Tenant.Cold): a request waits for a lease of its own
// size (at least MinLease), as a first request does, one call a request,
// as a limiter that calls Redis for each request makes. Requests closer
// together end it. A tenant never granted has its cold target instead,
// and its first requests are not sparse. (The gap alone would not do: a
// tenant whose calls are held back is passed by while its requests miss,
// and the plan after the hold sees them all at once.)
func (p *Planner) sparse(st *State, lim quota.Quota, ns, asked, need int64) {
	requests := max(float64(asked)/max(float64(st.needMax), float64(need), 1), 1)
	gap := float64(ns - st.at(st.lastActive))
	if st.flags&flagGranted != 0 && gap >= requests*float64(p.usableLifetime(lim)) {
		st.flags |= flagSparse
	} else {
		st.flags &^= flagSparse
	}
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

// target is the lease size for the given demand in tokens per second,
// with instances active on the tenant: demand over Interval times
// Headroom, but no more than the demand over what is left of a lease's
// lifetime once it starts being spent (a replacement is fetched
// renewHorizon before the old lease expires, and the old one is spent
// first), so that little expires unspent. A target under worthwhileLease
// (a low-rate tenant) is sized in time as well: as many tokens as the
// demand spends in half that usable lifetime, up to worthwhileLease and
// this instance's even share of the burst (so that fair shares do not
// move). An idle tenant's target is zero, so it stops holding tokens.
func (p *Planner) target(lim quota.Quota, demand float64, instances uint16) int64 {
	usable := p.usableLifetime(lim)
	horizon := min(p.cfg.Interval.Seconds()*p.cfg.Headroom, usable.Seconds())
	raw := demand * horizon
	if raw < 0.05 { // a twentieth of a token over the horizon (a token every 40 intervals by default): idle
		return 0
	}
	t := clamp(int64(math.Ceil(raw)), lim.MinLease, lim.MaxLease)
	if t < worthwhileLease {
		timed := int64(math.Ceil(demand * usable.Seconds() / 2))
		t = max(t, min(timed, worthwhileLease, burstShare(lim, int64(instances)), lim.MaxLease))
	}
	return t
}

// lifetimeDemand is what the demand spends over the usable part of a
// lease's lifetime (see target), rounded up and at most MaxLease: the
// most a lease should hold, or the rest expires unspent.
func (p *Planner) lifetimeDemand(lim quota.Quota, demand float64) int64 {
	return int64(math.Ceil(min(demand*p.usableLifetime(lim).Seconds(), float64(lim.MaxLease))))
}

// usableLifetime is what is left of a lease's lifetime once it starts
// being spent: a replacement is fetched renewHorizon before it expires,
// and the old lease is spent first.
func (p *Planner) usableLifetime(lim quota.Quota) time.Duration {
	return lim.LeaseTTL - p.renewHorizon(lim)
}

// renewHorizon is how long before a lease expires its replacement is
// fetched: two intervals, at most half the lease lifetime.
func (p *Planner) renewHorizon(lim quota.Quota) time.Duration {
	return min(2*p.cfg.Interval, lim.LeaseTTL/2)
}

// coldTarget is the lease size before any demand has been measured: what
// the global bucket refills in one interval, within the lease limits, and
// no more than an even share of the burst among fleet instances (the
// fleet size assumed for a tenant not leased here yet, Input.Fleet; 0 or
// 1: no cap). Why the cap: the instances of a fleet see a tenant's first
// requests together (after an outage, or when its traffic starts), and
// first leases of an interval's refill each took the burst between the
// first few: at 4 instances on a tenant of Rate 100 and Burst 10 with a
// 50 ms interval, three took 5 tokens each for one request apiece, and
// the fourth's request waited past its deadline (TestSimulation, seed
// 18429).
func (p *Planner) coldTarget(lim quota.Quota, fleet int) int64 {
	t := lim.MaxLease
	if raw := lim.Rate * p.cfg.Interval.Seconds(); raw < float64(lim.MaxLease) {
		t = int64(math.Ceil(raw)) // converted only below MaxLease: it fits
	}
	if fleet > 1 {
		t = min(t, burstShare(lim, int64(fleet)))
	}
	return clamp(t, lim.MinLease, lim.MaxLease)
}

// askedSoFar returns, for a young tenant, about the tokens its requests
// asked for since it was first seen: its demand estimate, the mean since
// then, times its age, rounded (the average weighs the requests by their
// age, so a count reads a little above itself). A young tenant's lease
// holds no more: leases sized by its estimate after a first request each
// took a burst shared by instances whose first requests came together
// (TestSimulation, seed 92039: after an outage, three instances each
// asked for two more tokens of a burst of 10 once their one request was
// served, and the fourth's request waited past its deadline).
func (p *Planner) askedSoFar(st *State, ns int64) (asked int64, young bool) {
	now := st.stampOf(ns)
	if !p.young(st, now) {
		return 0, false
	}
	return int64(math.Round(float64(st.slow) * p.age(st, now).Seconds())), true
}

// burstShare is an instance's even share of lim's burst among n instances
// (n < 1 counts as 1), rounded up.
func burstShare(lim quota.Quota, n int64) int64 {
	return ceilDiv(lim.Burst, max(n, 1))
}

// worthwhileLease is the lease, in tokens, that a low-rate tenant's
// calls aim for when its demand and burst allow (see Plan): leases sized
// for two intervals of demand alone would take a call for every two or
// three tokens such a tenant spends, against issue #16's goal of 80
// calls or fewer per 1,000 decisions (12.5 tokens a call).
const worthwhileLease = 16

// ceilDiv returns a / b rounded up, for a >= 0 and b > 0.
func ceilDiv(a, b int64) int64 { return a/b + min(a%b, 1) }

func clamp(x, lo, hi int64) int64 {
	return min(max(x, lo), hi)
}

// Plan updates st with what the edge observed at time now and returns what
// to do. Every Action it returns must be followed by Expired (when
// Expire > 0) and by Granted, Failed or Skipped (when Acquire > 0).
func (p *Planner) Plan(st *State, lim quota.Quota, now time.Time, in Input) Action {
	a := p.plan(st, lim, now, in)
	p.settle(st, lim, now.UnixNano(), a)
	return a
}

// plan is Plan but for recording when the next plan can first act
// (settle).
func (p *Planner) plan(st *State, lim quota.Quota, now time.Time, in Input) Action {
	ns := now.UnixNano()
	st.setClock(ns)
	// Missed is negative when requests admitted after a wait took back
	// their misses (Tenant.Unmiss) that an earlier plan observed. What
	// their spends seen here do not offset (a multi-tenant decision gave
	// the tokens back, to spend them again later) goes back to the edge
	// (Action.Unobserved) for a later plan to offset.
	var a Action
	asked := st.ledger.Sync(in.Level) + in.Missed
	if asked < 0 {
		a.Unobserved, asked = -asked, 0
	}
	p.observe(st, ns, asked)
	if asked > 0 && ns >= st.at(st.notBefore) {
		// Not judged while calls are held back: rounds pass such a
		// tenant by while its requests miss (quiet.go), and the first
		// plan in the hold may see a few of them against a large request
		// of before (TestHeldBackTenantNotSparse).
		p.sparse(st, lim, ns, asked, in.Need)
	}
	if asked > 0 || in.Urgent {
		st.lastActive = st.stampOf(ns)
	}
	// Remember the largest request of the last few half-lives, so that a
	// lease always covers one such request: a low-rate tenant's demand
	// times the interval can be below a single request's size.
	switch {
	case in.Need > 0 && float64(in.Need) >= float64(st.needMax):
		st.needMax, st.needAt = ceil32(in.Need), st.stampOf(ns)
	case ns-st.at(st.needAt) > 4*int64(p.cfg.HalfLife):
		st.needMax, st.needAt = ceil32(in.Need), st.stampOf(ns) // forget an old maximum
	}

	reserve := false // the acquire may reserve (Action.Reserve)
	a.Expire, a.ExpiredGranted, a.ExpiredGrant = st.ledger.Expire(now, lim.LeaseTTL)
	if a.Expire > 0 {
		a.ExpiredGranted = a.ExpiredGranted.Add(-st.lag())
	}
	if st.ledger.Total() == 0 {
		st.dripLag = 0 // no reserved token held: the lag starts over
	}
	// Reserved tokens that came due join the lease, as a batch of their
	// own: they expire LeaseTTL after now. It names no grant (as a rate
	// share's drips do not): a return of it is aged from its stamp less
	// the drip lag. Named by the grant that reserved them, every drip
	// batch and that call's lease carried one ID, so the ledger's front
	// (Tenant.Front) stayed the same when the oldest of them left, and a
	// give-back or a refund that trusted it put tokens back past their
	// lease (TestGiveBackAcrossDripsOfOneGrant).
	if st.dropFallen(lim.Rate) && st.failures == 0 && st.at(st.notBefore) > ns {
		// The quota's rate fell below the one the reserved tokens still
		// to come were reserved under: none of them comes due, and the
		// hold for their renewal (up to the reservation's length) goes
		// with them, so that the tenant calls for the new rate's tokens
		// now. (A hold a reply set for the dry bucket goes too: one call
		// finds out again.)
		st.notBefore = st.stampOf(ns)
	}
	if sh := st.share(); sh != nil && lim.Rate < float64(sh.under) {
		// A rate share granted under a higher rate: none of its tokens
		// comes due from now on (shareOp ends it), whether or not this
		// plan may call. Why here: a plan held back by a failure's
		// backoff returns before shareOp's end stops the accrual, and
		// the share went on at the old pace until the backoff ended, up
		// to a refresh interval: 630 tokens of a share of 900 a second
		// after the rate fell from 1,000 to 10, the breaker refusing
		// its calls (TestShareStopsWhenTheRateFallsInABackoff).
		st.resv.pace = 0
	}
	if n, granted := st.takeDue(st.stampOf(ns)); n > 0 {
		st.ledger.Add(now, n, 0)
		st.dripLag = max(st.dripLag, int32(st.stampOf(ns)-granted))
		a.Drip = n
	}
	// Tokens that expire before the refresh after next cannot be counted
	// on: replace them ahead of time, so a busy tenant never finds its
	// counter empty when an old batch goes back. (Within half a lease
	// lifetime at most, or short leases would always look expiring.)
	// Reserved tokens still to come count as held: they come without a
	// call.
	held := st.ledger.Total() - st.ledger.ExpiringBefore(now.Add(p.renewHorizon(lim)), lim.LeaseTTL) + st.Reserved()

	granted := st.flags&flagGranted != 0
	if granted && st.flags&flagSparse != 0 {
		// Sparse: a request's lease is what it asks for (Input.Need,
		// below; at least MinLease), and no more is kept.
		st.target = 0
	} else if granted {
		st.target = p.target(lim, st.Demand(), st.instances)
		if asked, young := p.askedSoFar(st, ns); young {
			st.target = min(st.target, max(asked, 1))
		}
		if need := int64Of(st.needMax); st.target > 0 && need > st.target {
			st.target = min(need, lim.MaxLease)
		}
		if st.flags&flagScarce != 0 && st.target > 0 {
			// Scarce: each call waits for the credit to refill (Granted),
			// so ask for all of it, this instance's share of the burst
			// (Burst over the instances, for the even split of an
			// over-demanded tenant), rather than a lease sized for an
			// interval of demand; but no more than the demand spends in
			// a lease's usable lifetime: the rest would expire, and a
			// full grant of it would hold the next call back until the
			// share had accrued it all (Granted).
			// With more than 4 instances the credit may be more than
			// that (creditCap), estimated here from the grant rate,
			// this instance's recent share.
			credit := max(burstShare(lim, int64(st.instances)), int64(p.creditCap(lim, float64(st.grantRate))))
			st.target = max(st.target, min(credit, p.lifetimeDemand(lim, st.Demand())))
			// With reservations, the call may also reserve this
			// instance's fair share of the rate over their length
			// (Redis sizes it), paced (see reserves). Not while
			// reserved tokens are still to come and the hold for
			// their renewal is in force: a plan that goes past it (a
			// refund's, Input.Refunded; a recovery's) reserved again
			// at once, merged behind them, and an instance whose
			// plans saw refunds took most of the bucket's refill
			// ahead of the others: 2,089 tokens of a Rate of 100 over
			// 20 s with a share of 50, 1,092 still to come at once
			// (TestRefundDoesNotStackReservations).
			reserve = p.reserves(st) && (st.Reserved() == 0 || ns >= st.at(st.notBefore))
		}
	} else {
		st.target = p.coldTarget(lim, in.Fleet)
	}
	scheduled := ns >= st.at(st.next)
	if scheduled {
		st.next = st.stampCeil(p.nextScheduled(st, ns))
	}
	// When a quota changed in Redis, a tenant active here re-reads its own
	// (a lease call reports it) unless it made one just now, after the
	// change was seen (Input.QuotaSeen: one planned before may have run
	// before the change, and one in flight then always may). Idle
	// tenants, and every tenant while no quota changes, cost Redis
	// nothing.
	read := in.QuotaCheck && granted && st.failures == 0 &&
		ns-st.at(st.lastActive) < int64(lim.LeaseTTL) &&
		(ns-st.at(st.lastGrant) >= int64(p.cfg.Interval)/4 || st.at(st.lastGrant) < in.QuotaSeen)
	// A rate share due for renewal (or to end) makes a call of its own;
	// an ask otherwise goes with a call made for tokens.
	op, shareDue := p.shareOp(st, lim, ns)
	if ns < st.at(st.notBefore) && !(in.Recovered && st.failures > 0) && !(in.Refunded && st.failures == 0) && !(shareDue && st.failures == 0) &&
		!(in.Urgent && p.noRoomOutlived(st, lim, ns)) {
		// Calls are held back. A read takes no tokens, so it may go
		// while the bucket refills (never during a failure backoff).
		a.Read = read
		return a
	}
	if st.share() != nil && !shareDue && !read {
		// A rate share held: its tokens come due without calls, and
		// tokens beyond it come with its renewal (share.go). A call for
		// tokens in between would find the bucket refilling at the
		// headroom only, and the credit at Redis at the fair share
		// less the share: little or nothing, at a call's cost.
		return a
	}
	want := st.target - held
	switch {
	case in.Urgent && in.Need > held:
		// A request is short: ask for at least what it needs (a sparse
		// tenant's lease, no less than MinLease).
		want = max(want, in.Need-held)
		a.ForNeed = in.Need - held
		if st.flags&flagSparse != 0 {
			want = max(want, lim.MinLease-held)
		}
	case held < int64(float64(st.target)*p.cfg.LowWatermark):
		// Below the low watermark: prefetch now.
	case scheduled && want > 0 && want >= topUpNeed(st):
		// The regular refresh, when it is worth a call (topUpNeed).
	case read:
		// The quota re-read: top up what is missing, if anything.
	case reserve:
		// Scarce, with reservations: the reserved tokens are about to
		// run out (Reserved set notBefore so), or none came: ask for
		// the next, with at least a token for now.
		want = max(want, 1)
	case shareDue:
		// The rate share's renewal, or its end: what the demand beyond
		// the share uses is asked for with it, counted without the
		// share's tokens still to come (the renewal replaces them).
		want = st.target - (held - st.Reserved())
	default:
		return a
	}
	a.Read = read
	if op != lease.ShareKeep && (want > 0 || read || shareDue) {
		// The share's accrual stops before the call reaches Redis,
		// which ends or replaces the share.
		a.Share = op
		if op == lease.ShareEnd {
			a.ShareFrom = st.stopShare()
		} else {
			a.ShareFrom, a.cut = st.cutShare()
		}
		if op == lease.ShareAsk {
			a.ShareTerms = p.shareTerms(st, lim, now.UnixNano(), in.Fleet)
		}
		if want <= 0 {
			return a
		}
	}
	if want <= 0 {
		return a
	}
	a.Acquire = min(want, lim.Burst)
	if reserve {
		a.Reserve = p.reserveLength(st, now.UnixNano(), p.ReportedDemand(st, now, a.Acquire))
	}
	return a
}

// topUpNeed is the fewest tokens a scheduled refresh of st's lease asks
// for, below which the call is not worth it: a quarter of the target; half
// of it for a scarce tenant, whose credit at Redis accrues slowly (a top-up
// of a few tokens each interval would turn its share into calls; the low
// watermark still refills it before it runs dry); and for a small target
// that is not scarce (below worthwhileLease: a demand of a few tokens a
// second on this instance, as when many instances share a tenant within
// its quota) all but a token, so that the lease is topped up once at most
// one token is left. A top-up of such a lease by a quarter of its target
// is a token or two, so scheduled refreshes made about one lease call per
// token spent: in the fleet simulation's 16 instances x 1,000 tenants
// offered 0.9 times their rate (5.6 requests a second per pair), 1.00
// script run per admitted request, 3.4 times redis_rate's Redis CPU per
// decision by the cost model; with all but a token, 0.50. The low
// watermark refills such a lease only once it is empty (target *
// LowWatermark, cut to a whole token, is 1 for a target of 3), so the
// scheduled refresh at one token left is what keeps requests from finding
// it empty while the call is out.
func topUpNeed(st *State) int64 {
	switch {
	case st.flags&flagScarce != 0:
		return ceilDiv(st.target, 2)
	case st.target < worthwhileLease:
		return max(st.target-1, 1)
	default:
		return ceilDiv(st.target, 4)
	}
}

// Raised lifts st's hold-back after its tenant's quota rose (a higher
// rate or burst in force), unless a failure's backoff holds it: the hold
// was reckoned from the old quota's refill (a dry bucket's, or a scarce
// grant's wait for its share), up to a day, and kept the tenant from
// calling for what the new quota makes, though a change applies within a
// poll and two rounds (TestRaisedQuotaLiftsTheHold: a rate raised from
// 0.01 to 1,000 a second admitted nothing for a minute).
func (p *Planner) Raised(st *State, now time.Time) {
	ns := now.UnixNano()
	st.setClock(ns)
	if st.failures == 0 && st.at(st.notBefore) > ns {
		st.notBefore = st.stampOf(ns)
		// A plan since the hold began left the tenant quiet until the
		// old hold's end (settle): rounds would pass it by till then.
		st.flags &^= flagQuiet | flagQuietHeld
	}
}

// Expired records that taken expired tokens were removed from the
// counter, leaving level.
func (p *Planner) Expired(st *State, taken, level int64) {
	st.ledger.Sync(level)
}

// Granted records a successful lease call made at time now that asked for
// asked tokens and got g; level is the counter after the grant's tokens
// for now (g.Granted less g.Reserved) were added. Reserved tokens are
// recorded by Reserved, which follows. It is GrantedFor of a call that
// was not asked for a short request.
func (p *Planner) Granted(st *State, lim quota.Quota, now time.Time, asked int64, g lease.Grant, level int64) {
	p.GrantedFor(st, lim, now, now, asked, 0, g, level)
}

// GrantedFor is Granted, forNeed saying what the short request that
// waits for the call lacked when it was asked for (Action.ForNeed; 0 for
// none), and debited from when the grant's tokens live: no earlier than
// now, and no later than Redis ran the call (the Syncer dates it by the
// server's clock: serverclock.go). Granted dates them at now.
func (p *Planner) GrantedFor(st *State, lim quota.Quota, now, debited time.Time, asked, forNeed int64, g lease.Grant, level int64) {
	ns := now.UnixNano()
	st.setClock(ns)
	st.failures = 0
	// Reserved tokens come later (Reserved): the lease gets the rest now.
	// A tenant that needed a reservation stays scarce, and so does one
	// whose full grant left the bucket with less than it took, or, scarce
	// already, whose fair share is below its demand while the bucket was
	// not full (the instances together ask for more than the rate: a
	// grant served in full from a bucket that refilled while they waited
	// for their credit is no sign of plenty; a full one is, say when the
	// others have gone): the next such call would not be served in full,
	// and sizing the lease by the demand again would bring top-ups of a
	// few tokens. (Clearing it whenever a grant left the bucket half full
	// or more took the fleet simulation's 16 x 1,000 from 7,454 script
	// runs a second to 9,729.)
	immediate := g.Immediate()
	wasScarce := st.flags&flagScarce != 0
	if asked > 0 {
		short := g.Share > 0 && g.Share < st.Demand() && g.Tokens+float64(immediate) < float64(lim.Burst) && p.spans(lim, g.Share)
		if immediate < asked || g.Tokens < float64(immediate) || g.Reserved > 0 || (wasScarce && short) {
			st.flags |= flagScarce
		} else {
			st.flags &^= flagScarce
		}
	}
	if g.Instances > 0 {
		st.instances = uint16(min(g.Instances, math.MaxUint16))
	}
	if g.Share > 0 && g.Share < st.Demand() {
		st.flags |= flagShort
	} else {
		st.flags &^= flagShort
	}
	// The grant rate, an average with the demand's half-life over
	// irregular grant times; it is this instance's recent share of the
	// tenant.
	if st.flags&flagGranted == 0 {
		// The first grant: a lease is sized to last about an interval.
		st.grantRate = float32(float64(g.Granted) / p.cfg.Interval.Seconds())
	} else if dt := time.Duration(ns - st.at(st.lastGrant)); dt > 0 {
		st.grantRate = float32(bucket.UpdateRate(float64(st.grantRate), g.Granted, dt, p.cfg.HalfLife))
	}
	st.flags |= flagGranted
	st.lastGrant = st.stampOf(ns)
	// Tokens spent while the call was in flight are demand too.
	p.observe(st, ns, st.ledger.Sync(level-immediate))
	st.ledger.Add(debited, immediate, g.ID())
	if g.Granted >= asked {
		if st.flags&flagScarce != 0 && g.Share > 0 && g.Instances > 1 && immediate > 0 {
			// Served in full from a scarce bucket that other instances
			// share: the grant took the credit this instance's share
			// had accrued, up to what it asked. Come back once the
			// share has accrued the grant again (less an interval's
			// accrual, and at least half), as after a partial grant: a
			// call in between would find the credit short and bring a
			// top-up of a few tokens. (Alone on a bucket, an instance's
			// credit is the bucket's refill, which a short request may
			// call for as soon as it holds what it needs.)
			p.holdBack(st, ns, p.spread(st, lim, g.Share, ns, !wasScarce, p.shareWait(lim, g.Share, p.accrued(float64(immediate), g.Share))))
		}
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
	if forNeed > g.Granted {
		// The call was for a request that waits (Action.ForNeed), and
		// the grant left it short: what
		// it still lacks is what it asked less what it got (held here,
		// or back in the bucket once it expires), and a call before the
		// bucket holds that cannot serve it, nor one long after it help
		// it. Counted as the whole ask, a WaitN(60) that got 40 of 60
		// from an emptied bucket (Rate 1, Burst 100, MaxLease 60, alone)
		// held the tenant's calls back 60 s, the bucket holding the 20 it
		// lacked at 20 s: its denial said RetryAfter 50 s at 10 s, and
		// AllowNWithin with 11 s to spare did not wait
		// (TestPartialGrantHoldCountsTheGrant in the root package). A
		// lease's calls keep the whole ask: coming back for the rest
		// would take it a few tokens at a time
		// (TestScarceAsksForItsShareOfTheBurst). So does a waiting
		// request's call whose ask was the lease's (its target, above
		// the request's need) and whose grant covered the request: its
		// waiters make a starved tenant's calls, and counted short, they
		// made 1.65 a second against Rate/Burst = 1, for the tokens that
		// 1.25 a second brought (TestRefillOfALeaseKeepsTheWholeAsk).
		need = max(min(asked-g.Granted, st.target), 1)
	}
	var wait time.Duration
	if g.Share > 0 {
		// Redis grants at most the credit this instance's share accrued,
		// up to its capacity (creditCap): come back when it has built up
		// again (accrued), before the bucket fills up: the calls of a
		// starved tenant then follow its share, not its demand.
		need = max(1, min(need, int64(p.accrued(p.creditCap(lim, g.Share), g.Share))))
		if g.Granted == 0 {
			// Nothing at all: the credit is spent (say by a call whose
			// reply was lost). A request may be waiting: come back once
			// a token's worth has accrued, not a whole batch, and within
			// the fill time (see shareWait).
			wait = min(p.shareWait(lim, g.Share, 1), durationCeil(float64(lim.Burst)/lim.Rate))
		} else {
			// A bucket that ran dry before the credit did (Tokens < 1)
			// means other instances came just before, as they do when
			// a tenant's instances start together: the wait is spread
			// as a run's first is. Waited out, the instances of the
			// fleet simulation's tenants came back together two
			// seconds after their start, their buckets having filled
			// and spilled in between.
			first := !wasScarce || g.Tokens < 1
			wait = p.spread(st, lim, g.Share, ns, first, p.shareWait(lim, g.Share, float64(need)))
		}
	} else {
		turn := need * int64(max(st.instances, 1))
		if turn/int64(max(st.instances, 1)) != need { // overflow
			turn = math.MaxInt64
		}
		wait = g.RetryAfter(turn, lim.Rate)
	}
	p.holdBack(st, ns, wait)
}

// shareWait is how long a share of the rate (tokens a second) takes to
// accrue x tokens of credit at Redis, at most the bucket's fill time
// Burst/Rate, in which any share accrues its share of the burst, or the
// time the share takes to accrue its credit span (creditSpan) when that
// is longer: a longer wait gains no credit, and it holds back the call
// that would tell Redis this instance's demand now. A share so small that
// its floor of a token is all its credit is a demand this instance
// reported low (a request now and then), which the requests of now may
// have outgrown: without the cap, an instance of a scarce tenant whose
// share was 0.05 a second got nothing and was held back 20 s, its
// requests denied with that RetryAfter
// (TestSmallShareWaitsAtMostTheFillTime; and 15 s after a grant of a
// token, TestSmallSharePartialGrantWaitsAtMostTheFillTime, while the cap
// counted that floor). An instance whose demand did stay that low calls
// at most once per fill time, or per half window, as a starved pair does.
func (p *Planner) shareWait(lim quota.Quota, share, x float64) time.Duration {
	return min(durationCeil(x/share), p.creditWait(lim, share))
}

// creditWait is the longest wait for a share's credit (tokens a second)
// that gains credit at Redis: the bucket's fill time Burst/Rate, or the
// time the share takes to accrue its credit span (creditSpan) when that
// is longer (see shareWait).
func (p *Planner) creditWait(lim quota.Quota, share float64) time.Duration {
	return max(durationCeil(float64(lim.Burst)/lim.Rate), durationCeil(p.creditSpan(lim, share)/share))
}

// creditCap is the most credit, in tokens, that Redis lets an instance
// whose fair share is share (tokens a second) accrue while the credit
// rule holds grants to it (lease.CreditCap, acquire.lua's rule):
// its share of the burst, or, when more, its share over half the
// registry window (Config.Window) up to a quarter of the burst; a token
// at least. With half a window of credit a starved instance calls about
// once per half window instead of once per fill time, taking more each
// time: 16 instances of a tenant of Rate 100, Burst 100 offered 3 times
// the rate call about 0.56 times a second each instead of 1.22, the fleet
// simulation's 16 x 1,000 (go test -run 'TestFleetShapes/16x1000'
// -sim.fleet -sim.fleet.seconds=30 -v .). The quarter of the burst keeps
// the calls of few instances frequent enough that the bucket does not
// fill (the credit rule gives way once it is half full) while they wait.
func (p *Planner) creditCap(lim quota.Quota, share float64) float64 {
	return lease.CreditCap(lim.Burst, lim.Rate, share, p.cfg.Window)
}

// creditSpan is the credit span of a share (tokens a second): what it
// accrues over half the registry window, up to a quarter of the burst, in
// tokens (see creditCap).
func (p *Planner) creditSpan(lim quota.Quota, share float64) float64 {
	return lease.CreditSpan(lim.Burst, share, p.cfg.Window)
}

// spans reports whether a share's credit span is more than its share of
// the burst (creditCap): a tenant on more than 4 instances, or this
// instance's share small beside the others'.
func (p *Planner) spans(lim quota.Quota, share float64) bool {
	return p.creditSpan(lim, share) > float64(lim.Burst)*share/lim.Rate
}

// spread shortens a wait for a share's credit that spans (see spans) at
// random, by the tenant's jitter: the first of a scarce run (first: the
// tenant was not scarce before, or the bucket ran dry before the credit
// did) to any point of it, later ones by up to an eighth. Instances that start together, as every instance
// of a fleet does when a tenant's traffic arrives everywhere at once,
// would otherwise come back together for as long as they are starved,
// each finding the bucket emptied by the others before it: in the fleet
// simulation's 16 x 1,000, without a spread, the admitted requests of a
// second swung between 80,000 and 118,000 (Rate 100,000) every two
// seconds. Coming earlier costs the call (the credit is what accrued),
// so a wait that is already spread loses an eighth at most. A wait within
// the fill time is left as it is: spread, with 4 instances, it cost
// TestClusterGlobalBound a point of utilization.
func (p *Planner) spread(st *State, lim quota.Quota, share float64, ns int64, first bool, wait time.Duration) time.Duration {
	switch {
	case !p.spans(lim, share):
		return wait
	case first:
		return wait - time.Duration(p.jitter(st, ns, int64(wait)))
	default:
		return wait - time.Duration(p.jitter(st, ns, int64(wait/8)))
	}
}

// accrued is how much of x tokens a share of the rate (tokens a second)
// must have accrued again before the next call: all of it but an
// interval's accrual, so that a late tick (ticks come every quarter
// interval, plus jitter, later on a busy machine) wastes no credit, and
// at least half, so that the call takes a worthwhile grant.
func (p *Planner) accrued(x, share float64) float64 {
	return max(x/2, x-share*p.cfg.Interval.Seconds())
}

// holdBack holds st's lease calls back for wait after ns (at least a
// tenth of an interval; a wait beyond a day is cut to a day, and the call
// then finds out again), plus the tenant's jitter.
func (p *Planner) holdBack(st *State, ns int64, wait time.Duration) {
	wait = min(max(wait, p.cfg.Interval/10), 24*time.Hour)
	st.notBefore = st.stampCeil(ns + int64(wait) + p.jitter(st, ns, int64(p.cfg.Jitter)))
}

// Skipped records that the call an Action asked for at time now was
// not made: Redis is busy and this instance's call budget was spent. The
// tenant's next call waits for the next tick (a quarter interval on),
// when the budget may have room, or for wait when that is longer (the
// edge knows its turn comes later: Syncer.turnWait), and it is quiet
// until then (settle); nothing else changes, so its schedule, lease
// target and demand carry over. cut is the Action's cut: a rate share's
// renewal not made leaves the share in force in Redis, so its accrual
// goes on (State.uncut) and the next plan asks again.
func (p *Planner) Skipped(st *State, lim quota.Quota, now time.Time, wait time.Duration, cut *reservation) {
	ns := now.UnixNano()
	st.setClock(ns)
	st.uncut(cut)
	st.notBefore = max(st.notBefore, st.stampCeil(ns+int64(max(wait, p.cfg.Interval/4))))
	p.settle(st, lim, ns, Action{})
}

// Failed records a failed lease call at time now: the next call waits a
// backoff that doubles with each failure in a row, with jitter.
func (p *Planner) Failed(st *State, now time.Time) {
	ns := now.UnixNano()
	st.setClock(ns)
	if st.failures == 0 && st.flags&flagGranted == 0 {
		st.lastGrant = st.stampOf(ns) // where FallbackRate starts
	}
	st.failures = min(st.failures, math.MaxUint8-1) + 1
	// MinBackoff doubled, at most 20 times, up to MaxBackoff, checked
	// before the shift (Min <= Max>>k: Min<<k <= Max, no overflow):
	// shifted past 2^63 ns (from 2.4 hours on) it wrapped, to any size
	// (1 s after 21 failures for 2^44 ns + 1 µs: a call a second;
	// TestFailedBackoffHugeBounds).
	b := p.cfg.MaxBackoff
	if k := min(st.failures-1, 20); p.cfg.MinBackoff <= p.cfg.MaxBackoff>>k {
		b = p.cfg.MinBackoff << k
	}
	// Jitter over the upper half: [b/2, b).
	half := int64(b / 2)
	st.notBefore = st.stampCeil(ns + half + p.jitter(st, ns, half))
}

// AwaitProbe records, after Failed, that the circuit breaker is open and
// lets a probe call through at probe (after now): the tenant's next call
// is then, whatever the backoff said. Before it the breaker refuses the
// call, and after it the call delays the probe, the call whose success
// closes the breaker and wakes the requests waiting through the outage.
// Why: backed off from each failure, refusals included, a tenant refused
// just before the breaker's interval ended called next up to a backoff
// (an interval) after it, so the probes came one to two intervals apart,
// and a WaitN woke up to 1.9 intervals after Redis answered again
// (TestWaitNWakesWithinAnIntervalOfRecovery in the root package); and a
// backoff ending before the probe only made a call the breaker refused.
// Redis sees no more calls for it: one probe an interval, as before.
func (p *Planner) AwaitProbe(st *State, now, probe time.Time) {
	if probe.After(now) {
		st.notBefore = st.stampCeil(probe.UnixNano())
	}
}

// FallbackRate returns the rate, in tokens per second, at which this
// instance may admit the tenant's requests without a lease at time now,
// while its lease calls fail (the local fallback mode), and the capacity
// of that local bucket.
//
// Let n be the number of instances Redis last counted on the tenant; when
// this instance never leased the tenant (a new tenant, an evicted one, an
// instance started during an outage), n is fleet, the fleet size assumed
// for such tenants (the largest count seen on any tenant, or a hint), and
// 1 when fleet is zero too. The fair rate is Rate/n and the capacity
// Burst/n (at least 1): if every instance does the same, a fleet-wide
// outage admits about the tenant's quota, not the quota times the
// instances.
//
// The rate starts at this instance's recent granted share of the
// tenant's rate (its grant rate at its last successful lease call, at most
// Rate) and decays from the time of that call, with the configured
// FallbackHalfLife, toward the fair rate. A rate share it accrued here
// (shared, tokens a second; 0 for none) is granted share too: from until
// (unix nanoseconds), when its accrual stopped (a share still coming due
// serves requests itself until then), the rate starts at the grant rate
// plus shared (at most Rate) and decays from until. The grant rate alone
// is what the bucket gave the share's renewals, little beside the share.
// An instance that never leased the tenant has no share to start from:
// it gets the fair rate at once.
func (p *Planner) FallbackRate(st *State, lim quota.Quota, now time.Time, fleet int, shared float64, until int64) (rate float64, capacity float64) {
	n := float64(max(st.instances, 1))
	if st.instances == 0 && fleet > 0 {
		n = float64(fleet)
	}
	fair := lim.Rate / n
	capacity = max(1, math.Floor(float64(lim.Burst)/n))
	if st.failures == 0 || st.flags&flagGranted == 0 {
		return fair, capacity
	}
	share := min(float64(st.grantRate), lim.Rate)
	from := st.at(st.lastGrant)
	if shared > 0 && now.UnixNano() >= until {
		share = min(share+shared, lim.Rate)
		from = max(from, until)
	}
	elapsed := float64(now.UnixNano()-from) / 1e9
	w := math.Exp2(-max(elapsed, 0) / p.cfg.FallbackHalfLife.Seconds())
	return fair + (share-fair)*w, capacity
}

// Drained records that the counter was emptied (tokens returned on close
// or eviction) and returns the tokens the ledger held, when the oldest of
// them was granted (the zero time for none), and the ID of that oldest
// grant (zero when unknown).
//
// Reserved tokens still to come are dropped: they are refill of the
// global bucket that Redis committed to this instance, and go unspent.
func (p *Planner) Drained(st *State) (tokens int64, oldest time.Time, id lease.GrantID) {
	tokens, oldest, id = st.ledger.Clear()
	if tokens > 0 {
		oldest = oldest.Add(-st.lag())
	}
	st.resv, st.dripLag = nil, 0
	return tokens, oldest, id
}

// lag returns how long before its batch's stamp a token the ledger holds
// may have been granted (dripLag).
func (st *State) lag() time.Duration { return time.Duration(st.dripLag) * time.Millisecond }

// ceil32 returns n as a float32 no smaller than n.
func ceil32(n int64) float32 {
	f := float32(n)
	if int64Of(f) < n {
		f = math.Nextafter32(f, float32(math.Inf(1)))
	}
	return f
}

// int64Of returns f (a whole float32 >= 0) as an int64, saturating.
func int64Of(f float32) int64 {
	if float64(f) >= math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(f)
}
