package syncer

import (
	"context"
	"math"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/sony/gobreaker/v2"
	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// shareQuota is the quota of the rate share tests: 100/s, a burst of 100,
// a lease lifetime of a second.
var shareQuota = quota.Quota{Rate: 100, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}

// scarceState returns a State for tenant "t" as of now that has leased
// once, is scarce, and has seen a sustained demand of about rate tokens a
// second over the last few seconds.
func scarceState(p *Planner, now time.Time, rate float64) *State {
	return scarceStateOf(p, "t", now, rate)
}

// scarceStateOf is scarceState for the tenant named name.
func scarceStateOf(p *Planner, name string, now time.Time, rate float64) *State {
	st := &State{}
	p.Init(st, name, now.Add(-5*time.Second))
	for i := range 50 {
		at := now.Add(-5*time.Second + time.Duration(i)*100*time.Millisecond)
		p.observe(st, at.UnixNano(), int64(rate/10))
	}
	st.flags |= flagGranted | flagScarce
	st.instances = 4
	return st
}

// TestShareAskedWhenScarce: with shares on, a scarce tenant's call asks
// for a share on the terms of the tenant; with shares off, or before the
// tenant's first grant, it asks for none.
func TestShareAskedWhenScarce(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second, ShareHeadroom: 0.05}, 1)
	st := scarceState(p, now, 300)
	a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30})
	if !a.Calls() || a.Share != lease.ShareAsk {
		t.Fatalf("scarce tenant's call: %+v, want an ask for a share", a)
	}
	terms := a.ShareTerms
	if err := terms.Validate(); err != nil {
		t.Fatal(err)
	}
	if terms.Period != 10*time.Second || terms.Hold != shareQuota.LeaseTTL || terms.Headroom != 0.05 {
		t.Errorf("terms %+v, want a period of 10s, the lease lifetime as the hold, headroom 0.05", terms)
	}
	if again := p.shareTerms(st, shareQuota, now.UnixNano(), 0); again != terms {
		t.Errorf("the terms move between calls: %+v, then %+v", terms, again)
	}

	off := NewPlanner(Config{Interval: 100 * time.Millisecond}, 1)
	if a := off.Plan(scarceState(off, now, 300), shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30}); a.Share != lease.ShareKeep {
		t.Errorf("shares off: %+v, want no share operation", a)
	}
	cold := &State{}
	p.Init(cold, "t", now)
	if a := p.Plan(cold, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30}); a.Share != lease.ShareKeep {
		t.Errorf("first call: %+v, want no share operation (it registers the instance)", a)
	}
}

// grantShare returns a Grant of share s (tokens/s) from Redis time from
// until until, made by a call Redis ran at from.
func grantShare(rate float64, from, until time.Time) lease.Grant {
	return lease.Grant{ServerTime: from, Share: rate, Instances: 4,
		RateShare: lease.RateShare{Rate: rate, From: from, Until: until}}
}

// sharedState returns the State of tenant name, scarce at about 300
// tokens a second until now, holding the share of 25 a second until 8 s
// on that its call at now asked for.
func sharedState(p *Planner, name string, now time.Time) *State {
	st := scarceStateOf(p, name, now, 300)
	a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30})
	g := grantShare(25, now, now.Add(8*time.Second))
	p.Granted(st, shareQuota, now, a.Acquire, g, 0)
	p.Shared(st, shareQuota, a.Share, now, now, g)
	return st
}

// firstCallIdle plans st every 100 ms from now on, with nothing spent
// nor asked for, for up to 8 s, and returns the first action that calls
// Redis and how long after now it came (false: none came).
func firstCallIdle(p *Planner, st *State, now time.Time) (Action, time.Duration, bool) {
	for at := now; at.Before(now.Add(8 * time.Second)); at = at.Add(100 * time.Millisecond) {
		a := p.Plan(st, shareQuota, at, Input{Level: st.Held()})
		p.Expired(st, a.Expire, st.Held()-a.Expire)
		if a.Calls() {
			return a, at.Sub(now), true
		}
	}
	return Action{}, 0, false
}

