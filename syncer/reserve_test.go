package syncer

import (
	"context"
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// schedule is one reservation as Redis granted it: tokens at pace from
// start (exact, in ms), for the checks below.
type schedule struct {
	start  float64 // ms
	tokens int64
	pace   float64
}

// dueBy returns how many of s's tokens are due at t ms: token k is due
// at start + k/pace.
func (s schedule) dueBy(t float64) int64 {
	if t <= s.start {
		return 0
	}
	return min(s.tokens, int64(math.Floor((t-s.start)*s.pace/1000+1e-9)))
}

// TestReservationNeverEarly: whatever reservations arrive and merge, and
// whenever the planner looks, the tokens that came due never exceed what
// the bucket refilled for them (token k of a reservation exists from its
// start + k/rate), and once the last is due every token has come.
func TestReservationNeverEarly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var (
			r     reservation
			now   stamp      // ms
			all   []schedule // by production: pace is the rate
			paces []float64
			taken int64
		)
		for range rapid.IntRange(1, 40).Draw(t, "steps") {
			if rapid.Bool().Draw(t, "add") {
				start := now + stamp(rapid.IntRange(0, 3000).Draw(t, "delay"))
				n := rapid.Int64Range(0, 500).Draw(t, "tokens")
				rate := rapid.Float64Range(0.01, 5000).Draw(t, "rate")
				pace := rate * rapid.Float64Range(0.001, 1).Draw(t, "share")
				// A reservation is a share over at most a minute
				// (MaxReservation at the root).
				n = min(n, int64(math.Ceil(pace*60)))
				r.add(now, start, n, pace, rate)
				if n > 0 {
					all = append(all, schedule{float64(start), n, rate})
					paces = append(paces, pace)
				}
			}
			now += stamp(rapid.IntRange(0, 2000).Draw(t, "advance"))
			got, _ := r.take(now)
			taken += got
			var allowed int64
			for _, s := range all {
				allowed += s.dueBy(float64(now))
			}
			if taken > allowed {
				t.Fatalf("at %d ms: %d tokens came due, the bucket refilled %d of them (%+v)", now, taken, allowed, all)
			}
		}
		var total int64
		last := 0.0
		for _, s := range all {
			total += s.tokens
			last = max(last, s.start+float64(s.tokens)*1000/s.pace)
		}
		// Merged tokens come at the slowest pace of their merge: wait for
		// that long after the last start.
		slowest := math.Inf(1)
		for _, p := range paces {
			slowest = min(slowest, p)
		}
		if len(all) > 0 {
			end := last + float64(total)*1000/slowest + 2
			got, _ := r.take(stamp(min(end, float64(stampMax))))
			taken += got
		}
		if taken != total {
			t.Fatalf("%d of %d reserved tokens came due in the end", taken, total)
		}
	})
}

// reservingBucket answers a rig's acquires as Redis does for one of
// instances instances on a starved tenant: at once, at most the credit
// its fair share accrued (up to its share of the burst); with a
// reservation horizon, when that is less than it asks for, also its share
// over the horizon, paced at its share. Once it reserves, the others do too:
// the bucket's refill is committed ahead and nothing is granted at once. It records each reservation's
// schedule (from the rig's time: the reply arrives at once).
type reservingBucket struct {
	r                *rig
	share, capacity  float64
	credit           float64
	last             time.Time
	reservations     []schedule
	reservedTokens   int64
	reservationCalls int
}

func newReservingBucket(r *rig, instances int) *reservingBucket {
	share := r.lim.Rate / float64(instances)
	b := &reservingBucket{r: r, share: share, capacity: float64(r.lim.Burst) * share / r.lim.Rate, last: r.now}
	b.credit = b.capacity
	r.grant = b.grant
	return b
}

