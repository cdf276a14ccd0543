package syncer

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/cespare/xxhash/v2"
	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/bucket"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// pt0 is the planner tests' origin: an arbitrary time, not aligned to any
// interval.
var pt0 = time.Date(2025, 6, 7, 8, 9, 10, 123456789, time.UTC)

const testSeed = 0x5eed

// testLimits is a tenant whose global bucket is never the constraint.
func testLimits() quota.Quota {
	return quota.Quota{Rate: 1000, Burst: 1e6, MinLease: 1, MaxLease: 5000, LeaseTTL: time.Second}
}

// rig drives one tenant's planner the way the Syncer does, with time passed
// in: requests spend from a bucket.Counter (or record a miss), and each
// plan's action is carried out at once: expired tokens are taken back and
// dropped (Expired), and an acquire is answered by grant (default: in
// full).
type rig struct {
	p      *Planner
	st     State
	lim    quota.Quota
	now    time.Time
	tokens bucket.Counter

	// What requests recorded since the last plan.
	missed, need int64
	urgent       bool

	// fleet is the fleet size the edge assumes (Input.Fleet).
	fleet int

	// grant answers an acquire of want tokens; ok false is a failed call.
	// nil grants in full from a bucket that holds plenty.
	grant func(want int64) (g lease.Grant, ok bool)

	// refills: every call is a waiting request's (a refill's), whose
	// Action.ForNeed goes to GrantedFor; else a round's (Granted).
	refills bool

	acc      float64       // fractional tokens of demand not yet asked for
	calls    int           // acquires made
	acquired int64         // tokens granted
	expired  int64         // tokens taken back at expiry and dropped
	dripped  int64         // reserved tokens that came due (Action.Drip)
	reserve  time.Duration // the Action.Reserve of the last plan, for grant
	spent    int64         // tokens admitted
	denied   int64         // tokens denied
}

func newRig(cfg Config, lim quota.Quota, name string) *rig {
	r := &rig{p: NewPlanner(cfg, testSeed), lim: lim, now: pt0}
	r.p.Init(&r.st, name, r.now)
	return r
}

// request spends n tokens, or records a miss as Tenant.NoteMiss does.
func (r *rig) request(n int64) bool {
	if ok, _ := r.tokens.TrySpend(n); ok {
		r.spent += n
		return true
	}
	r.denied += n
	r.missed += n
	r.need = max(r.need, n)
	r.urgent = true
	return false
}

// ask makes requests of one token for rate tokens per second over d.
func (r *rig) ask(rate float64, d time.Duration) {
	r.acc += rate * d.Seconds()
	for ; r.acc >= 1; r.acc-- {
		r.request(1)
	}
}

// plan runs the planner at r.now and carries its action out.
func (r *rig) plan() Action {
	in := Input{Level: r.tokens.Load(), Missed: r.missed, Need: r.need, Urgent: r.urgent, Fleet: r.fleet}
	r.missed, r.need, r.urgent = 0, 0, false
	a := r.p.Plan(&r.st, r.lim, r.now, in)
	r.reserve = a.Reserve
	if a.Drip > 0 {
		r.tokens.Add(a.Drip)
		r.dripped += a.Drip
	}
	if a.Expire > 0 {
		taken, left := r.tokens.Take(a.Expire)
		r.expired += taken
		r.p.Expired(&r.st, taken, left)
	}
	if a.Acquire > 0 {
		r.calls++
		g, ok := lease.Grant{Granted: a.Acquire, Tokens: 1e9}, true
		if r.grant != nil {
			g, ok = r.grant(a.Acquire)
		}
		if !ok {
			r.p.Failed(&r.st, r.now)
		} else {
			level := r.tokens.Add(g.Immediate())
			r.acquired += g.Granted
			var forNeed int64
			if r.refills {
				forNeed = a.ForNeed
			}
			r.p.GrantedFor(&r.st, r.lim, r.now, r.now, a.Acquire, forNeed, g, level)
			r.p.Reserved(&r.st, r.lim, r.now, r.now, g)
		}
	}
	return a
}

// run serves demand at rate tokens per second for d, planning every tick,
// and calls each (if not nil) after every plan.
func (r *rig) run(rate float64, d, tick time.Duration, each func(a Action)) {
	for end := r.now.Add(d); r.now.Before(end); {
		r.ask(rate, tick)
		r.now = r.now.Add(tick)
		a := r.plan()
		if each != nil {
			each(a)
		}
	}
}

// checkHeld fails unless the planner's ledger agrees with the counter.
func (r *rig) checkHeld(t testing.TB) {
	t.Helper()
	if h, c := r.st.Held(), r.tokens.Load(); h != c {
		t.Fatalf("at +%v: planner holds %d, counter %d", r.now.Sub(pt0), h, c)
	}
}

const tick = 25 * time.Millisecond // the Syncer's default tick, Interval/4

// TestPhase: a tenant's phase is xxhash(name), folded to 32 bits, scaled
// to the Interval, whatever the seed, the interval or the time it is first
// seen.
func TestPhase(t *testing.T) {
	for _, iv := range []time.Duration{100 * time.Millisecond, time.Second, 7 * time.Millisecond, 1234567 * time.Nanosecond} {
		for _, seed := range []uint64{0, 1, 42} {
			p := NewPlanner(Config{Interval: iv}, seed)
			for i := range 200 {
				name := fmt.Sprintf("tenant-%d", i)
				var a, b State
				p.Init(&a, name, pt0)
				p.Init(&b, name, pt0.Add(time.Duration(i)*time.Hour+time.Duration(i)))
				h := xxhash.Sum64String(name)
				want := time.Duration(uint64(uint32(h>>32)^uint32(h)) * uint64(iv) >> 32)
				if got := p.Phase(&a); got != want {
					t.Fatalf("Interval %v: Phase(%q) = %v, want xxhash scaled to Interval = %v", iv, name, got, want)
				}
				if got := p.Phase(&b); got != want {
					t.Fatalf("Interval %v: Phase(%q) depends on when it was first seen: %v, want %v", iv, name, got, want)
				}
			}
		}
	}
	// Deterministic: the same planner and time give the same schedule.
	p := NewPlanner(Config{}, testSeed)
	var a, b State
	p.Init(&a, "acme", pt0)
	p.Init(&b, "acme", pt0)
	if !a.Next().Equal(b.Next()) {
		t.Fatalf("Init twice: Next %v then %v", a.Next(), b.Next())
	}
	// The empty name and very long names work too.
	p.Init(&a, "", pt0)
	p.Init(&b, string(make([]byte, 1<<16)), pt0)
}

// offsetInInterval returns t's offset from the tenant's phase, within the
// interval.
func offsetInInterval(p *Planner, st *State, t time.Time) time.Duration {
	iv := int64(p.Config().Interval)
	m := (t.UnixNano() - int64(p.Phase(st))) % iv
	if m < 0 {
		m += iv
	}
	return time.Duration(m)
}

// TestScheduledRefreshTimes: every scheduled refresh is at the tenant's
// phase (mod Interval) plus a jitter in [0, Jitter), rounded up to the
// millisecond (State keeps times in whole milliseconds), one per interval,
// and a plan before that time does not move it.
func TestScheduledRefreshTimes(t *testing.T) {
	for _, cfg := range []Config{{}, {Interval: time.Second, Jitter: 300 * time.Millisecond}, {Interval: 10 * time.Millisecond}} {
		p := NewPlanner(cfg, testSeed)
		c := p.Config()
		rnd := rand.New(rand.NewPCG(1, 2))
		for i := range 100 {
			var st State
			start := pt0.Add(time.Duration(rnd.Int64N(int64(time.Hour))))
			p.Init(&st, fmt.Sprintf("t%d", i), start)
			now, prev := start, start
			for k := range 50 {
				next := st.Next()
				if !next.After(now) {
					t.Fatalf("%+v: scheduled refresh %v is not after the plan at %v", c, next, now)
				}
				if off := offsetInInterval(p, &st, next); off < 0 || off >= c.Jitter+time.Millisecond {
					t.Fatalf("%+v: refresh at phase + %v, want + [0, %v)", c, off, c.Jitter+time.Millisecond)
				}
				if k > 0 {
					// One refresh per interval: the next slot after the
					// previous refresh.
					if gap := next.Sub(prev); gap <= c.Interval-c.Jitter-time.Millisecond || gap >= c.Interval+c.Jitter+time.Millisecond {
						t.Fatalf("%+v: refreshes %v apart, want Interval ± Jitter", c, gap)
					}
				} else if next.Sub(start) > c.Interval+c.Jitter+time.Millisecond {
					t.Fatalf("%+v: first refresh %v after Init, want at most Interval+Jitter", c, next.Sub(start))
				}
				// A plan just before the refresh leaves it alone.
				p.Plan(&st, testLimits(), next.Add(-time.Nanosecond), Input{})
				if !st.Next().Equal(next) {
					t.Fatalf("%+v: plan 1ns before the refresh moved it from %v to %v", c, next, st.Next())
				}
				// A plan at (or, with a late tick, after) the time
				// schedules the next one.
				prev = next
				now = next.Add(time.Duration(rnd.Int64N(int64(c.Jitter) + 1)))
				p.Plan(&st, testLimits(), now, Input{})
			}
		}
	}
}