// TestShareHeldMakesNoCallsUntilRenewal: while a share is held, its tokens
// come due at its pace, the planner makes no call for tokens however
// urgent the requests, and it renews the share before its end, naming it.
func TestShareHeldMakesNoCallsUntilRenewal(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	st := scarceState(p, now, 300)
	a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30})
	if a.Share != lease.ShareAsk {
		t.Fatalf("%+v, want an ask", a)
	}
	// Redis runs the call 2 ms later, on a clock 1 s behind this one; the
	// reply arrives 4 ms after the call was sent.
	from := now.Add(-time.Second + 2*time.Millisecond)
	until := from.Add(6 * time.Second)
	arrived := now.Add(4 * time.Millisecond)
	g := grantShare(25, from, until)
	p.Granted(st, shareQuota, now, a.Acquire, g, 0)
	p.Shared(st, shareQuota, a.Share, now, arrived, g)
	rs, ok := st.HeldShare()
	if !ok || !rs.Equal(g.RateShare) {
		t.Fatalf("held %v (%v), want %v", rs, ok, g.RateShare)
	}
	var dripped int64
	var renewal Action
	at := arrived
	for ; at.Before(arrived.Add(7 * time.Second)); at = at.Add(50 * time.Millisecond) {
		a := p.Plan(st, shareQuota, at, Input{Urgent: true, Need: 1, Missed: 5})
		dripped += a.Drip
		p.Expired(st, a.Expire, 0)
		st.ledger.Sync(0) // requests spent everything
		// Never more than the share accrued in Redis's clock since its
		// grant (local time at is Redis time at - 1s).
		if accrued := 25 * at.Add(-time.Second).Sub(from).Seconds(); float64(dripped) > accrued+1e-9 {
			t.Fatalf("at +%v: %d tokens came due, the share accrued %.2f", at.Sub(now), dripped, accrued)
		}
		if a.Calls() {
			renewal = a
			break
		}
	}
	if renewal.Share != lease.ShareAsk || !renewal.ShareFrom.Equal(from) {
		t.Fatalf("first call while the share was held, at +%v: %+v, want its renewal naming From %v", at.Sub(now), renewal, from)
	}
	// The renewal comes before the share ends here (6 s after the reply
	// less the round trip), within two intervals and a twentieth of the
	// period.
	end := now.Add(6*time.Second - 2*time.Millisecond)
	if early := end.Sub(at); early < 2*p.cfg.Interval || early > 2*p.cfg.Interval+p.cfg.SharePeriod/20+50*time.Millisecond {
		t.Errorf("renewal %v before the share's end, want two intervals and up to a twentieth of the period", early)
	}
	if min := int64(25*at.Sub(arrived).Seconds()*(1-shareDrift)) - 2; dripped < min {
		t.Errorf("%d tokens came due by the renewal, want about %d (the share's rate over the time held)", dripped, min)
	}
	if _, ok := st.HeldShare(); ok {
		t.Errorf("the share still accrues once the call that replaces it is planned")
	}
}

// TestShareEndsWhenDemandStops: once the demand is gone, the planner ends
// the share at once, naming it, rather than let it accrue until its
// renewal.
func TestShareEndsWhenDemandStops(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	st := sharedState(p, "t", now)
	end, after, _ := firstCallIdle(p, st, now)
	// The estimate of 300 a second falls under a token a lease lifetime
	// in about 8 half-lives (4.2 s), then the end waits a jitter of up to
	// a quarter period (2.5 s).
	if after > 7*time.Second {
		t.Errorf("the share ended %v after the demand stopped, want within the demand's decay and a quarter period", after)
	}
	if end.Share != lease.ShareEnd || !end.ShareFrom.Equal(now) {
		t.Fatalf("%+v, want an end naming the share's From", end)
	}
	// Known until a reply says Redis ended it (stopShare), it accrues
	// nothing more.
	if st.resv != nil && st.resv.pace != 0 {
		t.Errorf("the share still accrues after its end was planned")
	}
}

// TestShareEndsSpreadWhenAFleetsDemandStops: 200 tenants' shares, granted
// together, whose demand stops at the same moment, as when the load of a
// whole fleet stops: their ends are spread over the quarter period after
// the demand is found gone (a jitter each), not made in one round trip.
func TestShareEndsSpreadWhenAFleetsDemandStops(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	const period = 10 * time.Second
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: period}, 1)
	var first, last time.Duration
	for i := range 200 {
		a, ended, ok := firstCallIdle(p, sharedState(p, "t"+strconv.Itoa(i), now), now)
		if !ok {
			t.Fatalf("tenant %d: no end in 8 s", i)
		}
		if a.Share != lease.ShareEnd {
			t.Fatalf("tenant %d: %+v at %v, want an end", i, a, ended)
		}
		if i == 0 || ended < first {
			first = ended
		}
		last = max(last, ended)
	}
	// Without the jitter every end came at the same plan, when the
	// demand's estimate fell under a token a lease lifetime (4.2 s here):
	// with it, over the quarter period after that.
	if last-first < period/8 || last-first > period/4+100*time.Millisecond {
		t.Errorf("the 200 ends came %v to %v after the demand stopped, want them spread over %v to %v", first, last, period/8, period/4)
	}
	t.Logf("ends from %v to %v after the demand stopped", first, last)
}