func (b *reservingBucket) grant(want int64) (lease.Grant, bool) {
	r := b.r
	b.credit = min(b.capacity, b.credit+b.share*r.now.Sub(b.last).Seconds())
	b.last = r.now
	g := min(want, int64(b.credit))
	if b.reservationCalls > 0 {
		// Every instance reserves: the bucket's refill is committed, and
		// nothing is left to take at once.
		g = 0
	}
	b.credit -= float64(g)
	out := lease.Grant{Granted: g, Tokens: 0.5, Instances: int(r.lim.Rate / b.share), Share: b.share, ServerTime: r.now}
	if r.reserve > 0 && want > g {
		res := int64(b.share * r.reserve.Seconds())
		if res > 0 {
			out.Granted += res
			out.Reserved, out.Pace = res, b.share
			b.reservations = append(b.reservations, schedule{float64(r.now.Sub(pt0).Milliseconds()), res, b.share})
			b.reservedTokens += res
			b.reservationCalls++
		}
	}
	return out, true
}

// TestReservedStarvedPairCallsOncePerHorizon: one of 16 instances on a
// starved tenant (Rate 100, Burst 100), offered 3 times its share for
// 40 s. Without reservations it calls about Rate/Burst = 1 time a
// second; with a 4 s horizon, about once per 4 s, and it admits as much
// (its share over the run). No reserved token comes due early.
func TestReservedStarvedPairCallsOncePerHorizon(t *testing.T) {
	const instances = 16
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	const run = 40 * time.Second
	share := lim.Rate / instances

	plain := newRig(Config{}, lim, "starved")
	newReservingBucket(plain, instances)
	plain.run(3*share, run, tick, nil)
	plain.checkHeld(t)

	r := newRig(Config{Reserve: 4 * time.Second}, lim, "starved")
	b := newReservingBucket(r, instances)
	var dripped int64
	r.run(3*share, run, tick, func(a Action) {
		dripped += a.Drip
		var allowed int64
		for _, s := range b.reservations {
			allowed += s.dueBy(float64(r.now.Sub(pt0).Milliseconds()))
		}
		if dripped > allowed {
			t.Fatalf("at +%v: %d reserved tokens came due, the reservations allow %d", r.now.Sub(pt0), dripped, allowed)
		}
	})
	r.checkHeld(t)
	perSec := func(calls int) float64 { return float64(calls) / run.Seconds() }
	t.Logf("without reservations: %d calls (%.2f/s), %d tokens spent; with a 4 s horizon: %d calls (%.2f/s, %d reserving), %d tokens spent, %d reserved, %d come due",
		plain.calls, perSec(plain.calls), plain.spent, r.calls, perSec(r.calls), b.reservationCalls, r.spent, b.reservedTokens, dripped)
	if perSec(r.calls) > 0.35 {
		t.Errorf("%.2f calls a second with a 4 s horizon, want about one per horizon (0.25)", perSec(r.calls))
	}
	if perSec(plain.calls) < 3*perSec(r.calls) {
		t.Errorf("reservations cut the calls from %d to %d only", plain.calls, r.calls)
	}
	if want := 0.9 * share * run.Seconds(); float64(r.spent) < want {
		t.Errorf("spent %d with reservations, want at least 90%% of its share, %.0f", r.spent, want)
	}
	if r.st.Reserved() < 0 || dripped+r.st.Reserved() != b.reservedTokens {
		t.Errorf("reserved %d: %d came due, %d to come", b.reservedTokens, dripped, r.st.Reserved())
	}
}

// TestDrainedDropsReservation: a drained tenant's reserved tokens still
// to come are dropped, and nothing comes due after.
func TestDrainedDropsReservation(t *testing.T) {
	lim := testLimits()
	p := NewPlanner(Config{Reserve: time.Second}, testSeed)
	var st State
	p.Init(&st, "drained", pt0)
	p.Reserved(&st, lim, pt0, pt0, lease.Grant{Granted: 50, Reserved: 50, Pace: 10, ServerTime: pt0})
	if st.Reserved() != 50 {
		t.Fatalf("reserved %d, want 50", st.Reserved())
	}
	if a := p.Plan(&st, lim, pt0.Add(time.Second), Input{}); a.Drip != 10 {
		t.Fatalf("a second in: %d came due, want 10", a.Drip)
	}
	p.Drained(&st)
	if a := p.Plan(&st, lim, pt0.Add(10*time.Second), Input{}); a.Drip != 0 || st.Reserved() != 0 {
		t.Fatalf("after Drained: %d came due, %d to come", a.Drip, st.Reserved())
	}
}