// TestJitterDependsOnSeed: a fixed seed gives the same jitter (replayable),
// different seeds different jitter, so replicas do not sync in lockstep.
func TestJitterDependsOnSeed(t *testing.T) {
	cfg := Config{}
	p1, p1b, p2 := NewPlanner(cfg, 1), NewPlanner(cfg, 1), NewPlanner(cfg, 2)
	jitter := p1.Config().Jitter
	differ, n := 0, 0
	var offs []time.Duration
	for i := range 200 {
		name := fmt.Sprintf("tenant-%d", i)
		var a, b, c State
		p1.Init(&a, name, pt0)
		p1b.Init(&b, name, pt0)
		p2.Init(&c, name, pt0)
		for range 20 {
			if !a.Next().Equal(b.Next()) {
				t.Fatalf("same seed, different schedule: %v vs %v", a.Next(), b.Next())
			}
			if !a.Next().Equal(c.Next()) {
				differ++
			}
			n++
			offs = append(offs, offsetInInterval(p1, &a, a.Next()))
			now := a.Next()
			p1.Plan(&a, testLimits(), now, Input{})
			p1b.Plan(&b, testLimits(), now, Input{})
			p2.Plan(&c, testLimits(), c.Next(), Input{})
		}
	}
	if differ < n*9/10 {
		t.Errorf("seeds 1 and 2 gave the same refresh time %d times in %d", n-differ, n)
	}
	// The jitter covers its range: every tenth of [0, Jitter) is used
	// (up to the millisecond a time is rounded up by).
	var bins [10]int
	for _, o := range offs {
		bins[min(int(o*10/jitter), 9)]++
	}
	for i, b := range bins {
		if b < len(offs)/20 {
			t.Errorf("jitter tenth %d used %d times of %d: %v", i, b, len(offs), bins)
		}
	}
}

// TestPhasesSpread: 1,000 tenants' phases spread over the interval; every
// tenth of it gets 5-15% of them.
func TestPhasesSpread(t *testing.T) {
	for _, iv := range []time.Duration{100 * time.Millisecond, time.Second, 3 * time.Millisecond} {
		p := NewPlanner(Config{Interval: iv}, testSeed)
		var bins [10]int
		for i := range 1000 {
			var st State
			p.Init(&st, fmt.Sprintf("tenant-%d", i), pt0)
			bins[int(p.Phase(&st)*10/iv)]++
		}
		for i, b := range bins {
			if b < 50 || b > 150 {
				t.Errorf("Interval %v: tenth %d of the interval has %d of 1000 phases: %v", iv, i, b, bins)
			}
		}
	}
}

// warm returns a rig whose tenant has had steady demand of rate tokens per
// second for five seconds (ten half-lives), served in full.
func warm(t *testing.T, cfg Config, lim quota.Quota, rate float64) *rig {
	t.Helper()
	r := newRig(cfg, lim, "warm")
	r.run(rate, 5*time.Second, tick, nil)
	r.checkHeld(t)
	return r
}

// untilUnscheduled advances r by a millisecond at a time, serving rate,
// until the next plan would not be a scheduled one, and returns the time.
func (r *rig) untilUnscheduled(rate float64) {
	for i := 0; !r.now.Add(time.Millisecond).Before(r.st.Next()); i++ {
		r.ask(rate, time.Millisecond)
		r.now = r.now.Add(time.Millisecond)
		if i > 1000 {
			panic("no unscheduled time in a second")
		}
	}
	r.now = r.now.Add(time.Millisecond)
}

// TestLowWatermarkPrefetch: tokens below LowWatermark × target trigger an
// acquire before the scheduled refresh; above it, nothing happens until
// then.
func TestLowWatermarkPrefetch(t *testing.T) {
	const demand = 1000.0
	r := warm(t, Config{}, testLimits(), demand)
	target := r.st.Target()
	if target < 150 || target > 250 {
		t.Fatalf("target %d after 5 s at %v/s, want about 200", target, demand)
	}

	// Above the watermark, off schedule: no call. (Top up first with an
	// urgent request, so that there is something above the watermark.)
	r.untilUnscheduled(0)
	r.urgent, r.need = true, target
	r.plan()
	r.untilUnscheduled(0)
	above := r.st.Target() * 2 / 3 // what is taken counts as demand: leave room
	if r.tokens.Load() < above {
		t.Fatalf("test setup: %d tokens held after a top-up to %d", r.tokens.Load(), target)
	}
	r.tokens.Take(r.tokens.Load() - above)
	if a := r.plan(); a.Acquire != 0 {
		t.Fatalf("acquire of %d off schedule with %d tokens held (target %d)", a.Acquire, above, r.st.Target())
	}

	// Below it, off schedule: a prefetch up to the target.
	r.untilUnscheduled(0)
	low := r.st.Target()/2 - 1
	r.tokens.Take(r.tokens.Load() - low)
	next := r.st.Next()
	a := r.plan()
	if !r.now.Before(next) {
		t.Fatalf("test bug: plan at %v is not before the scheduled %v", r.now, next)
	}
	if want := r.st.Target() - low; a.Acquire != want {
		t.Fatalf("with %d held of target %d: Acquire %d, want %d", low, r.st.Target(), a.Acquire, want)
	}
	r.checkHeld(t)
}

// TestUrgentNeed: an urgent request needing more than is held triggers an
// acquire of at least the shortfall, off schedule and above the watermark;
// an urgent request that the tokens held cover does not.
func TestUrgentNeed(t *testing.T) {
	r := warm(t, Config{}, testLimits(), 1000)
	r.untilUnscheduled(0)
	target := r.st.Target()
	held := target * 3 / 4 // above the watermark
	r.tokens.Take(r.tokens.Load() - held)

	r.urgent, r.need, r.missed = true, held, held
	if a := r.plan(); a.Acquire != 0 {
		t.Fatalf("urgent need %d with %d held: Acquire %d, want none", held, held, a.Acquire)
	}

	r.untilUnscheduled(0)
	held = r.tokens.Load()
	need := held + 700
	r.urgent, r.need, r.missed = true, need, need
	a := r.plan()
	if a.Acquire < need-held {
		t.Fatalf("urgent need %d with %d held: Acquire %d, want >= %d", need, held, a.Acquire, need-held)
	}
	if want := max(r.st.Target()-held, need-held); a.Acquire != want {
		t.Fatalf("urgent need %d with %d held, target %d: Acquire %d, want %d", need, held, r.st.Target(), a.Acquire, want)
	}
	r.checkHeld(t)

	// A need above Burst is never asked beyond Burst.
	lim := testLimits()
	lim.Burst, lim.MaxLease = 50, 50
	r = newRig(Config{}, lim, "small")
	r.urgent, r.need, r.missed = true, 80, 80
	if a := r.plan(); a.Acquire != 50 {
		t.Fatalf("urgent need 80 on a Burst of 50: Acquire %d, want 50", a.Acquire)
	}
}

// TestUrgentHeldBackByNotBefore: while NotBefore is in the future (after a
// failure or a partial grant) no call is planned, however urgent; at
// NotBefore it is.
func TestUrgentHeldBackByNotBefore(t *testing.T) {
	r := warm(t, Config{}, testLimits(), 1000)
	r.grant = func(int64) (lease.Grant, bool) { return lease.Grant{}, false }
	r.tokens.Take(r.tokens.Load())
	r.urgent, r.need, r.missed = true, 10, 10
	if a := r.plan(); a.Acquire == 0 {
		t.Fatal("an urgent empty tenant planned no acquire")
	}
	nb := r.st.NotBefore()
	if !nb.After(r.now) {
		t.Fatalf("after a failure NotBefore %v is not after now %v", nb, r.now)
	}
	for r.now.Add(time.Millisecond).Before(nb) {
		r.now = r.now.Add(time.Millisecond)
		r.urgent, r.need, r.missed = true, 10, 10
		if a := r.plan(); a.Acquire != 0 {
			t.Fatalf("acquire of %d at %v before NotBefore %v", a.Acquire, r.now, nb)
		}
	}
	r.grant = nil
	r.now = nb
	r.urgent, r.need, r.missed = true, 10, 10
	if a := r.plan(); a.Acquire == 0 {
		t.Fatalf("no acquire at NotBefore")
	}
	r.checkHeld(t)
}