// TestShareTokensExpireWithoutAReturn: what a share accrued and no request
// spent expires a lease lifetime after it came due, as leased tokens do,
// but goes back to Redis in no release (Planner.ReturnsExpired): it is
// forfeited. Leased tokens that expire still go back, with shares on or
// off.
func TestShareTokensExpireWithoutAReturn(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	st := sharedState(p, "t", now)
	var expired int64
	for at := now; at.Before(now.Add(3 * time.Second)); at = at.Add(100 * time.Millisecond) {
		// Requests keep asking (the demand stays) but spend nothing.
		a := p.Plan(st, shareQuota, at, Input{Level: st.Held(), Need: 1})
		p.Expired(st, a.Expire, st.Held()-a.Expire)
		if a.Expire > 0 {
			expired += a.Expire
			if p.ReturnsExpired(st, a, false) {
				t.Fatalf("at +%v: %d expired share tokens (grant %d) would be returned", at.Sub(now), a.Expire, a.ExpiredGrant)
			}
		}
	}
	if expired == 0 {
		t.Fatal("no share token expired in 3 s")
	}
	leased := Action{Expire: 5, ExpiredGrant: 7}
	if !p.ReturnsExpired(st, leased, false) {
		t.Error("expired leased tokens (a named grant) not returned with shares on")
	}
	off := NewPlanner(Config{Interval: 100 * time.Millisecond}, 1)
	if !off.ReturnsExpired(st, Action{Expire: 5}, false) || !off.ReturnsExpired(st, leased, false) {
		t.Error("expired tokens not returned with shares off")
	}
}

// TestShareRefusedIsNotAskedAgainSoon: an ask Redis refused (no share in
// the reply) is not made again for a quarter of a period; calls for
// tokens go on.
func TestShareRefusedIsNotAskedAgainSoon(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 8 * time.Second}, 1)
	st := scarceState(p, now, 300)
	a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30})
	g := lease.Grant{ServerTime: now, Granted: 1, Share: 25, Instances: 4}
	p.Granted(st, shareQuota, now, a.Acquire, g, 0)
	p.Shared(st, shareQuota, a.Share, now, now, g)
	asked := false
	for at := now; at.Before(now.Add(3 * time.Second)); at = at.Add(20 * time.Millisecond) {
		a := p.Plan(st, shareQuota, at, Input{Urgent: true, Need: 1, Missed: 30})
		if a.Share == lease.ShareAsk {
			if at.Before(now.Add(2 * time.Second)) {
				t.Fatalf("asked again %v after a refusal, want a quarter of the period (2s)", at.Sub(now))
			}
			asked = true
			break
		}
		if a.Calls() {
			g := lease.Grant{ServerTime: at, Granted: 1, Share: 25, Instances: 4}
			p.Granted(st, shareQuota, at, a.Acquire, g, 0)
			p.Shared(st, shareQuota, a.Share, at, at, g)
		}
	}
	if !asked {
		t.Errorf("never asked again within 3s of a refusal")
	}
}

// TestShareAccrualNeverEarly: whatever the offset between the clocks, the
// delays of the call and its reply and the share's length, the tokens of
// a share that come due here by any local time never exceed what the
// share accrued in Redis's clock by then, and replies that report the
// same share again change nothing.
func TestShareAccrualNeverEarly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
		base := time.Unix(1_000_000, 0)
		st := scarceState(p, base, 300)
		offset := time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "offset")) // local - Redis
		out := time.Duration(rapid.Int64Range(0, int64(300*time.Millisecond)).Draw(t, "out"))
		back := time.Duration(rapid.Int64Range(0, int64(300*time.Millisecond)).Draw(t, "back"))
		length := time.Duration(rapid.Int64Range(int64(time.Millisecond), int64(15*time.Second)).Draw(t, "length"))
		rate := rapid.Float64Range(0.1, 5000).Draw(t, "rate")
		sent := base
		ran := sent.Add(out).Add(-offset) // Redis's clock
		arrived := sent.Add(out + back)
		g := grantShare(rate, ran, ran.Add(length))
		p.Shared(st, shareQuota, lease.ShareAsk, sent, arrived, g)
		var dripped int64
		for at := sent; at.Before(arrived.Add(length + time.Second)); {
			a := p.Plan(st, shareQuota, at, Input{Level: 0})
			dripped += a.Drip
			st.ledger.Sync(0)
			redis := at.Add(-offset)
			if redis.After(g.RateShare.Until) {
				redis = g.RateShare.Until
			}
			if accrued := rate * max(redis.Sub(ran), 0).Seconds(); float64(dripped) > accrued+1e-9 {
				t.Fatalf("at local +%v: %d tokens came due, the share accrued %.3f in Redis's clock", at.Sub(sent), dripped, accrued)
			}
			if a.Share != lease.ShareKeep {
				return // the renewal: the share stops accruing
			}
			if a.Calls() {
				p.Skipped(st, shareQuota, at, 0, a.cut) // a call for tokens: not made
			}
			if rapid.Bool().Draw(t, "same again") {
				// A later reply reports the same share, from a call Redis
				// ran at its time for at: it goes on, and once it has
				// come due in full, it does not come again.
				again := grantShare(rate, ran, ran.Add(length))
				again.ServerTime = at.Add(-offset)
				p.Shared(st, shareQuota, lease.ShareKeep, at, at, again)
			}
			at = at.Add(time.Duration(rapid.Int64Range(1, int64(time.Second)).Draw(t, "step")))
		}
		// Never renewed (too short a share): every token came, less the
		// round trip and the drift: LocalWindow ends the share the drift
		// of its whole length early (from the send), and the pace is the
		// rate less the drift. (The drift was taken off the length less
		// the round trip, which a share of 3 ms after a round trip of
		// 300 ms at 5,000 a second missed by two tokens: rapid, 20,000
		// checks.)
		window := time.Duration(float64(length)*(1-shareDrift)) - out - back - time.Microsecond
		if want := math.Floor(rate * (1 - shareDrift) * window.Seconds()); float64(dripped) < want-1 {
			t.Fatalf("%d tokens came due of a share of %.3f/s over %v, want at least %.0f", dripped, rate, length, want)
		}
	})
}