// TestReservationSurvivesRebase: when a State's stamps move to a new base
// (its clock ran 12 days past the old one), a reservation keeps its times:
// when its next token is due, and when the call that reserved it was
// planned (which a return's age counts from).
func TestReservationSurvivesRebase(t *testing.T) {
	lim := testLimits()
	p := NewPlanner(Config{Reserve: time.Second}, testSeed)
	var st State
	p.Init(&st, "rebased", pt0)
	planned := pt0.Add(time.Hour)
	p.Reserved(&st, lim, planned, planned, lease.Grant{Granted: 10, Reserved: 10, Pace: 1e-5, ServerTime: planned})
	due, ok := st.NextDue()
	granted := st.at(st.resv.granted)
	if !ok {
		t.Fatal("no reservation")
	}
	st.setClock(pt0.Add(13 * 24 * time.Hour).UnixNano())
	if due2, _ := st.NextDue(); !due2.Equal(due) {
		t.Errorf("next token due at %v after the rebase, %v before", due2, due)
	}
	if g := st.at(st.resv.granted); g != granted {
		t.Errorf("reserving call planned at %v after the rebase, %v before", time.Unix(0, g), time.Unix(0, granted))
	}
}

// TestFirstReservationLengthSpread: the first reservation of a run asks
// for between half the configured length and all of it, spread over the
// tenants (and over instances, by the planner's seed), so that instances
// that start reserving together do not renew together; a renewal, while
// reserved tokens are still to come, asks for the whole length.
func TestFirstReservationLengthSpread(t *testing.T) {
	const length = 4 * time.Second
	lim := testLimits()
	p := NewPlanner(Config{Reserve: length}, testSeed)
	shortest, longest := length, time.Duration(0)
	for i := range 200 {
		var st State
		p.Init(&st, "tenant-"+string(rune('a'+i%26))+string(rune('a'+i/26)), pt0)
		got := p.reserveLength(&st, pt0.UnixNano(), lim.Rate)
		if got < length/2 || got > length {
			t.Fatalf("first reservation of %d asks for %v, want within [%v, %v]", i, got, length/2, length)
		}
		shortest, longest = min(shortest, got), max(longest, got)
		p.Reserved(&st, lim, pt0, pt0, lease.Grant{Granted: 10, Reserved: 10, Pace: 1, ServerTime: pt0})
		if st.Reserved() == 0 {
			t.Fatal("no reservation recorded")
		}
		if got := p.reserveLength(&st, pt0.Add(time.Second).UnixNano(), lim.Rate); got != length {
			t.Fatalf("renewal of %d asks for %v, want %v", i, got, length)
		}
	}
	if longest-shortest < length/4 {
		t.Errorf("first reservations of 200 tenants asked for %v to %v: not spread", shortest, longest)
	}
}

// TestNoRoomRetriesSpread: instances of a tenant that found no room for a
// reservation (the refill committed up to ReserveAhead, a grant of
// nothing with a wait) come back each at its own turn among the others
// that wait, over up to the others' spans (capped at the length), not all
// at the moment the refill has caught up by half a span.
func TestNoRoomRetriesSpread(t *testing.T) {
	const instances = 16
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	length := 4 * time.Second
	share := lim.Rate / instances
	span := time.Duration(share * length.Seconds() / lim.Rate * 1e9) // 250 ms
	wait := lease.ReserveAhead
	base := max(wait+span/2-lease.ReserveAhead, 100*time.Millisecond)
	first, last := time.Duration(math.MaxInt64), time.Duration(0)
	for i := range 100 {
		// Each a planner of its own (its instance's seed), on one tenant.
		p := NewPlanner(Config{Reserve: length}, testSeed+uint64(i))
		var st State
		p.Init(&st, "contended", pt0)
		st.flags |= flagScarce
		p.Reserved(&st, lim, pt0, pt0, lease.Grant{Share: share, Wait: wait, Instances: instances, ServerTime: pt0})
		at := time.Duration(st.at(st.notBefore) - pt0.UnixNano())
		if at < base || at > base+length+time.Millisecond {
			t.Fatalf("instance %d retries after %v, want within [%v, %v]", i, at, base, base+length)
		}
		first, last = min(first, at), max(last, at)
	}
	if spread := last - first; spread < length/2 {
		t.Errorf("100 instances retry from %v to %v after finding no room: spread %v, want at least %v", first, last, spread, length/2)
	}
}