// TestColdLeaseWithinTheFleetsShareOfTheBurst checks a tenant's first
// lease: an interval's refill (Rate x Interval) within the lease limits,
// and no more than an even share of the burst among the instances the
// edge assumes (Input.Fleet), so that a fleet whose instances see a
// tenant's first requests together does not give the burst to the first
// few (TestSimulation's seed 18429: three of four instances took 5 tokens
// of a burst of 10 for a request each).
func TestColdLeaseWithinTheFleetsShareOfTheBurst(t *testing.T) {
	for _, c := range []struct {
		name  string
		lim   quota.Quota
		fleet int
		want  int64
	}{
		{"alone", quota.Quota{Rate: 200, Burst: 1000, MinLease: 1, MaxLease: 500, LeaseTTL: time.Second}, 0, 20},
		{"one instance", quota.Quota{Rate: 200, Burst: 15, MinLease: 1, MaxLease: 500, LeaseTTL: time.Second}, 1, 15}, // the refill, within the burst
		{"burst shared", quota.Quota{Rate: 200, Burst: 10, MinLease: 1, MaxLease: 500, LeaseTTL: time.Second}, 4, 3},
		{"share above the refill", quota.Quota{Rate: 200, Burst: 1000, MinLease: 1, MaxLease: 500, LeaseTTL: time.Second}, 4, 20},
		{"within MaxLease", quota.Quota{Rate: 1e6, Burst: 1e6, MinLease: 1, MaxLease: 50, LeaseTTL: time.Second}, 4, 50},
		{"at least MinLease", quota.Quota{Rate: 200, Burst: 10, MinLease: 5, MaxLease: 500, LeaseTTL: time.Second}, 16, 5},
		{"a token at least", quota.Quota{Rate: 200, Burst: 10, MinLease: 1, MaxLease: 500, LeaseTTL: time.Second}, 1000, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRig(Config{}, c.lim, "cold")
			r.fleet = c.fleet
			r.request(1)
			if a := r.plan(); a.Acquire != c.want {
				t.Errorf("first lease of %d tokens with a fleet of %d, want %d", a.Acquire, c.fleet, c.want)
			}
		})
	}
}

// TestYoungLeaseHoldsWhatWasAsked: for a tenant seen for less than a
// half-life, a lease holds no more than its requests asked for since it
// was first seen (Planner.askedSoFar). One request, served from a first
// lease of 2 (an interval's refill), leaves 1: no call for more follows, where the estimate (one request read as a token an
// interval) had the instance ask for 2 more of a burst its fleet shares
// (TestSimulation, seed 92039). A demand that goes on raises the lease
// as its requests come.
func TestYoungLeaseHoldsWhatWasAsked(t *testing.T) {
	lim := quota.Quota{Rate: 100, Burst: 10, MinLease: 1, MaxLease: 5, LeaseTTL: 200 * time.Millisecond}
	r := newRig(Config{Interval: 20 * time.Millisecond}, lim, "young")
	r.fleet = 4
	r.request(1)
	if a := r.plan(); a.Acquire != 2 {
		t.Fatalf("first lease of %d tokens, want 2", a.Acquire)
	}
	// The request that waited for the lease spends from it, and its miss
	// is taken back (Tenant.Unmiss), as decide does.
	if ok, _ := r.tokens.TrySpend(1); !ok {
		t.Fatal("the first lease holds no token")
	}
	r.missed = -1
	halfLife := r.p.Config().HalfLife
	for end := r.now.Add(halfLife / 2); r.now.Before(end); {
		r.now = r.now.Add(5 * time.Millisecond)
		if a := r.plan(); a.Acquire > 1 || r.st.Target() > 1 {
			t.Fatalf("at +%v, a lease of %d tokens planned, asking for %d, after one request (demand %.1f/s)",
				r.now.Sub(pt0), r.st.Target(), a.Acquire, r.st.Demand())
		}
	}
	// Requests at 200 a second (twice the rate) empty the lease: it
	// grows with them.
	var most int64
	r.run(200, halfLife/2, 5*time.Millisecond, func(a Action) { most = max(most, r.st.Target()) })
	if most < 3 {
		t.Errorf("a young tenant asked for 200 tokens a second reached a target of %d only", most)
	}
}

// TestPartialGrantWaitsForRefill: after a partial grant no call is planned
// until the global bucket, refilling at Rate from the Tokens the script
// reported, would hold the lease asked for (here the target, as the tenant
// held nothing); then one is.
func TestPartialGrantWaitsForRefill(t *testing.T) {
	lim := quota.Quota{Rate: 200, Burst: 1000, MinLease: 1, MaxLease: 500, LeaseTTL: time.Second}
	r := newRig(Config{}, lim, "dry")
	cfg := r.p.Config()
	a := r.plan() // cold start: asks for one interval of Rate
	want := r.st.Target()
	if a.Acquire != want || want != 20 {
		t.Fatalf("cold start Acquire %d, target %d; want 20 (Rate × Interval)", a.Acquire, want)
	}
	// Replay it as a partial grant.
	r = newRig(Config{}, lim, "dry")
	const tokensLeft = 0.25
	r.grant = func(want int64) (lease.Grant, bool) {
		return lease.Grant{Granted: want / 4, Tokens: tokensLeft, ServerTime: r.now}, true
	}
	sent := r.now
	r.plan()
	wait := time.Duration(math.Ceil((float64(want)-tokensLeft)/lim.Rate*1e6)) * time.Microsecond // 98.75 ms
	wait = max(wait, cfg.Interval/10)
	nb := r.st.NotBefore()
	if nb.Before(sent.Add(wait)) || !nb.Before(sent.Add(wait+cfg.Jitter)) {
		t.Fatalf("NotBefore = sent + %v, want sent + [%v, %v)", nb.Sub(sent), wait, wait+cfg.Jitter)
	}
	r.grant = nil
	// Hungry requests and scheduled refreshes come and go: no call.
	for r.now.Add(time.Millisecond).Before(nb) {
		r.now = r.now.Add(time.Millisecond)
		r.request(5)
		if a := r.plan(); a.Acquire != 0 {
			t.Fatalf("acquire at sent + %v, before NotBefore = sent + %v", r.now.Sub(sent), nb.Sub(sent))
		}
	}
	r.now = nb
	r.request(5)
	if a := r.plan(); a.Acquire == 0 {
		t.Fatal("no acquire at NotBefore with requests waiting")
	}
	r.checkHeld(t)

	// A grant of nothing also waits; a full grant clears nothing it need not.
	r.grant = func(int64) (lease.Grant, bool) { return lease.Grant{Tokens: 0}, true }
	r.now = r.now.Add(time.Second)
	r.tokens.Take(r.tokens.Load())
	r.request(5)
	r.plan()
	if nb := r.st.NotBefore(); !nb.After(r.now.Add(cfg.Interval / 10)) {
		t.Fatalf("after a zero grant NotBefore is now + %v, want a wait for the refill", nb.Sub(r.now))
	}
}

// TestFailedBackoff: failures in a row back off exponentially, each wait
// in [b/2, b) for b = MinBackoff × 2^(failures-1) capped at MaxBackoff, so
// always within [MinBackoff/2, MaxBackoff]; a success starts over.
func TestFailedBackoff(t *testing.T) {
	for _, cfg := range []Config{{}, {MinBackoff: 10 * time.Millisecond, MaxBackoff: time.Second}, {MinBackoff: time.Millisecond, MaxBackoff: time.Hour}} {
		p := NewPlanner(cfg, testSeed)
		c := p.Config()
		if c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff {
			t.Fatalf("resolved backoff bounds %v, %v", c.MinBackoff, c.MaxBackoff)
		}
		for _, name := range []string{"a", "b", "c", "d"} {
			var st State
			p.Init(&st, name, pt0)
			now := pt0
			prevCap := time.Duration(0)
			for k := 1; k <= 40; k++ {
				p.Failed(&st, now)
				if st.Failures() != k {
					t.Fatalf("Failures() = %d after %d failures", st.Failures(), k)
				}
				// Doubling stops after 20 doublings (so the shift cannot
				// overflow), and at MaxBackoff.
				b := c.MaxBackoff
				if s := c.MinBackoff << min(k-1, 20); s > 0 && s < c.MaxBackoff {
					b = s
				}
				// [b/2, b), rounded up to the millisecond: at most b.
				d := st.NotBefore().Sub(now)
				if d < b/2 || d > b {
					t.Fatalf("%+v: failure %d backs off %v, want [%v, %v]", c, k, d, b/2, b)
				}
				if d < c.MinBackoff/2 || d > c.MaxBackoff {
					t.Fatalf("%+v: failure %d backs off %v, outside [MinBackoff/2, MaxBackoff]", c, k, d)
				}
				if b < prevCap {
					t.Fatalf("backoff bound shrank")
				}
				prevCap = b
				now = st.NotBefore()
			}
			p.Granted(&st, testLimits(), now, 1, lease.Grant{Granted: 1, Tokens: 5}, 1)
			if st.Failures() != 0 {
				t.Fatalf("Failures() = %d after a success", st.Failures())
			}
			p.Failed(&st, now)
			if d := st.NotBefore().Sub(now); d < c.MinBackoff/2 || d > c.MinBackoff {
				t.Fatalf("first failure after a success backs off %v, want [%v, %v]", d, c.MinBackoff/2, c.MinBackoff)
			}
		}
	}
}