// TestExpiredTokensOfAFullBucketAreForfeited: expired leased tokens go
// back to Redis unless the bucket has refilled to its burst since the last
// lease call saw it and the tenant is neither scarce nor short (its
// instances ask for less than its rate): such a return would be credited
// nothing, so it is forfeited without a call (Planner.ReturnsExpired).
func TestExpiredTokensOfAFullBucketAreForfeited(t *testing.T) {
	p := NewPlanner(Config{}, 1)
	expired := Action{Expire: 1, ExpiredGrant: 7}
	for _, c := range []struct {
		name     string
		flags    uint8
		refilled bool
		returns  bool
	}{
		{"within quota, bucket full again", 0, true, false},
		{"within quota, bucket not full", 0, false, true},
		{"scarce, bucket full as last seen", flagScarce, true, true},
		{"short of its demand, bucket full as last seen", flagShort, true, true},
		{"scarce, bucket not full", flagScarce, false, true},
	} {
		var st State
		st.flags = c.flags
		if got := p.ReturnsExpired(&st, expired, c.refilled); got != c.returns {
			t.Errorf("%s: ReturnsExpired = %v, want %v", c.name, got, c.returns)
		}
	}
}

// TestQuietWithSharesOn: turning rate shares on does not keep a tenant
// that holds no share from being quiet (settle): a plan that asked for
// nothing lets the rounds leave it alone alike, shares on or off, since
// an ask only goes with a call made for tokens. (They kept every tenant
// planned every tick, for the syncer's CPU only.)
func TestQuietWithSharesOn(t *testing.T) {
	quietTicks := func(cfg Config) int {
		r := warm(t, cfg, testLimits(), 1000) // full grants: never scarce, no share
		if _, held := r.st.HeldShare(); held {
			t.Fatal("a share held by a tenant that never ran short")
		}
		n := 0
		for range 40 { // a second of ticks with the lease unspent
			r.now = r.now.Add(tick)
			if r.p.Quiet(&r.st, r.now.UnixNano(), r.tokens.Load(), false) {
				n++
				continue // as a round does: no plan
			}
			r.plan()
		}
		return n
	}
	off := quietTicks(Config{Interval: 100 * time.Millisecond})
	on := quietTicks(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second})
	if off == 0 {
		t.Fatal("no quiet tick in a second of an unspent lease without shares: the test shows nothing")
	}
	if on != off {
		t.Errorf("quiet ticks in a second of an unspent lease: %d with shares on, %d off", on, off)
	}
}