// TestNewTenantDoesNotReserve: a tenant seen for less than a half-life
// does not start a reservation, however scarce its bucket: its demand
// estimate is the mean since it was first seen, over an interval at
// least, so one request reads as a token an interval, a sustained
// demand. Four instances whose first requests came together after an
// outage (one request each, a tenant of Rate 100 and Burst 10) reserved
// tens of tokens apiece on that estimate; the first reservation held the
// bucket's refill for a third of a second, and the last instance's
// request waited past its deadline behind it (TestSimulation, seeds
// 37861, 47506 and 50897). A demand that is sustained reserves once the
// tenant has been seen for a half-life.
func TestNewTenantDoesNotReserve(t *testing.T) {
	lim := quota.Quota{Rate: 100, Burst: 10, MinLease: 1, MaxLease: 5, LeaseTTL: 500 * time.Millisecond}
	cfg := Config{Reserve: 2 * time.Second}

	one := newRig(cfg, lim, "one-request")
	newReservingBucket(one, 4).credit = 0 // the others took the burst
	one.request(1)
	one.run(0, 2*time.Second, tick, func(a Action) {
		if a.Reserve > 0 {
			t.Fatalf("at +%v: a tenant asked once reserves (demand %.1f/s)", one.now.Sub(pt0), one.st.Demand())
		}
	})

	busy := newRig(cfg, lim, "busy")
	newReservingBucket(busy, 4)
	var first time.Duration
	busy.run(3*lim.Rate/4, 2*time.Second, tick, func(a Action) {
		if a.Reserve > 0 && first == 0 {
			first = busy.now.Sub(pt0)
		}
	})
	halfLife := busy.p.Config().HalfLife
	switch {
	case first == 0:
		t.Errorf("a tenant offered 3 times its share for 2 s never reserved")
	case first < halfLife:
		t.Errorf("a tenant seen for %v reserved, before a half-life (%v)", first, halfLife)
	}
}

// TestHugeReservationComesDueWhole: at a demand so high that a
// reservation of the configured length holds more tokens than an int32
// counts (reservation.left), the length asked for is cut so that Redis
// reserves no more than half of that, and every reserved token comes due.
// It was not: at a rate of 1e10 a second Redis reserved (and debited)
// 5e9, of which 2^31-1 came due. (The demand the call reports bounds the
// pace Redis reserves at: TestReservationUnderARaisedOverrideComesDueWhole.)
func TestHugeReservationComesDueWhole(t *testing.T) {
	lim := quota.Quota{Rate: 1e10, Burst: 1 << 40, MinLease: 1, MaxLease: 1 << 39, LeaseTTL: 2 * time.Second}
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: time.Second}, 1)
	now := time.Unix(1_000_000, 0)
	var st State
	p.Init(&st, "t", now)
	length := p.reserveLength(&st, now.UnixNano(), lim.Rate)
	most := int64(math.MaxInt32 / 2)
	if reserved := int64(length.Seconds() * lim.Rate); reserved > most || length <= 0 {
		t.Fatalf("a reservation of %v at %v a second holds %d tokens, want in (0, %d]", length, lim.Rate, reserved, most)
	}
	// What Redis reserves at that length comes due whole.
	reserved := int64(length.Seconds() * lim.Rate)
	g := lease.Grant{Granted: reserved + 1, Reserved: reserved, Pace: lim.Rate, Instances: 1, ServerTime: now}
	p.Reserved(&st, lim, now, now, g)
	if got := st.Reserved(); got != reserved {
		t.Errorf("%d reserved by Redis, %d to come here", reserved, got)
	}
	// A demand of ten a second is not cut.
	if got := p.reserveLength(&st, now.UnixNano(), 10); got != time.Second {
		t.Errorf("a renewal reporting 10 a second asks for %v, want the configured second", got)
	}
}