// TestTargetTracksDemand: the lease target is demand × Interval × Headroom,
// clamped to [MinLease, MaxLease], and never above Burst; below
// worthwhileLease tokens, at least the demand of half the lease's usable
// lifetime, up to worthwhileLease and the burst (wantTarget).
func TestTargetTracksDemand(t *testing.T) {
	cases := []struct {
		name   string
		cfg    Config
		lim    quota.Quota
		demand float64
		want   int64
	}{
		{"plain", Config{}, testLimits(), 1000, 200},
		{"small", Config{}, testLimits(), 50, 16},
		{"low rate", Config{}, quota.Quota{Rate: 20, Burst: 40, MinLease: 1, MaxLease: 40, LeaseTTL: time.Second}, 15, 6},
		{"low rate, small burst", Config{}, quota.Quota{Rate: 20, Burst: 5, MinLease: 1, MaxLease: 5, LeaseTTL: time.Second}, 15, 5},
		{"headroom 3", Config{Headroom: 3}, testLimits(), 1000, 300},
		{"interval 1s", Config{Interval: time.Second}, quota.Quota{Rate: 1e4, Burst: 1e6, MinLease: 1, MaxLease: 5000, LeaseTTL: 10 * time.Second}, 100, 200},
		{"clamped to MaxLease", Config{}, testLimits(), 1e5, 5000},
		{"clamped to MinLease", Config{}, quota.Quota{Rate: 1000, Burst: 1e6, MinLease: 40, MaxLease: 5000, LeaseTTL: time.Second}, 20, 40},
		{"at most Burst", Config{}, quota.Quota{Rate: 1e5, Burst: 300, MinLease: 1, MaxLease: 300, LeaseTTL: time.Second}, 1e4, 300},
		{"one token", Config{}, testLimits(), 2, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := warm(t, c.cfg, c.lim, c.demand)
			got := r.st.Target()
			lo, hi := c.want*95/100, c.want*105/100+1
			if got < lo || got > hi {
				t.Fatalf("target %d after steady demand %v/s, want about %d", got, c.demand, c.want)
			}
			if got > c.lim.Burst || got > c.lim.MaxLease || got < c.lim.MinLease {
				t.Fatalf("target %d outside [MinLease %d, MaxLease %d] or above Burst %d", got, c.lim.MinLease, c.lim.MaxLease, c.lim.Burst)
			}
			// And it follows a change of demand within a few half-lives.
			r.run(c.demand/4, 5*time.Second, tick, nil)
			quarter := wantTarget(r.p.Config(), c.lim, c.demand/4)
			if got := r.st.Target(); got < quarter*9/10 || got > quarter*11/10+1 {
				t.Fatalf("target %d after demand fell to %v/s, want about %d", got, c.demand/4, quarter)
			}
		})
	}
}

// wantTarget is the lease target of one instance at a steady demand, by
// the rule Plan follows (written out again here, from its doc).
func wantTarget(cfg Config, lim quota.Quota, demand float64) int64 {
	t := min(max(int64(math.Ceil(demand*cfg.Interval.Seconds()*cfg.Headroom)), lim.MinLease), lim.MaxLease)
	if t < worthwhileLease {
		usable := lim.LeaseTTL - min(2*cfg.Interval, lim.LeaseTTL/2)
		timed := int64(math.Ceil(demand * usable.Seconds() / 2))
		t = max(t, min(timed, worthwhileLease, lim.Burst, lim.MaxLease))
	}
	return t
}

// TestIdleTenant: once demand stops, the target decays to zero within a
// few half-lives, the tenant stops acquiring, and every token it held goes
// when its lease expires.
func TestIdleTenant(t *testing.T) {
	r := warm(t, Config{}, testLimits(), 1000)
	spentBefore := r.spent
	idleStart := r.now
	lastAcquire := time.Time{}
	r.run(0, 20*time.Second, tick, func(a Action) {
		if a.Acquire > 0 {
			lastAcquire = r.now
		}
	})
	hl := r.p.Config().HalfLife
	if d := lastAcquire.Sub(idleStart); d > 15*hl {
		t.Errorf("idle tenant still acquired %v after its last request (%v half-lives)", d, float64(d)/float64(hl))
	}
	t.Logf("idle tenant's last acquire came %v after its last request", lastAcquire.Sub(idleStart))
	if r.st.Target() != 0 {
		t.Errorf("idle target %d, want 0", r.st.Target())
	}
	if r.tokens.Load() != 0 || r.st.Held() != 0 {
		t.Errorf("idle tenant still holds %d tokens (ledger %d)", r.tokens.Load(), r.st.Held())
	}
	if r.spent != spentBefore {
		t.Fatalf("test bug: tokens spent while idle")
	}
	// Everything acquired was spent or expired.
	if r.acquired != r.spent+r.expired {
		t.Errorf("acquired %d != spent %d + expired %d", r.acquired, r.spent, r.expired)
	}
	// And a long idle stretch plans nothing at all.
	calls := r.calls
	r.run(0, time.Minute, tick, func(a Action) {
		if a.Acquire != 0 || a.Expire != 0 {
			t.Fatalf("idle tenant planned %+v", a)
		}
	})
	if r.calls != calls {
		t.Fatal("idle tenant made calls")
	}
}

// TestBusyTenantReplacedBeforeExpiry: with steady demand the tenant gets
// its replacement lease before the old one expires, so requests never find
// the counter empty, neither in the ordinary case (leases spent well within
// their TTL) nor when MinLease makes each lease outlive it.
func TestBusyTenantReplacedBeforeExpiry(t *testing.T) {
	cases := []struct {
		name   string
		lim    quota.Quota
		demand float64
	}{
		{"ordinary", testLimits(), 1000},
		{"leases outlive TTL", quota.Quota{Rate: 1000, Burst: 1e6, MinLease: 500, MaxLease: 5000, LeaseTTL: time.Second}, 100},
		{"slow trickle", quota.Quota{Rate: 1000, Burst: 1e6, MinLease: 10, MaxLease: 5000, LeaseTTL: time.Second}, 3},
		{"short TTL", quota.Quota{Rate: 1000, Burst: 1e6, MinLease: 1, MaxLease: 5000, LeaseTTL: 300 * time.Millisecond}, 500},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := warm(t, Config{}, c.lim, c.demand)
			denied, expiries := r.denied, 0
			// Requests every millisecond; plans every tick.
			for i := range 20_000 {
				r.ask(c.demand, time.Millisecond)
				r.now = r.now.Add(time.Millisecond)
				if i%int(tick/time.Millisecond) == 0 {
					if a := r.plan(); a.Expire > 0 {
						expiries++
						if r.tokens.Load() == 0 {
							t.Fatalf("at +%v the counter was empty after %d expired tokens were dropped", r.now.Sub(pt0), a.Expire)
						}
					}
					r.checkHeld(t)
				}
			}
			if r.denied != denied {
				t.Fatalf("%d tokens denied to steady demand of %v/s in 20 s", r.denied-denied, c.demand)
			}
			t.Logf("%d expiries with tokens left; %d calls in 25 s", expiries, r.calls)
		})
	}
}