// TestShareEndsWhenTheRateFalls: a rate share granted at a rate of 1,000
// a second stops accruing once the reply of the quota re-read brings an
// override of 10 a second, and the next plan ends it in Redis. Redis
// keeps the shares in force through a quota change, and the instance
// went on handing the old share out until its renewal: 4,669 tokens in
// the 5 s after the change, where the bound after a change allows
// Burst + Rate*T + 2*MaxLease of the old quota (260).
func TestShareEndsWhenTheRateFalls(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	st := memstore.New(memstore.WithClock(func() time.Time { return clock }))
	b, err := st.Instance("B", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := lease.Limits{Rate: 1000, Burst: 100}
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
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: time.Second, Headroom: 0.05}
	sent := clock
	g := acq(lease.Request{Tenant: "t", Limits: old, Want: 1, Demand: 2000, Share: lease.ShareAsk, ShareTerms: terms})
	if !g.RateShare.Held() {
		t.Fatal("no share granted")
	}
	qOld := quota.Quota{Rate: 1000, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second, ShareHeadroom: 0.05}, 1)
	s := scarceState(p, sent, 2000)
	p.Shared(s, qOld, lease.ShareAsk, sent, clock, g)

	// The operator lowers the rate to 10 a second; the instance's quota
	// re-read brings the override.
	clock = clock.Add(10 * time.Millisecond)
	if _, err := b.SetOverride(ctx, "t", old, lease.Override{Rate: 10, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	qNew := quota.Quota{Rate: 10, Burst: 10, LeaseTTL: time.Second, MaxLease: 10}
	changed := clock
	clock = clock.Add(10 * time.Millisecond)
	r := acq(lease.Request{Tenant: "t", Limits: old, Want: 0, Demand: 2000})
	p.Shared(s, qNew, lease.ShareKeep, clock, clock, r)

	var dripped int64
	ended := false
	for at := clock; at.Before(changed.Add(5 * time.Second)); at = at.Add(100 * time.Millisecond) {
		a := p.Plan(s, qNew, at, Input{Level: 0, Need: 1, Missed: 100})
		dripped += a.Drip
		s.ledger.Sync(0)
		ended = ended || a.Share == lease.ShareEnd
		if a.Calls() {
			p.Skipped(s, qNew, at, 0, a.cut)
		}
	}
	if allowed := float64(qNew.Burst) + qNew.Rate*5 + 2*float64(qOld.MaxLease); float64(dripped) > allowed {
		t.Errorf("%d share tokens came due in the 5 s after the rate went to 10 a second; the bound after a change allows %.0f", dripped, allowed)
	}
	if !ended {
		t.Errorf("no plan ended the share granted under the old rate")
	}
}

// TestSkippedShareEndIsMadeAgain: a share's end that the call budget
// refused (Skipped) is planned again, the share known until then and its
// accrual stopped. The plan forgot the share before the call was admitted,
// so no later plan ended it and Redis kept it in force, unspent, until its
// epoch ended.
func TestSkippedShareEndIsMadeAgain(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	st := sharedState(p, "t", now)
	end, after, ok := firstCallIdle(p, st, now)
	if !ok || end.Share != lease.ShareEnd {
		t.Fatalf("the first call of an idle share-holder is %+v, want its end", end)
	}
	at := now.Add(after)
	p.Skipped(st, shareQuota, at, 0, end.cut) // the budget refused the call
	if _, held := st.HeldShare(); !held {
		t.Fatalf("the share is forgotten once its end was refused")
	}
	ends, dripped := 0, int64(0)
	for ; at.Before(now.Add(30*time.Second)) && ends == 0; at = at.Add(100 * time.Millisecond) {
		a := p.Plan(st, shareQuota, at, Input{Level: st.Held()})
		p.Expired(st, a.Expire, st.Held()-a.Expire)
		dripped += a.Drip
		if a.Share == lease.ShareEnd {
			ends++
			if a.ShareFrom != end.ShareFrom {
				t.Fatalf("the end made again names %v, want %v", a.ShareFrom, end.ShareFrom)
			}
		} else if a.Calls() {
			p.Skipped(st, shareQuota, at, 0, a.cut)
		}
	}
	if ends == 0 {
		t.Fatalf("the refused end was not planned again in 30 s")
	}
	if dripped != 0 {
		t.Errorf("%d tokens of the share came due after its end was planned", dripped)
	}
}

// TestShareOnAFrozenBucketComesDueOnTime: instance A's reservation froze
// the bucket 980 ms ahead of Redis's clock, and instance B is granted a
// share there, from the bucket's time. No token of it comes due before
// its From, in the clock B shares with the store here: the accrual began
// at the reply, and the 980 ms lead's tokens (48 of a share of 50 a
// second) came due before the store made them, past the bound. (A fleet
// moving from reservations to shares has both on one tenant.)
func TestShareOnAFrozenBucketComesDueOnTime(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	st := memstore.New(memstore.WithClock(func() time.Time { return clock }))
	a, err := st.Instance("A", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := st.Instance("B", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lim := lease.Limits{Rate: 100, Burst: 10}
	ctx := context.Background()
	acq := func(in lease.Store, r lease.Request) lease.Grant {
		t.Helper()
		res, err := in.AcquireMany(ctx, []lease.Request{r}, nil)
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		return res[0].Grant
	}
	acq(a, lease.Request{Tenant: "t", Limits: lim, Want: 10, Demand: 200})
	acq(b, lease.Request{Tenant: "t", Limits: lim, Want: 0, Demand: 200})
	clock = clock.Add(10 * time.Millisecond)
	if g := acq(a, lease.Request{Tenant: "t", Limits: lim, Want: 50, Demand: 200, Reserve: 2 * time.Second}); g.Reserved == 0 {
		t.Fatalf("A reserved nothing: %+v", g)
	}
	clock = clock.Add(10 * time.Millisecond)
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: time.Second}
	g := acq(b, lease.Request{Tenant: "t", Limits: lim, Want: 1, Demand: 200, Share: lease.ShareAsk, ShareTerms: terms})
	if !g.RateShare.Held() || g.Wait <= 0 || g.RateShare.From.Before(clock.Add(g.Wait)) {
		t.Fatalf("B's grant on the frozen bucket: %+v, want a share from the bucket's time, ahead of the clock", g)
	}
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	s := scarceState(p, clock, 300)
	p.Shared(s, shareQuota, lease.ShareAsk, clock, clock, g) // the store's clock is B's, the call took no time
	var early int64
	for at := clock; at.Before(g.RateShare.From); at = at.Add(10 * time.Millisecond) {
		a := p.Plan(s, shareQuota, at, Input{Level: 0})
		early += a.Drip
		s.ledger.Sync(0)
	}
	if early > 0 {
		t.Errorf("%d tokens of the share came due before its From, %v after the reply", early, g.RateShare.From.Sub(clock))
	}
	if _, held := s.HeldShare(); !held {
		t.Errorf("the share is not held")
	}
}

// TestStoppedShareEndsWhenDemandReturns: a share whose end was refused
// by the call budget (or failed), and whose demand came back before the
// end was made again, is ended, and the tenant then calls for tokens.
// Stopped (pace 0) and known, it asked for no end (the demand was back)
// and no renewal (a pace of 0 never reaches renewAt): no call and no
// token, for good.
func TestStoppedShareEndsWhenDemandReturns(t *testing.T) {
	for _, how := range []string{"skipped", "failed"} {
		t.Run(how, func(t *testing.T) {
			now := time.Unix(1_000_000, 0)
			p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
			st := sharedState(p, "t", now)
			end, after, ok := firstCallIdle(p, st, now)
			if !ok || end.Share != lease.ShareEnd {
				t.Fatalf("the first call of an idle share-holder is %+v, want its end", end)
			}
			at := now.Add(after)
			if how == "skipped" {
				p.Skipped(st, shareQuota, at, 0, end.cut)
			} else {
				p.Failed(st, at)
			}
			for i := 0; ; i++ {
				if i == 600 {
					t.Fatalf("no call in 60 s after the end was %s and the demand came back", how)
				}
				at = at.Add(100 * time.Millisecond)
				a := p.Plan(st, shareQuota, at, Input{Level: st.Held(), Urgent: true, Need: 1, Missed: 30})
				p.Expired(st, a.Expire, st.Held()-a.Expire)
				if a.Calls() {
					if a.Share != lease.ShareEnd {
						t.Errorf("the first call after the demand came back: %+v, want the share's end", a)
					}
					break
				}
			}
		})
	}
}

// TestSkippedRenewalKeepsTheShare: a share's renewal that the call budget
// refused (Skipped) was never sent, so Redis holds the share until its end
// and withholds its rate from the bucket: it goes on accruing here, every
// token of it and none past its end, and the renewal is planned again.
// The plan cut the share before the call was admitted, and the refusal
// left it cut: its last tokens (two intervals and a jitter of them) never
// came due, though Redis counted them as this instance's.
func TestSkippedRenewalKeepsTheShare(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	st := sharedState(p, "t", now)
	all := st.Reserved() // what the share accrues here over its window
	end := time.Unix(0, st.at(st.resv.end()))
	var dripped, late int64
	refused := 0
	for at := now; at.Before(end.Add(2 * time.Second)); at = at.Add(50 * time.Millisecond) {
		// The demand stays at 300 a second: the share is renewed, not ended.
		a := p.Plan(st, shareQuota, at, Input{Urgent: true, Need: 1, Missed: 15})
		p.Expired(st, a.Expire, 0)
		st.ledger.Sync(0) // requests spent everything
		dripped += a.Drip
		if at.Add(-50 * time.Millisecond).After(end) { // the plan before was past the end already
			late += a.Drip
		}
		if !a.Calls() {
			continue
		}
		p.Skipped(st, shareQuota, at, 0, a.cut) // the budget refused the call
		if !at.Before(end) {
			continue // the share has ended: a call asks for a new one
		}
		if a.Share != lease.ShareAsk || !a.ShareFrom.Equal(now) {
			t.Fatalf("call at +%v: %+v, want the renewal of the share from %v", at.Sub(now), a, now)
		}
		refused++
		if _, held := st.HeldShare(); !held {
			t.Fatalf("the share is forgotten once its renewal was refused, %v before its end", end.Sub(at))
		}
	}
	if refused < 2 {
		t.Errorf("%d renewals planned before the share's end, want the refused one planned again", refused)
	}
	if dripped != all {
		t.Errorf("%d tokens of the share came due, want all of its %d: Redis still held it", dripped, all)
	}
	if late != 0 {
		t.Errorf("%d tokens came due after the share's end", late)
	}
	if _, held := st.HeldShare(); held {
		t.Errorf("a share still held %v after its end, none renewed", 2*time.Second)
	}
}

// askLog is a lease.Store that records the share operation of every
// acquire request that reaches it.
type askLog struct {
	lease.Store
	mu   sync.Mutex
	reqs []lease.Request
}

func (l *askLog) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	l.mu.Lock()
	l.reqs = append(l.reqs, reqs...)
	l.mu.Unlock()
	return l.Store.AcquireMany(ctx, reqs, results)
}

// shareRig is a Syncer on the in-process store, its clock driven by
// tick, tracking tenant "t" (shareQuota) whose requests of 300 a second
// spend everything each tick of 25 ms; it returns once the tenant holds
// a rate share.
type shareRig struct {
	s     *Syncer
	tn    *Tenant
	store *askLog
	clock time.Time
}

func newShareRig(t *testing.T) *shareRig {
	r := &shareRig{clock: time.Unix(1_800_000_000, 0)}
	now := func() time.Time { return r.clock }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.store = &askLog{Store: view}
	r.s = New(r.store, Options{Now: now, Planner: NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)})
	t.Cleanup(func() { r.s.Close() })
	if r.tn, err = r.s.Track("t", shareQuota); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if i == 400 {
			t.Fatal("no share held after 10 s of a demand three times the rate")
		}
		r.tick()
		if _, ok := r.held(); ok {
			return r
		}
	}
}