// TestGiveBackAcrossDripsOfOneGrant: reserved tokens that come due join
// the ledger unnamed, so no two of its batches carry one grant ID, and
// the front a request reads before it spends (Tenant.Front) changes when
// the oldest batch leaves. Named by their grant, the drips of one
// reservation shared its ID: when the oldest left, the front stayed, and
// a give-back that trusted it put 5 tokens back past their lease (10 in
// the counter, 5 alive).
func TestGiveBackAcrossDripsOfOneGrant(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: time.Second}, 1)
	lim := quota.Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 50, LeaseTTL: time.Second}
	var st State
	p.Init(&st, "t", t0)
	p.Reserved(&st, lim, t0, t0, lease.Grant{Granted: 10, Reserved: 10, Pace: 10, Instances: 1, ServerTime: t0})
	level := int64(0)
	plan := func(ms int) {
		a := p.Plan(&st, lim, at(ms), Input{Level: level})
		level += a.Drip
		if a.Expire > 0 {
			taken := min(a.Expire, level)
			level -= taken
			p.Expired(&st, taken, level)
		}
	}
	plan(500)
	plan(1000) // two batches of drips
	if st.ledger.n() < 2 {
		t.Fatalf("%d batches after two drips, want two", st.ledger.n())
	}
	seen := map[lease.GrantID]bool{}
	for i := range st.ledger.n() {
		if id := st.ledger.b.id[i]; id != 0 {
			if seen[id] {
				t.Fatalf("two batches of the ledger carry grant ID %d", id)
			}
			seen[id] = true
		}
	}
	front := st.ledger.frontID()
	level -= 5 // a multi-tenant decision spends 5
	plan(1550) // the oldest batch's lease is over: it leaves
	if front != 0 && st.ledger.frontID() == front {
		t.Fatalf("the oldest batch left and the front stayed %d: a give-back would trust it", front)
	}
}