// TestPlannerProperties: over random sequences of inputs (the counter only
// goes down between plans, except by grants; grants of 0..asked, failures,
// time moving forward by random steps, some with no request), every Action asks for 0..Burst
// tokens and expires 0..held, no call is planned before NotBefore (but a
// rate share's renewal or end), a plan that Quiet said a round could leave
// out does nothing, and the ledger agrees with the counter after each
// step. Half the runs turn rate shares on, and Redis grants some asks.
func TestPlannerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		iv := time.Duration(rapid.IntRange(1, 1000).Draw(t, "intervalMs")) * time.Millisecond
		cfg := Config{Interval: iv}
		if rapid.Bool().Draw(t, "shares") {
			cfg.SharePeriod = time.Duration(rapid.IntRange(1, 20).Draw(t, "sharePeriodS")) * time.Second
		}
		burst := rapid.Int64Range(1, 5000).Draw(t, "burst")
		minLease := rapid.Int64Range(1, burst).Draw(t, "minLease")
		lim := quota.Quota{
			Rate:     rapid.Float64Range(0.01, 1e5).Draw(t, "rate"),
			Burst:    burst,
			MinLease: minLease,
			MaxLease: rapid.Int64Range(minLease, burst).Draw(t, "maxLease"),
			LeaseTTL: iv * time.Duration(rapid.IntRange(1, 30).Draw(t, "ttlIntervals")),
		}
		p := NewPlanner(cfg, rapid.Uint64().Draw(t, "seed"))
		var (
			st     State
			tokens bucket.Counter
			now    = pt0.Add(time.Duration(rapid.Int64Range(0, int64(time.Hour)).Draw(t, "start")))
		)
		p.Init(&st, rapid.String().Draw(t, "name"), now)
		// Failed takes no level: spends made while a failed call was in
		// flight reach the ledger at the next plan. Until then the ledger
		// may hold more than the counter, never less.
		synced := true
		t.Repeat(map[string]func(*rapid.T){
			"": func(t *rapid.T) {
				if h, c := st.Held(), tokens.Load(); h != c && (synced || h < c) {
					t.Fatalf("planner holds %d, counter %d", h, c)
				}
				if tokens.Load() < 0 {
					t.Fatalf("counter %d", tokens.Load())
				}
			},
			"step": func(t *rapid.T) {
				now = now.Add(time.Duration(rapid.Int64Range(0, int64(3*iv)).Draw(t, "advance")))
				// Requests spend some of what is held, and some miss; a
				// quarter of the steps see no request, so that the demand
				// goes and leases are held unspent until they expire.
				idle := rapid.IntRange(0, 3).Draw(t, "idle") == 0
				if held := tokens.Load(); held > 0 && !idle {
					tokens.TrySpend(rapid.Int64Range(0, held).Draw(t, "spend"))
				}
				var in Input
				if !idle && rapid.Bool().Draw(t, "miss") {
					in.Need = rapid.Int64Range(1, lim.Burst).Draw(t, "need")
					in.Missed = in.Need * rapid.Int64Range(1, 5).Draw(t, "misses")
					in.Urgent = rapid.Bool().Draw(t, "urgent")
				}
				in.Level = tokens.Load()
				synced = true
				notBefore := st.NotBefore()
				// A request that misses marks the tenant urgent (NoteMiss).
				quiet := p.Quiet(&st, now.UnixNano(), in.Level, in.Urgent || in.Missed > 0)
				a := p.Plan(&st, lim, now, in)
				if quiet && (a.Calls() || a.Expire > 0 || a.Drip > 0) {
					t.Fatalf("Quiet, yet the plan did %+v", a)
				}
				if a.Acquire < 0 || a.Acquire > lim.Burst {
					t.Fatalf("Acquire %d, want 0..Burst %d", a.Acquire, lim.Burst)
				}
				if a.Acquire > 0 && now.Before(notBefore) && a.Share == lease.ShareKeep {
					// (A share's renewal or end goes when due, with
					// what the demand beyond the share uses.)
					t.Fatalf("Acquire %d at %v, before NotBefore %v", a.Acquire, now, notBefore)
				}
				if a.Drip > 0 {
					// A rate share's tokens that came due (the Syncer
					// credits them before the expiry reads the counter).
					in.Level = tokens.Add(a.Drip)
				}
				if a.Expire < 0 || a.Expire > in.Level {
					t.Fatalf("Expire %d with %d held", a.Expire, in.Level)
				}
				if a.Expire > 0 {
					// A request may spend between the plan and the take.
					if rapid.Bool().Draw(t, "raceTake") && tokens.Load() > 0 {
						tokens.TrySpend(rapid.Int64Range(1, tokens.Load()).Draw(t, "raceSpend"))
					}
					taken, left := tokens.Take(a.Expire)
					p.Expired(&st, taken, left)
				}
				if !a.Calls() {
					return
				}
				// Requests spend while the call is in flight.
				if held := tokens.Load(); held > 0 && rapid.Bool().Draw(t, "spendInFlight") {
					tokens.TrySpend(rapid.Int64Range(1, held).Draw(t, "inFlight"))
				}
				if rapid.IntRange(0, 4).Draw(t, "fail") == 0 {
					p.Failed(&st, now)
					synced = false
					if !st.NotBefore().After(now) {
						t.Fatalf("after a failure NotBefore %v is not after %v", st.NotBefore(), now)
					}
					return
				}
				g := lease.Grant{Granted: rapid.Int64Range(0, a.Acquire).Draw(t, "granted"), ServerTime: now}
				if g.Granted < a.Acquire {
					g.Tokens = rapid.Float64Range(0, 0.999).Draw(t, "dryTokens")
				} else {
					g.Tokens = rapid.Float64Range(0, float64(lim.Burst)).Draw(t, "tokensLeft")
				}
				if cfg.SharePeriod > 0 {
					// Redis's fair share for this instance; below the
					// demand it makes the tenant short, and an ask follows.
					g.Share = rapid.Float64Range(0, lim.Rate).Draw(t, "fairShare")
				}
				switch held, ok := st.HeldShare(); {
				case a.Share == lease.ShareAsk && rapid.Bool().Draw(t, "shareGranted"):
					g.RateShare = lease.RateShare{
						Rate:  rapid.Float64Range(0.001, lim.Rate).Draw(t, "shareRate"),
						From:  now,
						Until: now.Add(cfg.SharePeriod),
					}
				case a.Share == lease.ShareKeep && ok:
					g.RateShare = held // still in force at Redis
				}
				level := tokens.Add(g.Granted)
				p.Granted(&st, lim, now, a.Acquire, g, level)
				p.Shared(&st, lim, a.Share, now, now, g)
				if a.Acquire > 0 && g.Granted < a.Acquire && !st.NotBefore().After(now) {
					t.Fatalf("after a partial grant NotBefore %v is not after %v", st.NotBefore(), now)
				}
				if st.Failures() != 0 {
					t.Fatalf("Failures() = %d after a grant", st.Failures())
				}
			},
		})
	})
}

// TestShortLeaseTTLCalls: a steady tenant's lease calls and expired tokens
// at the shortest lease lifetimes the quota accepts (quota.MinLeaseTTL:
// twice the refresh interval). Before expired tokens were dropped and the
// target capped at the demand over a lease's usable lifetime, a LeaseTTL
// of 200 ms replaced each lease half-way through its life: 8 calls a
// second and 6,000 of 16,000 tokens expired unspent at 1,000 a second.
// Now none expire. At LeaseTTL = 2 intervals the usable lifetime is one
// interval (leases are renewed up to two intervals before they expire, at
// most half their life), so the target is one interval of demand, and
// both the low watermark and the schedule call in every interval: two
// calls an interval, the cost docs/tuning.md states. From 3 intervals,
// one.
func TestShortLeaseTTLCalls(t *testing.T) {
	const interval = 100 * time.Millisecond // Config{}'s
	for _, c := range []struct {
		ttl      time.Duration
		maxCalls float64 // per second, at 1,000 tokens a second
	}{
		{2 * interval, 2 * float64(time.Second/interval)},
		{3 * interval, 1.1 * float64(time.Second/interval)},
		{5 * interval, 1.1 * float64(time.Second/interval)},
		{2 * time.Second, 1.1 * float64(time.Second/interval)},
	} {
		lim := testLimits()
		lim.LeaseTTL = c.ttl
		if err := (quota.Defaults{Interval: interval}).Check(lim); err != nil {
			t.Fatalf("LeaseTTL %v: %v", c.ttl, err)
		}
		r := warm(t, Config{}, lim, 1000)
		calls, acquired, expired, spent := r.calls, r.acquired, r.expired, r.spent
		r.run(1000, 10*time.Second, tick, nil)
		perSec := float64(r.calls-calls) / 10
		t.Logf("LeaseTTL %v: %.0f calls/s, acquired %d, expired %d, spent %d in 10 s",
			c.ttl, perSec, r.acquired-acquired, r.expired-expired, r.spent-spent)
		if perSec > c.maxCalls {
			t.Errorf("LeaseTTL %v: %.0f lease calls per second for a steady tenant, want at most %.0f", c.ttl, perSec, c.maxCalls)
		}
		if exp, sp := r.expired-expired, r.spent-spent; exp > sp/100 {
			t.Errorf("LeaseTTL %v: %d tokens expired unspent (dropped) while %d were spent", c.ttl, exp, sp)
		}
		if sp := r.spent - spent; sp < 9_900 {
			t.Errorf("LeaseTTL %v: %d tokens spent of 10,000 asked in 10 s", c.ttl, sp)
		}
	}
}