// tick moves the clock on 25 ms, spends the tenant's tokens and records
// the misses of 300 requests a second, and runs a round.
func (r *shareRig) tick() {
	r.clock = r.clock.Add(25 * time.Millisecond)
	for {
		if ok, _ := r.tn.SpendOne(); !ok {
			break
		}
	}
	r.tn.NoteMiss(8)
	r.s.Round(context.Background(), func(yield func(*Tenant) bool) { yield(r.tn) })
}

// held returns the share the tenant holds here.
func (r *shareRig) held() (lease.RateShare, bool) {
	r.tn.mu.Lock()
	defer r.tn.mu.Unlock()
	return r.tn.st().HeldShare()
}

// TestRefusedRenewalKeepsTheShareInRounds is TestSkippedRenewalKeepsTheShare
// through a Syncer's rounds on the in-process store: with the call budget
// full, the rounds refuse the share's renewal, and the share, which the
// store still holds, goes on coming due here; once the budget has room, the
// renewal reaches the store, naming the share, and the store replaces it.
func TestRefusedRenewalKeepsTheShareInRounds(t *testing.T) {
	r := newShareRig(t)
	s := r.s
	first, _ := r.held()
	setWindow(s, 0) // Redis busy: every call is refused
	heldBack := s.heldBack.Load()
	var dripped int64 // at the first refusal
	for i := 0; s.heldBack.Load() < heldBack+5; i++ {
		if i == 600 {
			t.Fatal("no renewal refused five times within 15 s of the share's grant")
		}
		r.tick()
		if _, ok := r.held(); !ok {
			t.Fatalf("the share (until %v) is gone %v before its end, its renewal refused", first.Until, first.Until.Sub(r.clock))
		}
		if s.heldBack.Load() == heldBack+1 && dripped == 0 {
			dripped = s.dripped.Load()
		}
	}
	if s.dripped.Load() == dripped {
		t.Error("no token of the share came due while its renewal was refused")
	}
	setWindow(s, 100)
	r.store.mu.Lock()
	r.store.reqs = nil
	r.store.mu.Unlock()
	r.tick()
	r.store.mu.Lock()
	reqs := r.store.reqs
	r.store.mu.Unlock()
	if len(reqs) != 1 || reqs[0].Share != lease.ShareAsk || !reqs[0].ShareFrom.Equal(first.From) {
		t.Fatalf("the call once the budget had room: %+v, want the renewal of the share from %v", reqs, first.From)
	}
	if rs, ok := r.held(); !ok || !rs.From.After(first.From) {
		t.Errorf("after the renewal the share held is %v (%v), want the store's new one", rs, ok)
	}
}