// TestReservationStopsWhenTheRateFalls: reserved tokens still to come stop
// coming due once the quota's rate in force falls below the rate they were
// reserved under, as a rate share's do (TestShareEndsWhenTheRateFalls).
// Here a reservation made at a rate of 1,000 a second (990 tokens, the
// second ahead of Redis's clock) went on coming due at the old pace after
// an operator set the rate to 10: 990 tokens in the 5 s after the change,
// where the bound after a change allows Burst + Rate*T + 2*MaxLease of
// the old quota (260). A reservation merged into one reserved under the
// lower rate does not carry the old one's tokens on either.
func TestReservationStopsWhenTheRateFalls(t *testing.T) {
	qOld := quota.Quota{Rate: 1000, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}
	qNew := quota.Quota{Rate: 10, Burst: 10, LeaseTTL: time.Second, MaxLease: 10}
	allowed := func(d time.Duration) float64 {
		return float64(qNew.Burst) + qNew.Rate*d.Seconds() + 2*float64(qOld.MaxLease)
	}
	for _, merged := range []bool{false, true} {
		clock := time.Unix(1_000_000, 0)
		st := memstore.New(memstore.WithClock(func() time.Time { return clock }))
		b, err := st.Instance("B", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		old := lease.Limits{Rate: qOld.Rate, Burst: qOld.Burst}
		ctx := context.Background()
		acq := func(r lease.Request) lease.Grant {
			t.Helper()
			res, err := b.AcquireMany(ctx, []lease.Request{r}, nil)
			if err != nil || res[0].Err != nil {
				t.Fatal(err, res)
			}
			return res[0].Grant
		}
		acq(lease.Request{Tenant: "t", Limits: old, Want: 100, Demand: 2000})
		clock = clock.Add(10 * time.Millisecond)
		g := acq(lease.Request{Tenant: "t", Limits: old, Want: 1, Demand: 2000, Reserve: 4 * time.Second})
		if g.Reserved < 500 {
			t.Fatalf("reserved %d (%+v), want the second ahead's worth", g.Reserved, g)
		}
		p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: 4 * time.Second}, 1)
		s := scarceState(p, clock, 2000)
		p.Granted(s, qOld, clock, 1, g, g.Immediate())
		p.Reserved(s, qOld, clock, clock, g)

		// The operator lowers the rate to 10 a second; a reply brings it.
		clock = clock.Add(10 * time.Millisecond)
		if _, err := b.SetOverride(ctx, "t", old, lease.Override{Rate: 10, Burst: 10}); err != nil {
			t.Fatal(err)
		}
		changed := clock
		if merged {
			// The reply brings a reservation made under the new rate
			// too: merged with the old one's tokens still to come.
			p.Reserved(s, qNew, clock, clock, lease.Grant{Granted: 5, Reserved: 5, Pace: 5, Instances: 1, Share: 5, ServerTime: clock})
		}
		var (
			dripped int64
			called  time.Duration = -1 // the first call after the change
		)
		for at := clock; at.Before(changed.Add(5 * time.Second)); at = at.Add(100 * time.Millisecond) {
			a := p.Plan(s, qNew, at, Input{Level: 0, Need: 1, Missed: 100})
			dripped += a.Drip
			p.Expired(s, a.Expire, 0)
			s.ledger.Sync(0)
			if a.Calls() {
				if called < 0 {
					called = at.Sub(changed)
				}
				p.Skipped(s, qNew, at, 0, a.cut)
			}
		}
		t.Logf("merged %v: %d reserved tokens came due in the 5 s after the rate went to 10 a second; first call %v after it", merged, dripped, called)
		// Nothing comes of the dropped tokens: the tenant calls for the
		// new rate's tokens at its next plan, not at the renewal the
		// reservation had set (seconds on).
		// (Merged, the hold is the new reservation's spacing.)
		if !merged && (called < 0 || called > 200*time.Millisecond) {
			t.Errorf("merged %v: the first lease call came %v after the change, want within two intervals", merged, called)
		}
		if float64(dripped) > allowed(5*time.Second) {
			t.Errorf("merged %v: %d reserved tokens came due in the 5 s after the rate went to 10 a second; the bound after a change allows %.0f",
				merged, dripped, allowed(5*time.Second))
		}
	}
}

// TestMergedReservationStopsWhenTheRateFallsBelowEither: a reservation
// merged from one made at a rate of 100 and one made after the rate rose
// to 200 is dropped once the rate falls to 150: the second's tokens come
// at a pace the lower rate does not allow. (Keeping the lower of the two
// rates, the merge kept them coming.)
func TestMergedReservationStopsWhenTheRateFallsBelowEither(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: 4 * time.Second}, 1)
	q := func(rate float64) quota.Quota {
		return quota.Quota{Rate: rate, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}
	}
	st := scarceState(p, now, 400)
	p.Reserved(st, q(100), now, now, lease.Grant{Granted: 100, Reserved: 100, Pace: 50, Instances: 2, Share: 50, ServerTime: now})
	now = now.Add(100 * time.Millisecond)
	p.Reserved(st, q(200), now, now, lease.Grant{Granted: 200, Reserved: 200, Pace: 100, Instances: 2, Share: 100, ServerTime: now})
	if st.Reserved() < 250 {
		t.Fatalf("%d reserved tokens to come after the merge, want 295", st.Reserved())
	}
	a := p.Plan(st, q(150), now.Add(100*time.Millisecond), Input{})
	if left := st.Reserved(); left != 0 {
		t.Errorf("the rate fell from 200 to 150: %d reserved tokens still to come (%d came due), want none", left, a.Drip)
	}
}