// TestDemandCountsSpendsDuringCall guards the fix of a reported bug:
// tokens spent while a lease call is in flight must reach the demand
// estimate (Granted observes what its ledger Sync finds spent). When they
// were dropped, with 20 ms per call out of every 100 ms the estimate, and
// so the lease size, fell 20-30% short of a steady demand, which made more
// calls, which hid more spends. The estimate must stay within 10%.
func TestDemandCountsSpendsDuringCall(t *testing.T) {
	const demand = 1000.0
	const latency = 20 * time.Millisecond
	p := NewPlanner(Config{}, testSeed)
	lim := testLimits()
	var (
		st       State
		tokens   bucket.Counter
		now      = pt0
		inflight int64 // tokens asked for by the call in flight, 0 for none
		sent     time.Time
		missed   int64
		acc      float64
	)
	p.Init(&st, "x", now)
	var worst float64
	for i := range 20_000 { // 20 s in 1 ms steps
		now = now.Add(time.Millisecond)
		acc += demand / 1000
		for ; acc >= 1; acc-- {
			if ok, _ := tokens.TrySpend(1); !ok {
				missed++
			}
		}
		if inflight > 0 && now.Sub(sent) >= latency {
			level := tokens.Add(inflight)
			p.Granted(&st, lim, sent, inflight, lease.Grant{Granted: inflight, Tokens: 1e9}, level)
			inflight = 0
		}
		// The Syncer skips a tenant whose call is in flight (TryLock).
		if i%int(tick/time.Millisecond) != 0 || inflight > 0 {
			continue
		}
		a := p.Plan(&st, lim, now, Input{Level: tokens.Load(), Missed: missed})
		missed = 0
		if a.Expire > 0 {
			taken, left := tokens.Take(a.Expire)
			p.Expired(&st, taken, left)
		}
		if a.Acquire > 0 {
			inflight, sent = a.Acquire, now
		}
		if i > 5000 {
			// Just after a plan the estimate has not decayed.
			worst = max(worst, math.Abs(st.Demand()-demand)/demand)
		}
	}
	if worst > 0.1 {
		t.Errorf("with %v per lease call, the demand estimate is off by up to %.0f%% of a steady %v/s", latency, 100*worst, demand)
	}
}

// TestPartialGrantWaitSaturates guards the fix of a reported bug: with
// extreme but valid limits, the refill wait after a partial grant is
// centuries, Grant.RetryAfter saturates at math.MaxInt64, and adding the
// jitter to it overflowed, so NotBefore fell ~292 years in the past and a
// starved tenant called Redis at every plan instead of never. A hold
// (holdBack) is now at most a day, so the sum cannot overflow.
func TestPartialGrantWaitSaturates(t *testing.T) {
	// One token per ~11.6 days, leases of at least 10,000: a full lease
	// takes 3,000+ centuries to refill. Quota.Validate accepts this.
	lim := quota.Quota{Rate: 1e-6, Burst: 1e5, MinLease: 1e4, MaxLease: 1e5, LeaseTTL: time.Second}
	r := newRig(Config{}, lim, "glacial")
	r.grant = func(int64) (lease.Grant, bool) { return lease.Grant{Granted: 0, Tokens: 0.5}, true }
	r.request(1)
	if a := r.plan(); a.Acquire == 0 {
		t.Fatal("no cold-start acquire")
	}
	if nb := r.st.NotBefore(); !nb.After(r.now) {
		t.Errorf("after a partial grant whose refill takes centuries, NotBefore = %v, before now (%v): the wait overflowed", nb, r.now)
	}
	calls := r.calls
	r.run(1, time.Second, tick, nil)
	if r.calls-calls > 1 {
		t.Errorf("a starved tenant whose bucket refills in centuries made %d calls in a second", r.calls-calls)
	}
}

// TestDrainedNamesTheOldestGrant: when an urgent refill (planned later)
// overtook a round's call in Redis, a return of both batches names the
// refill's grant, the older in Redis, and is aged from the round's time,
// the earlier plan.
func TestDrainedNamesTheOldestGrant(t *testing.T) {
	p := NewPlanner(Config{}, testSeed)
	var st State
	p.Init(&st, "t", pt0)
	lim := testLimits()
	round, refill := pt0, pt0.Add(10*time.Millisecond) // the times the calls were planned
	at := func(us int64) time.Time { return time.UnixMicro(1_800_000_000_000_000 + us) }
	gRefill := lease.Grant{Granted: 5, ServerTime: at(100)} // applied first
	gRound := lease.Grant{Granted: 7, ServerTime: at(200)}
	p.Granted(&st, lim, refill, 5, gRefill, 5)
	p.Granted(&st, lim, round, 7, gRound, 12)
	p.Granted(&st, lim, refill.Add(time.Millisecond), 3, lease.Grant{Granted: 0, ServerTime: at(300)}, 12)
	n, oldest, id := p.Drained(&st)
	if n != 12 || !oldest.Equal(round) || id != gRefill.ID() {
		t.Fatalf("Drained = %d, %v, %d; want 12, the round's time, the refill's ID %d", n, oldest.Sub(pt0), id, gRefill.ID())
	}
}

// TestLargestRequestRoundsUp: the largest request is kept as a float32,
// rounded up, so a lease still covers it.
func TestLargestRequestRoundsUp(t *testing.T) {
	for _, n := range []int64{1, 1 << 24, 1<<24 + 1, 123456789, 1<<53 + 1, math.MaxInt64 - 1, math.MaxInt64} {
		if got := int64Of(ceil32(n)); got < n {
			t.Errorf("ceil32(%d) = %d, below it", n, got)
		}
	}
	if got := int64Of(ceil32(123456789)); got > 123456789+8 {
		t.Errorf("ceil32(123456789) = %d: more than a float32 step above", got)
	}
}

// TestScarceAsksForItsShareOfTheBurst: an over-demanded tenant shared by
// several instances, whose grants Redis caps at the instance's credit
// (share of the burst). After a short grant the planner waits until that
// credit has all but refilled, and then asks for all of it, not for an
// interval's demand: about Rate/Burst calls a second, each a worthwhile
// grant, however high the demand.
func TestScarceAsksForItsShareOfTheBurst(t *testing.T) {
	const instances = 16
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	share := lim.Rate / instances                     // 6.25/s
	capacity := float64(lim.Burst) * share / lim.Rate // 6.25 tokens
	r := newRig(Config{}, lim, "scarce")
	credit := capacity
	last := r.now
	var grants []int64
	r.grant = func(want int64) (lease.Grant, bool) {
		credit = min(capacity, credit+share*r.now.Sub(last).Seconds())
		last = r.now
		g := min(want, int64(credit))
		credit -= float64(g)
		grants = append(grants, g)
		return lease.Grant{Granted: g, Tokens: 0.5, Instances: instances, Share: share, ServerTime: r.now}, true
	}
	// Demand 3x the instance's share, for 20 s.
	r.run(3*share, 20*time.Second, tick, nil)
	r.checkHeld(t)
	perSec := float64(r.calls) / 20
	t.Logf("%d calls (%.2f/s), %d tokens acquired, grants %v...", r.calls, perSec, r.acquired, grants[:min(len(grants), 12)])
	// Its share over the run, less the credit it started with and what
	// accrued while it waited a tick.
	if want := share * 20 * 0.9; float64(r.acquired) < want {
		t.Errorf("acquired %d over 20 s, want at least 90%% of its share, %.0f", r.acquired, want)
	}
	if perSec > 1.5*lim.Rate/float64(lim.Burst) {
		t.Errorf("%.2f calls a second, want about Rate/Burst = %.2f", perSec, lim.Rate/float64(lim.Burst))
	}
	if tgt, want := r.st.Target(), int64(math.Ceil(float64(lim.Burst)/instances)); tgt < want {
		t.Errorf("scarce target %d, want at least Burst/instances = %d", tgt, want)
	}
}

// TestSkippedWaitsATick: an acquire the budget did not allow is planned
// again a quarter interval on, with the tenant's schedule, target and
// failures as they were; skipped with a longer wait (until its turn), it
// is held back and quiet that long.
func TestSkippedWaitsATick(t *testing.T) {
	lim := testLimits()
	p := NewPlanner(Config{}, testSeed)
	cfg := p.Config()
	var st State
	now := pt0
	p.Init(&st, "skipped", now)
	a := p.Plan(&st, lim, now, Input{Urgent: true, Need: 1})
	if a.Acquire == 0 {
		t.Fatal("cold start: no acquire")
	}
	before := st
	p.Skipped(&st, lim, now, 0, nil)
	if nb := st.NotBefore(); nb.Before(now.Add(cfg.Interval/4)) || nb.After(now.Add(cfg.Interval/4+time.Millisecond)) {
		t.Fatalf("NotBefore now + %v, want a quarter interval (%v)", nb.Sub(now), cfg.Interval/4)
	}
	if st.Target() != before.Target() || st.Failures() != 0 || !st.Next().Equal(before.Next()) {
		t.Fatalf("Skipped changed the plan: target %d (was %d), failures %d, next %v (was %v)",
			st.Target(), before.Target(), st.Failures(), st.Next(), before.Next())
	}
	if a := p.Plan(&st, lim, now.Add(cfg.Interval/8), Input{Urgent: true, Need: 1}); a.Acquire != 0 {
		t.Fatalf("acquire %d within the quarter interval after a skip", a.Acquire)
	}
	now = now.Add(cfg.Interval/4 + time.Millisecond)
	if a := p.Plan(&st, lim, now, Input{Urgent: true, Need: 1}); a.Acquire == 0 {
		t.Fatal("no acquire a quarter interval after a skip")
	}
	// Skipped until the tenant's turn: held back and quiet that long.
	p.Skipped(&st, lim, now, 3*cfg.Interval, nil)
	if nb := st.NotBefore(); nb.Before(now.Add(3*cfg.Interval)) || nb.After(now.Add(3*cfg.Interval+time.Millisecond)) {
		t.Fatalf("NotBefore now + %v, want the wait (%v)", nb.Sub(now), 3*cfg.Interval)
	}
	if !p.Quiet(&st, now.Add(2*cfg.Interval).UnixNano(), 0, true) {
		t.Fatal("not quiet within the wait")
	}
	if p.Quiet(&st, now.Add(3*cfg.Interval+time.Millisecond).UnixNano(), 0, true) {
		t.Fatal("quiet after the wait")
	}
}