// TestBreakerRefusedRenewalKeepsTheShare: a renewal that the circuit
// breaker refused was not sent either, and the share accrues on; one that
// failed otherwise (a timeout: Redis may have replaced the share) stays
// stopped.
func TestBreakerRefusedRenewalKeepsTheShare(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		kept bool
	}{
		{"breaker open", gobreaker.ErrOpenState, true},
		{"timed out", context.DeadlineExceeded, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newShareRig(t)
			setWindow(r.s, 0)
			for i := 0; r.s.heldBack.Load() == 0; i++ { // to the renewal, refused
				if i == 600 {
					t.Fatal("no renewal within 15 s of the share's grant")
				}
				r.tick()
			}
			r.clock = r.clock.Add(25 * time.Millisecond)
			tn := r.tn
			tn.mu.Lock()
			defer tn.mu.Unlock()
			a, _, _ := r.s.planWith(tn, r.clock, r.s.input(tn))
			if a.Share != lease.ShareAsk || a.cut == nil {
				t.Fatalf("plan %+v, want the share's renewal", a)
			}
			r.s.apply(context.Background(), tn, &r.s.one, r.clock, a.Acquire, a.ForNeed, a.Share, a.cut, lease.Result{Err: c.err})
			if _, held := tn.st().HeldShare(); held != c.kept {
				t.Errorf("share held after the renewal %s: %v, want %v", c.name, held, c.kept)
			}
		})
	}
}