// TestNoRoomRetryWithinADay: a reservation that found no room waits for
// the bucket's refill to catch up with what is committed (the reply's
// wait), but no more than a day, as every other hold (holdBack): a call
// then finds out again. A bucket's time runs that far ahead of Redis's
// clock only when the clock went back (a failover to a replica whose
// clock is behind, by 30 days here), and the tenant was held until its
// stamps' range ran out, 24.8 days, whatever the clock did meanwhile.
func TestNoRoomRetryWithinADay(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: 4 * time.Second}, 1)
	st := scarceState(p, now, 400)
	lim := quota.Quota{Rate: 100, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}
	p.Reserved(st, lim, now, now, lease.Grant{Share: 50, Instances: 2, Wait: 30 * 24 * time.Hour, ServerTime: now})
	if held := st.NotBefore().Sub(now); held > 24*time.Hour+p.Config().Reserve {
		t.Errorf("held back %v after a reply whose bucket ran 30 days ahead of the clock, want a day at most (and a jitter)", held)
	}
}

// TestNoRoomHoldEndsWithTheStarvation: a reply that found the bucket's
// refill committed to other instances' reservations holds the tenant's
// calls until its turn among them. Once its demand has fallen below
// what it was granted, and the bucket has had its fill time to refill,
// a request that waits calls through that hold: nothing else would take
// its place (TestSimulation, seed 1066877: a WaitN on a bucket of 9
// tokens waited out a 1.4 s hold). A tenant still starved keeps it.
func TestNoRoomHoldEndsWithTheStarvation(t *testing.T) {
	lim := quota.Quota{Rate: 100, Burst: 10, MinLease: 1, MaxLease: 5, LeaseTTL: 150 * time.Millisecond}
	cfg := Config{Interval: 50 * time.Millisecond, Reserve: 2 * time.Second}
	// Three instances: this one's cold request asks for a lease, gets 2
	// tokens of it, and no room for a reservation (Wait > 0).
	noRoom := lease.Grant{Granted: 2, Tokens: 0.1, Share: lim.Rate / 3, Instances: 3, Wait: lease.ReserveAhead, ServerTime: pt0}

	p := NewPlanner(cfg, testSeed)
	var st State
	p.Init(&st, "quiet", pt0)
	a := p.Plan(&st, lim, pt0, Input{Urgent: true, Need: 1, Missed: 1, Fleet: 3})
	if a.Acquire <= noRoom.Granted {
		t.Fatalf("set-up: the first call asks for %d, want more than the %d it gets", a.Acquire, noRoom.Granted)
	}
	p.GrantedFor(&st, lim, pt0, pt0, a.Acquire, a.ForNeed, noRoom, noRoom.Granted)
	p.Reserved(&st, lim, pt0, pt0, noRoom)
	fill := time.Duration(float64(lim.Burst) / lim.Rate * 1e9)
	end := st.NotBefore()
	if end.Sub(pt0) <= fill+cfg.Interval {
		t.Fatalf("set-up: held back %v, want more than the fill time %v", end.Sub(pt0), fill)
	}
	// One request, just before the hold ends: the bucket refilled long ago.
	at := end.Add(-time.Millisecond)
	if a := p.Plan(&st, lim, at, Input{Urgent: true, Need: 1, Missed: 1}); !a.Calls() {
		t.Errorf("a request at +%v, the tenant's demand %.1f/s, granted %.1f/s: no call until +%v, want one now",
			at.Sub(pt0), st.Demand(), st.grantRate, end.Sub(pt0))
	}

	// Starved (demand 400/s over 4 instances): the hold stands.
	p = NewPlanner(cfg, testSeed)
	starved := scarceState(p, pt0, 400)
	p.Reserved(starved, lim, pt0, pt0, lease.Grant{Share: lim.Rate / 4, Instances: 4, Wait: lease.ReserveAhead, ServerTime: pt0})
	end = starved.NotBefore()
	if end.Sub(pt0) <= fill+cfg.Interval {
		t.Fatalf("set-up: the starved tenant held back %v, want more than the fill time %v", end.Sub(pt0), fill)
	}
	if a := p.Plan(starved, lim, end.Add(-time.Millisecond), Input{Urgent: true, Need: 1, Missed: 40}); a.Calls() {
		t.Errorf("a starved tenant called through its hold for room: %+v", a)
	}
}