// TestOverDemandDoesNotMultiplyCalls: a starved pair's lease calls follow
// its share of the rate, not its demand. One instance of 16 on an
// over-demanded tenant (Rate 100, Burst 100; Redis grants at most the
// credit its fair share accrued), offered 3, 6 and 12 times its share for
// 20 s: doubling the over-demand must not double its calls (#15's goal:
// Redis work bounded by admitted tokens / lease size, whatever the load).
func TestOverDemandDoesNotMultiplyCalls(t *testing.T) {
	const instances = 16
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	share := lim.Rate / instances
	capacity := float64(lim.Burst) * share / lim.Rate
	run := func(over float64) (calls int, acquired int64) {
		r := newRig(Config{}, lim, "over")
		credit, last := capacity, r.now
		r.grant = func(want int64) (lease.Grant, bool) {
			credit = min(capacity, credit+share*r.now.Sub(last).Seconds())
			last = r.now
			g := min(want, int64(credit))
			credit -= float64(g)
			return lease.Grant{Granted: g, Tokens: 0.5, Instances: instances, Share: share, ServerTime: r.now}, true
		}
		r.run(over*share, 20*time.Second, tick, nil)
		r.checkHeld(t)
		return r.calls, r.acquired
	}
	base, baseAcq := run(3)
	for _, over := range []float64{6, 12} {
		calls, acq := run(over)
		t.Logf("%.0fx its share: %d calls, %d tokens acquired (3x: %d calls, %d tokens)", over, calls, acq, base, baseAcq)
		if float64(calls) > 1.15*float64(base) {
			t.Errorf("%.0fx over-demand: %d calls, want within 15%% of the %d at 3x", over, calls, base)
		}
		if float64(acq) < 0.95*float64(baseAcq) {
			t.Errorf("%.0fx over-demand: acquired %d, want about the %d at 3x (its share)", over, acq, baseAcq)
		}
	}
}

// TestRefundedEndsTheDryBucketWait: after a grant that found the bucket
// dry, the planner holds the tenant's calls back until it refilled; a
// refund returned to the bucket before the plan's acquire (Input.Refunded)
// ends that wait, but not a failure's backoff.
func TestRefundedEndsTheDryBucketWait(t *testing.T) {
	lim := quota.Quota{Rate: 0.002, Burst: 2, MinLease: 1, MaxLease: 2, LeaseTTL: time.Minute}
	p := NewPlanner(Config{}, testSeed)
	var st State
	now := pt0
	p.Init(&st, "dry", now)
	a := p.Plan(&st, lim, now, Input{Urgent: true, Need: 2})
	if a.Acquire == 0 {
		t.Fatal("cold start: no acquire")
	}
	p.Granted(&st, lim, now, a.Acquire, lease.Grant{Granted: 0, Tokens: 0, ServerTime: now}, 0)
	if wait := st.NotBefore().Sub(now); wait < time.Minute {
		t.Fatalf("after a dry grant the tenant waits %v, want the bucket's refill (minutes)", wait)
	}
	later := now.Add(time.Second)
	if a := p.Plan(&st, lim, later, Input{Urgent: true, Need: 2}); a.Acquire != 0 {
		t.Fatalf("acquire %d while the bucket refills", a.Acquire)
	}
	if a := p.Plan(&st, lim, later, Input{Urgent: true, Need: 2, Refunded: true}); a.Acquire == 0 {
		t.Fatal("no acquire after a refund went back to the dry bucket")
	}

	// A failure's backoff holds, refund or not.
	p.Failed(&st, later)
	if a := p.Plan(&st, lim, later, Input{Urgent: true, Need: 2, Refunded: true}); a.Acquire != 0 {
		t.Fatalf("acquire %d within a failure's backoff", a.Acquire)
	}
}

// TestScarceFullGrantWaitsForItsShare: one of 4 instances on a bucket
// that the others keep short (Tokens below each grant), its share 25/s.
// Its credit at Redis is larger than its lease target (the others left
// some unused), so its calls are served in full, yet each leaves the
// bucket short: it waits for its share to accrue what it took before
// calling again, rather than calling every refresh for top-ups of a few
// tokens. Its demand, twice its share, still gets the share.
func TestScarceFullGrantWaitsForItsShare(t *testing.T) {
	const instances = 4
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	share := lim.Rate / instances // 25/s
	r := newRig(Config{}, lim, "scarce")
	credit := float64(lim.Burst)
	last := r.now
	var full, partial int
	r.grant = func(want int64) (lease.Grant, bool) {
		credit = min(float64(lim.Burst), credit+share*r.now.Sub(last).Seconds())
		last = r.now
		g := min(want, int64(credit))
		credit -= float64(g)
		if g < want {
			partial++
		} else {
			full++
		}
		return lease.Grant{Granted: g, Tokens: 0.5, Instances: instances, Share: share, ServerTime: r.now}, true
	}
	r.run(2*share, 20*time.Second, tick, nil)
	r.checkHeld(t)
	perSec := float64(r.calls) / 20
	t.Logf("%d calls (%.2f/s: %d served in full, %d in part), %d tokens acquired", r.calls, perSec, full, partial, r.acquired)
	if want := share * 20 * 0.9; float64(r.acquired) < want {
		t.Errorf("acquired %d over 20 s, want at least 90%% of its share, %.0f", r.acquired, want)
	}
	// 1.15 a second; 1.55 before full grants waited (12 of 31 calls
	// served in full, the rest top-ups found short).
	if perSec > 1.3*lim.Rate/float64(lim.Burst) {
		t.Errorf("%.2f calls a second, want about Rate/Burst = %.2f", perSec, lim.Rate/float64(lim.Burst))
	}
}

// TestScarceLeaseWithinLifetimeDemand: a scarce instance asks for its
// share of the burst only as far as its demand spends it in a lease's
// lifetime. Here 2 instances share Rate 500, Burst 1000, and this one
// asks for 8 tokens a second, of leases of 400 ms (200 ms of them
// usable): half the burst, 500 tokens, would expire all but a few, and a
// full grant of them would hold its next call back until its share of
// the rate (its demand, 8/s, under max-min fairness) had accrued them
// again, a minute (TestSimulation's seed 682).
func TestScarceLeaseWithinLifetimeDemand(t *testing.T) {
	const instances, demand = 2, 8.0
	lim := quota.Quota{Rate: 500, Burst: 1000, MinLease: 1, MaxLease: 500, LeaseTTL: 400 * time.Millisecond}
	r := warm(t, Config{}, lim, demand) // the bucket full: not scarce
	var most int64
	calls, longest := []time.Time{r.now}, time.Duration(0)
	r.grant = func(want int64) (lease.Grant, bool) {
		most = max(most, want)
		longest = max(longest, r.now.Sub(calls[len(calls)-1]))
		calls = append(calls, r.now)
		// Served in full, but the others leave the bucket short: the
		// instance stays scarce.
		return lease.Grant{Granted: want, Tokens: 0.5, Instances: instances, Share: demand, ServerTime: r.now}, true
	}
	r.calls, r.acquired, r.expired, r.spent = 0, 0, 0, 0
	r.run(demand, 20*time.Second, tick, nil)
	r.checkHeld(t)
	t.Logf("%d calls, at most %d tokens asked, longest gap %v, %d tokens acquired, %d expired", r.calls, most, longest, r.acquired, r.expired)
	usable := lim.LeaseTTL - min(2*r.p.Config().Interval, lim.LeaseTTL/2)
	if want := int64(math.Ceil(2 * demand * usable.Seconds())); most > want {
		t.Errorf("asked for %d tokens at once, want at most %d (twice the demand over a lease's usable lifetime)", most, want)
	}
	if longest > 2*time.Second {
		t.Errorf("%v between calls, want at most 2 s", longest)
	}
	if r.spent < int64(0.9*demand*20) {
		t.Errorf("spent %d of %.0f tokens asked for", r.spent, demand*20)
	}
}