// TestShareAskExpectsTheFleetWhileYoung: a share asked for while the
// tenant is younger here than a registry window names the instances it
// is expected to have, the most Redis reported on it or on any tenant
// here (lease.ShareTerms.Instances), so that the first askers of a fleet
// starting together are not granted shares sized among the few
// registered yet; past the window it names none, and its max-min fair
// share alone sizes it.
func TestShareAskExpectsTheFleetWhileYoung(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	const window = 12 * time.Second
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second, Window: window}, 1)
	for _, tc := range []struct {
		name   string
		age    time.Duration // since the tenant was first seen
		fleet  int           // Input.Fleet
		expect int           // ShareTerms.Instances
	}{
		{"young, the fleet larger", 5 * time.Second, 16, 16},
		{"young, the tenant's own count larger", 5 * time.Second, 2, 4},
		{"young, no fleet known", 5 * time.Second, 0, 4},
		{"older than the window", window + time.Second, 16, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := &State{}
			p.Init(st, "t", now.Add(-tc.age))
			for i := range 50 {
				p.observe(st, now.Add(-5*time.Second+time.Duration(i)*100*time.Millisecond).UnixNano(), 30)
			}
			st.flags |= flagGranted | flagScarce
			st.instances = 4
			a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30, Fleet: tc.fleet})
			if a.Share != lease.ShareAsk {
				t.Fatalf("scarce tenant's call: %+v, want an ask for a share", a)
			}
			if got := a.ShareTerms.Instances; got != tc.expect {
				t.Errorf("ShareTerms.Instances %d, want %d", got, tc.expect)
			}
			if err := a.ShareTerms.Validate(); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestShareRenewalCarryNeverEarly: the part of a token a renewed share
// had accrued carries over to the share that replaces it (SharedAfter),
// and still no token comes due before the two shares together accrued it
// in Redis's clock: the old one until Redis ran the renewal, the new one
// from then. Over random clock offsets, delays, rates and plan times.
func TestShareRenewalCarryNeverEarly(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
		base := time.Unix(1_000_000, 0)
		st := scarceState(p, base, 300)
		offset := time.Duration(rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "offset")) // local - Redis
		delay := func(name string) time.Duration {
			return time.Duration(rapid.Int64Range(0, int64(300*time.Millisecond)).Draw(t, name))
		}
		rate1 := rapid.Float64Range(0.1, 50).Draw(t, "rate1")
		rate2 := rapid.Float64Range(0.1, 50).Draw(t, "rate2")
		out1, back1 := delay("out1"), delay("back1")
		ran1 := base.Add(out1).Add(-offset)
		g1 := grantShare(rate1, ran1, ran1.Add(20*time.Second))
		p.Shared(st, shareQuota, lease.ShareAsk, base, base.Add(out1+back1), g1)
		accrued := func(g lease.Grant, redis time.Time) float64 {
			rs := g.RateShare
			if redis.After(rs.Until) {
				redis = rs.Until
			}
			return rs.Rate * max(redis.Sub(rs.From), 0).Seconds()
		}
		var dripped int64
		at := base.Add(out1 + back1)
		cutAt := at.Add(time.Duration(rapid.Int64Range(0, int64(8*time.Second)).Draw(t, "cut")))
		for ; at.Before(cutAt); at = at.Add(time.Duration(rapid.Int64Range(1, int64(500*time.Millisecond)).Draw(t, "step"))) {
			a := p.Plan(st, shareQuota, at, Input{Level: 0})
			dripped += a.Drip
			st.ledger.Sync(0)
		}
		// The renewal's plan: what is due comes due, then the share is cut.
		a := p.Plan(st, shareQuota, cutAt, Input{Level: 0})
		dripped += a.Drip
		st.ledger.Sync(0)
		_, cut := st.cutShare()
		out2, back2 := delay("out2"), delay("back2")
		ran2 := cutAt.Add(out2).Add(-offset) // Redis replaced the share then
		g2 := grantShare(rate2, ran2, ran2.Add(10*time.Second))
		p.SharedAfter(st, shareQuota, lease.ShareAsk, cutAt, cutAt.Add(out2+back2), g2, cut)
		for at = cutAt.Add(out2 + back2); at.Before(cutAt.Add(12 * time.Second)); at = at.Add(time.Duration(rapid.Int64Range(1, int64(500*time.Millisecond)).Draw(t, "step2"))) {
			a := p.Plan(st, shareQuota, at, Input{Level: 0})
			dripped += a.Drip
			st.ledger.Sync(0)
			redis := at.Add(-offset)
			if both := accrued(g1, minTime(redis, ran2)) + accrued(g2, redis); float64(dripped) > both+1e-9 {
				t.Fatalf("at local +%v: %d tokens came due, the shares accrued %.3f in Redis's clock", at.Sub(base), dripped, both)
			}
			if a.Share != lease.ShareKeep {
				return
			}
		}
	})
}