// TestDemandAtStart: a new tenant's demand estimate is the mean over the
// time it has been seen, not an average that starts at zero and takes
// seconds to reach the demand: after 300 ms of 15 tokens a second it is
// about 15 (the plain average of half-life 500 ms: 5), so a low-rate
// tenant's leases are sized for its demand from its first plans on, and
// an instance does not make a call for every two or three tokens of its
// first second (issue #16's low-rate tenants in the simulator: 1,517 of
// 2,671 acquires of a 10 s run in its first second; 623 of 1,659 since). Later, it is the average as before.
func TestDemandAtStart(t *testing.T) {
	const demand = 15.0
	lim := quota.Quota{Rate: 20, Burst: 40, MinLease: 1, MaxLease: 20, LeaseTTL: time.Second}
	r := newRig(Config{}, lim, "new")
	r.run(demand, 300*time.Millisecond, tick, nil)
	if d := r.st.Demand(); d < 0.8*demand || d > 1.25*demand {
		t.Errorf("demand %.2f/s after 300 ms of %v/s, want about %v", d, demand, demand)
	}
	calls := r.calls
	r.run(demand, 700*time.Millisecond, tick, nil)
	t.Logf("calls in the first 300 ms: %d, in the first second: %d, target %d", calls, r.calls, r.st.Target())
	if want := wantTarget(r.p.Config(), lim, demand); r.st.Target() < want*9/10 {
		t.Errorf("target %d after a second of %v/s, want about %d", r.st.Target(), demand, want)
	}
	// After many half-lives the correction is gone: a fall in demand
	// shows as in the plain average.
	r.run(demand, 20*time.Second, tick, nil)
	r.run(demand/3, time.Second, tick, nil)
	plain := demand/3 + (demand-demand/3)*math.Exp2(-2)
	if d := r.st.Demand(); math.Abs(d-plain) > 0.1*plain {
		t.Errorf("demand %.2f/s a second after it fell to %v/s, want the plain average's %.2f", d, demand/3, plain)
	}
}

// TestSmallShareWaitsAtMostTheFillTime: an instance of a scarce tenant
// whose share at Redis is tiny (the demand it reported was a request now
// and then) gets nothing from a call, its credit spent. It comes back
// within the bucket's fill time, Burst/Rate (1 s here), to report the
// demand it has now, not after its share accrued a token (20 s); and no
// more often than that while its share stays so small.
func TestSmallShareWaitsAtMostTheFillTime(t *testing.T) {
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	r := newRig(Config{}, lim, "trickle")
	const share = 0.05
	var calls []time.Time
	r.grant = func(want int64) (lease.Grant, bool) {
		calls = append(calls, r.now)
		return lease.Grant{Granted: 0, Tokens: 30, Instances: 2, Share: share, ServerTime: r.now}, true
	}
	r.run(20, 10*time.Second, tick, nil)
	if len(calls) < 2 {
		t.Fatalf("%d calls in 10 s, want one about every second", len(calls))
	}
	longest := longestGap(calls)
	fill := time.Duration(float64(lim.Burst) / lim.Rate * float64(time.Second))
	slack := r.p.Config().Jitter + tick
	t.Logf("%d calls in 10 s, the longest gap %v (fill time %v)", len(calls), longest, fill)
	if longest > fill+slack {
		t.Errorf("%v between calls, want at most the fill time %v (+ jitter and a tick, %v)", longest, fill, slack)
	}
	if len(calls) > 12 {
		t.Errorf("%d calls in 10 s, want about one per fill time", len(calls))
	}
	if d := r.st.NotBefore().Sub(r.now); d > fill+slack {
		t.Errorf("the next call is held back %v, want at most %v", d, fill+slack)
	}
}

// TestSmallSharePartialGrantWaitsAtMostTheFillTime: as
// TestSmallShareWaitsAtMostTheFillTime, but each call gets a token of the
// ten it asks for (the bucket holds that much), and the planner knows the
// registry window (Config.Window, as the limiter sets it). The credit
// Redis keeps for a share that small is its floor of a token, which the
// share takes 20 s to accrue; the credit span (half the window, 3.05 s)
// is not the instance's to wait for either: it comes back within the
// fill time, or half the window at most.
func TestSmallSharePartialGrantWaitsAtMostTheFillTime(t *testing.T) {
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	window := RegistryWindow(lim.LeaseTTL, 100*time.Millisecond, 0)
	r := newRig(Config{Window: window}, lim, "trickle")
	const share = 0.05
	var calls []time.Time
	r.grant = func(want int64) (lease.Grant, bool) {
		calls = append(calls, r.now)
		return lease.Grant{Granted: min(want, 1), Tokens: 0.5, Instances: 20, Share: share, ServerTime: r.now}, true
	}
	r.run(20, 20*time.Second, tick, nil)
	if len(calls) < 2 {
		t.Fatalf("%d calls in 20 s, want several", len(calls))
	}
	longest := longestGap(calls)
	most := max(time.Duration(float64(lim.Burst)/lim.Rate*float64(time.Second)), window/2) + r.p.Config().Jitter + tick
	t.Logf("%d calls in 20 s, the longest gap %v (at most %v)", len(calls), longest, most)
	if longest > most {
		t.Errorf("%v between calls, want at most %v: the fill time or half the window, not the 20 s a token of credit takes", longest, most)
	}
}

// longestGap is the longest time between two successive calls.
func longestGap(calls []time.Time) time.Duration {
	var longest time.Duration
	for i := 1; i < len(calls); i++ {
		longest = max(longest, calls[i].Sub(calls[i-1]))
	}
	return longest
}

// TestSmallLeaseTopsUpWhenNearlySpent: one instance of 16 on a tenant
// within its quota (Rate 100, Burst 100, the bucket staying well above
// half full), spending 5.625 tokens a second, a sixteenth of 0.9 of the
// rate. Its lease target is a few tokens (sized in time: target), which
// scheduled refreshes topped up by a token or two, about one lease call
// per token spent (0.98 calls per token here before topUpNeed). Now it
// is topped up once at most one token is left: half the calls, and no
// request finds the lease empty.
func TestSmallLeaseTopsUpWhenNearlySpent(t *testing.T) {
	const demand = 0.9 * 100 / 16
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: time.Second}
	r := newRig(Config{}, lim, "under")
	r.grant = func(want int64) (lease.Grant, bool) {
		return lease.Grant{Granted: want, Tokens: 80, Instances: 16, Share: demand, ServerTime: r.now}, true
	}
	r.run(demand, 20*time.Second, tick, nil)
	r.checkHeld(t)
	perToken := float64(r.calls) / float64(r.spent)
	t.Logf("%d calls for %d tokens spent (%.2f a token), target %d, %d denied, %d of %d acquired expired",
		r.calls, r.spent, perToken, r.st.Target(), r.denied, r.expired, r.acquired)
	if r.st.Target() >= worthwhileLease {
		t.Fatalf("target %d: the test wants a small lease (below %d)", r.st.Target(), worthwhileLease)
	}
	if r.denied != 0 {
		t.Errorf("%d tokens denied: a request found the lease empty", r.denied)
	}
	if perToken > 0.6 {
		t.Errorf("%.2f lease calls per token spent, want at most 0.6", perToken)
	}
	// The first lease, before any demand was measured, is Rate*Interval
	// (coldTarget): 10 tokens, more than the demand spends in a lease's
	// lifetime. Later ones must not expire.
	if r.expired > 10 {
		t.Errorf("%d of %d tokens acquired expired, want at most the first lease's 10", r.expired, r.acquired)
	}
}

// TestFailedBackoffHugeBounds: backoffs of hours and more never wrap.
// MinBackoff doubled 20 times went past 2^63 ns from 2.4 hours on, and
// wrapped: to a negative number (taken for MaxBackoff), or to a positive
// one of any size, 1 s for a MinBackoff of 2^44 ns + 1 µs (4.9 h) after
// 21 failures, a call a second in an outage. A MaxBackoff near the
// largest Duration is pinned too: now + the wait wraps past 2^63 ns, and
// the stamp's difference from its base wraps back (stampOf), so the wait
// is the longest a stamp holds. Every wait is at least half MinBackoff,
// at most MaxBackoff, but never past what a State's stamps hold (at
// least 12 days ahead).
func TestFailedBackoffHugeBounds(t *testing.T) {
	const day = 24 * time.Hour
	for _, cfg := range []Config{
		{MinBackoff: 1<<44 + time.Microsecond, MaxBackoff: 30 * day},
		{MinBackoff: 5 * time.Hour, MaxBackoff: 20 * day},
		{MinBackoff: 3 * time.Hour, MaxBackoff: math.MaxInt64},
		{MinBackoff: math.MaxInt64, MaxBackoff: math.MaxInt64},
	} {
		p := NewPlanner(cfg, testSeed)
		c := p.Config()
		for _, name := range []string{"a", "b", "c", "d"} {
			var st State
			p.Init(&st, name, pt0)
			now := pt0
			for k := 1; k <= 30; k++ {
				p.Failed(&st, now)
				d := st.NotBefore().Sub(now)
				if least := min(c.MinBackoff/2, 12*day); d < least || d > c.MaxBackoff {
					t.Fatalf("%+v, tenant %s: failure %d backs off %v, want in [%v, %v]", c, name, k, d, least, c.MaxBackoff)
				}
				now = now.Add(time.Minute) // the retry, early: a refill's
			}
		}
	}
}
