package integration

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// Conformance cases at the numeric edges of reservations and rate shares:
// rates up to lease.MaxRate, bursts up to lease.MaxBurst, reservation
// counts about 2^31, quotas changed between calls, a share reported to a
// call that did not ask for it, aged returns of such sizes. On Redis the
// shadow holds every reply and the keys to memstore's, bit for bit; the
// checks here hold the replies to the bounds every backend must keep.

// edgeCall is one acquire of the edges cases, checked against the
// bounds: what is granted now (Granted - Reserved) within the whole tokens
// the bucket could hold, the reservation within its pace over the length
// and within the room up to ReserveAhead past the clock, at most the rate.
func (c *cx) edgeAcquire(what string, v lease.Store, tenant string, lim lease.Limits, r lease.Request) lease.Grant {
	c.t.Helper()
	r.Tenant, r.Limits = tenant, lim
	res, err := v.AcquireMany(c.ctx, []lease.Request{r}, nil)
	if err != nil || res[0].Err != nil {
		c.t.Fatalf("%s: %v, %+v", what, err, res)
	}
	g := res[0].Grant
	rate, burst := lim.Rate, lim.Burst
	if g.Override != nil {
		rate, burst = g.Override.Rate, g.Override.Burst
	}
	now := g.Granted - g.Reserved
	if g.Reserved < 0 || now < 0 || now > min(r.Want, burst) || g.Tokens < 0 || g.Tokens > float64(burst) {
		c.t.Fatalf("%s: %+v: outside the bucket (rate %g, burst %d)", what, g, rate, burst)
	}
	if g.Reserved > 0 {
		lms := math.Ceil(float64(r.Reserve) / float64(time.Millisecond))
		room := lease.ReserveAhead.Seconds()*rate + 1
		if g.Pace <= 0 || g.Pace > rate || g.Pace > g.Share || float64(g.Reserved) > math.Floor(g.Pace*lms/1000) || float64(g.Reserved) > room {
			c.t.Fatalf("%s: %+v: reserved %d at %g (share %g) over %v ms, room %g", what, g, g.Reserved, g.Pace, g.Share, lms, room)
		}
	}
	c.t.Logf("%s: granted %d (reserved %d at %g), %v left, share %v, rate share %+v, wait %v", what, g.Granted, g.Reserved, g.Pace, g.Tokens, g.Share, g.RateShare, g.Wait)
	return g
}

// edgeRelease releases amount and checks the return against the bounds:
// credited within [0, amount], the bucket within the burst.
func (c *cx) edgeRelease(what string, v lease.Store, tenant string, lim lease.Limits, amount int64, age time.Duration, id lease.GrantID, burst int64) lease.Return {
	c.t.Helper()
	r := c.release(v, tenant, lim, amount, age, id)
	if r.Credited < 0 || r.Credited > float64(amount) || r.Tokens < 0 || r.Tokens > float64(burst) || r.Credited != math.Trunc(r.Credited) && r.Credited > 1<<53 {
		c.t.Fatalf("%s: %+v: outside the bounds (amount %d, burst %d)", what, r, amount, burst)
	}
	c.t.Logf("%s: credited %v, %v in the bucket", what, r.Credited, r.Tokens)
	return r
}

// confReservationEdges: reservations at lease.MaxRate and lease.MaxBurst
// (their count far above 2^31, cut by the room up to ReserveAhead),
// reservations of 2^31 - 1, 2^31 and 2^31 + 1 tokens (pace times length),
// demands far above the rate, a length of centuries, the quota raised
// and lowered between reserving calls, and returns of the reserved and
// immediate tokens, aged and named, into the frozen bucket.
func confReservationEdges(c *cx) {
	a, b := c.view("a", confWindow), c.view("b", confWindow)
	huge := lease.Limits{Rate: lease.MaxRate, Burst: lease.MaxBurst}

	// The whole burst and a reservation at the largest rate.
	g := c.edgeAcquire("max: drain and reserve", a, "max", huge, lease.Request{Want: 2 * lease.MaxBurst, Demand: lease.MaxRate, Reserve: 10 * time.Second})
	if g.Granted-g.Reserved != lease.MaxBurst || g.Reserved <= math.MaxInt32 {
		c.t.Fatalf("max: %+v, want the burst now and a reservation above 2^31", g)
	}
	g2 := c.edgeAcquire("max: b on the frozen bucket", b, "max", huge, lease.Request{Want: 1 << 35, Demand: 1e300, Reserve: time.Duration(math.MaxInt64)})
	c.edgeRelease("max: the reservation back, named", a, "max", huge, g.Reserved, time.Hour, g.ID(), huge.Burst)
	c.edgeRelease("max: the burst back by age", a, "max", huge, lease.MaxBurst, time.Millisecond, 0, huge.Burst)
	c.edgeRelease("max: b's back, named", b, "max", huge, g2.Granted, time.Minute, g2.ID(), huge.Burst)
	c.edgeAcquire("max: after the returns", a, "max", huge, lease.Request{Want: lease.MaxBurst, Demand: lease.MaxRate, Reserve: time.Second})

	// Pace times length about 2^31: a rate of 4e9, a one-instance share of
	// the demand, one second.
	lim := lease.Limits{Rate: 4e9, Burst: 1e9}
	for i, demand := range []float64{math.MaxInt32, math.MaxInt32 + 1, math.MaxInt32 + 2} {
		tn := fmt.Sprintf("pow%d", i)
		c.edgeAcquire(tn+": drain", a, tn, lim, lease.Request{Want: lim.Burst, Demand: demand})
		g := c.edgeAcquire(tn+": reserve", a, tn, lim, lease.Request{Want: lim.Burst, Demand: demand, Reserve: time.Second})
		if g.Reserved != int64(demand) && g.Reserved != 0 {
			c.t.Fatalf("%s: reserved %d, want %d", tn, g.Reserved, int64(demand))
		}
		c.edgeRelease(tn+": back", a, tn, lim, g.Granted, 500*time.Millisecond, g.ID(), lim.Burst)
	}

	// The quota changed between reserving calls: planned under a small
	// rate, an override raises it to the largest; lowered, then deleted.
	small := lease.Limits{Rate: 1000, Burst: 1000}
	c.edgeAcquire("moved: drain", a, "moved", small, lease.Request{Want: 1000, Demand: 1e9})
	if _, err := a.SetOverride(c.ctx, "moved", small, lease.Override{Rate: lease.MaxRate, Burst: 1 << 20}); err != nil {
		c.t.Fatal(err)
	}
	g = c.edgeAcquire("moved: raised", a, "moved", small, lease.Request{Want: 1 << 30, Demand: 1e9, Reserve: 3720 * time.Millisecond})
	if g.Reserved == 0 {
		c.t.Fatalf("moved: raised: %+v, want a reservation", g)
	}
	gb := c.edgeAcquire("moved: b raised", b, "moved", small, lease.Request{Want: 1 << 30, Demand: 1e12, Reserve: time.Hour})
	if _, err := b.SetOverride(c.ctx, "moved", small, lease.Override{Rate: 0.5, Burst: 3}); err != nil {
		c.t.Fatal(err)
	}
	lo := lease.Limits{Rate: 0.5, Burst: 3}
	c.edgeRelease("moved: a's reservation back under the lowered rate", a, "moved", small, g.Reserved, time.Second, g.ID(), lo.Burst)
	c.edgeAcquire("moved: lowered", a, "moved", small, lease.Request{Want: 5, Demand: 1e9, Reserve: time.Minute})
	c.edgeRelease("moved: b's back", b, "moved", small, gb.Granted, time.Hour, gb.ID(), lo.Burst)
	if _, err := a.DeleteOverride(c.ctx, "moved", small); err != nil {
		c.t.Fatal(err)
	}
	c.edgeAcquire("moved: deleted", b, "moved", small, lease.Request{Want: 1 << 30, Demand: 1e9, Reserve: time.Minute})
	c.edgeRelease("moved: aged past the grant ids", a, "moved", small, 1<<30, time.Duration(1<<33)*time.Microsecond, g.ID(), small.Burst)
}

// confShareEdges: rate shares at lease.MaxRate, a share reported to a
// call that did not ask for it (another view of the instance, as after a
// restart), kept and ended across quota changes, with returns between.
func confShareEdges(c *cx) {
	huge := lease.Limits{Rate: lease.MaxRate, Burst: lease.MaxBurst}
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: time.Second, Headroom: 0.05}
	a, b := c.view("a", confWindow), c.view("b", confWindow)
	c.edgeAcquire("drain", a, "t", huge, lease.Request{Want: lease.MaxBurst, Demand: lease.MaxRate})
	c.edgeAcquire("b registers", b, "t", huge, lease.Request{Want: 1, Demand: 1e300})
	g := c.edgeAcquire("a asks", a, "t", huge, lease.Request{Want: 1 << 40, Demand: 2 * lease.MaxRate, Share: lease.ShareAsk, ShareTerms: terms, Reserve: time.Second})
	if !g.RateShare.Held() {
		c.t.Fatalf("a asks: %+v, want a share", g)
	}
	gb := c.edgeAcquire("b asks", b, "t", huge, lease.Request{Want: 1 << 40, Demand: 1e300, Share: lease.ShareAsk, ShareTerms: terms})
	// a anew: the share is reported to a call that did not ask.
	a2 := c.view("a", confWindow)
	if g2 := c.edgeAcquire("a anew keeps", a2, "t", huge, lease.Request{Want: 1 << 30, Demand: 1e6, Reserve: time.Second}); g2.RateShare != g.RateShare {
		c.t.Fatalf("a anew: %+v, want a's share %+v reported", g2.RateShare, g.RateShare)
	}
	// The rate lowered under the shares in force, which Redis keeps.
	if _, err := b.SetOverride(c.ctx, "t", huge, lease.Override{Rate: 10, Burst: 10}); err != nil {
		c.t.Fatal(err)
	}
	c.edgeAcquire("a anew under the lowered rate", a2, "t", huge, lease.Request{Want: 5, Demand: 1e6, Reserve: time.Second})
	c.edgeRelease("b's tokens back", b, "t", huge, gb.Granted, time.Hour, gb.ID(), 10)
	c.edgeAcquire("b asks under the lowered rate", b, "t", huge, lease.Request{Want: 5, Demand: 1e6, Share: lease.ShareAsk, ShareTerms: terms})
	c.edgeAcquire("a ends", a2, "t", huge, lease.Request{Demand: 1e6, Share: lease.ShareEnd, ShareFrom: g.RateShare.From, Reserve: time.Second})
	// Raised again: a's ask among b's share granted under the low rate.
	if _, err := a.SetOverride(c.ctx, "t", huge, lease.Override{Rate: lease.MaxRate, Burst: 1 << 30}); err != nil {
		c.t.Fatal(err)
	}
	c.edgeAcquire("a asks under the raised rate", a, "t", huge, lease.Request{Want: 1 << 31, Demand: lease.MaxRate, Share: lease.ShareAsk, ShareTerms: terms, Reserve: time.Second})
	c.edgeRelease("a's back, aged", a, "t", huge, 1<<31, 2*time.Second, 0, 1<<30)
	c.edgeAcquire("b keeps", b, "t", huge, lease.Request{Want: 1 << 31, Demand: 1e300, Reserve: time.Second})

	// Terms at their edges: the longest period, its last phase, a hold
	// of the period, the most headroom short of all, the most instances
	// expected; and the shortest period.
	long := lease.ShareTerms{Period: time.Duration(1<<51) * time.Microsecond, Phase: time.Duration(1<<51-1) * time.Microsecond,
		Hold: time.Duration(1<<51) * time.Microsecond, Headroom: 0.999999, Instances: lease.MaxShareInstances}
	short := lease.ShareTerms{Period: time.Millisecond, Hold: time.Millisecond}
	gl := c.edgeAcquire("long terms", a, "u", huge, lease.Request{Want: 1, Demand: lease.MaxRate, Share: lease.ShareAsk, ShareTerms: long})
	c.edgeAcquire("short terms", b, "u", huge, lease.Request{Want: 1, Demand: lease.MaxRate, Share: lease.ShareAsk, ShareTerms: short, Reserve: time.Second})
	c.edgeAcquire("long terms kept anew", c.view("a", confWindow), "u", huge, lease.Request{Want: lease.MaxBurst, Demand: 1, Reserve: time.Second})
	c.edgeAcquire("long terms ended", a, "u", huge, lease.Request{Want: lease.MaxBurst, Demand: 1, Share: lease.ShareEnd, ShareFrom: gl.RateShare.From, Reserve: time.Second})
	c.edgeAcquire("short terms asked again", b, "u", huge, lease.Request{Want: lease.MaxBurst, Demand: lease.MaxRate, Share: lease.ShareAsk, ShareTerms: short, Reserve: time.Second})
}

// confEdgesMixed: a fixed pseudo-random sequence of acquires (reserving
// or not, asking for, keeping and ending rate shares, through views old
// and new of three instances), releases (named or by age, of immediate
// and reserved tokens) and quota changes over rates and bursts from the
// smallest to lease.MaxRate and lease.MaxBurst, each call held to the
// bounds; on Redis the shadow holds every reply and the keys to
// memstore's.
func confEdgesMixed(c *cx) {
	rng := rand.New(rand.NewPCG(55, 1))
	pick := func(n int) int { return rng.IntN(n) }
	rates := []float64{1e-3, 0.5, 10, 1000, 4e9, lease.MaxRate}
	bursts := []int64{1, 3, 1000, 1 << 31, lease.MaxBurst}
	wants := []int64{0, 1, 7, 1 << 31, lease.MaxBurst, 2 * lease.MaxBurst}
	demands := []float64{0, 1, 999, math.MaxInt32 + 1, lease.MaxRate, 2 * lease.MaxRate, 1e300}
	lengths := []time.Duration{0, time.Microsecond, 3720 * time.Millisecond, time.Hour, time.Duration(math.MaxInt64)}
	ages := []time.Duration{0, time.Millisecond, time.Second, time.Hour, time.Duration(1<<33) * time.Microsecond}
	terms := []lease.ShareTerms{
		{Period: 10 * time.Second, Hold: time.Second, Headroom: 0.05},
		{Period: time.Second, Hold: 500 * time.Millisecond, Headroom: 0.1, Instances: 3},
		{Period: 2 * time.Millisecond, Hold: time.Millisecond},
	}
	ids := []string{"a", "b", "c"}
	views := map[string]lease.Store{}
	for _, id := range ids {
		views[id] = c.view(id, confWindow)
	}
	base := lease.Limits{Rate: 1000, Burst: 1000}
	burst := base.Burst // in force, as the last reply said
	type held struct {
		id     lease.GrantID
		tokens int64
	}
	grants := map[string][]held{}
	shares := map[string]lease.RateShare{}
	tenant := ""
	for step := range 300 {
		// A tenant of its own every 60 steps: should the shadow stop
		// following one (a release into a frozen bucket whose credit
		// Redis's clock in the call decided), the next is followed.
		if step%60 == 0 {
			tenant = fmt.Sprintf("t%d", step/60)
			burst = base.Burst
			clear(grants)
			clear(shares)
		}
		id := ids[pick(len(ids))]
		v := views[id]
		what := fmt.Sprintf("step %d, %s", step, id)
		switch k := pick(10); {
		case k < 5:
			r := lease.Request{Want: wants[pick(len(wants))], Demand: demands[pick(len(demands))], Reserve: lengths[pick(len(lengths))]}
			switch pick(4) {
			case 0:
				r.Share, r.ShareTerms = lease.ShareAsk, terms[pick(len(terms))]
			case 1:
				if shares[id].Held() {
					r.Share, r.ShareFrom = lease.ShareEnd, shares[id].From
				}
			}
			g := c.edgeAcquire(what+" acquires", v, tenant, base, r)
			burst = base.Burst
			if g.Override != nil {
				burst = g.Override.Burst
			}
			shares[id] = g.RateShare
			if g.Granted > 0 {
				grants[id] = append(grants[id], held{g.ID(), g.Granted})
			}
		case k < 8:
			gs := grants[id]
			if len(gs) == 0 {
				continue
			}
			i := pick(len(gs))
			amount := max(1, gs[i].tokens>>pick(3))
			var gid lease.GrantID
			if pick(2) == 0 {
				gid = gs[i].id
			}
			c.edgeRelease(what+" releases", v, tenant, base, amount, ages[pick(len(ages))], gid, burst)
		case k == 8:
			o := lease.Override{Rate: rates[pick(len(rates))], Burst: bursts[pick(len(bursts))]}
			if _, err := v.SetOverride(c.ctx, tenant, base, o); err != nil {
				c.t.Fatalf("%s sets %+v: %v", what, o, err)
			}
			burst = o.Burst
		default:
			if pick(2) == 0 {
				if _, err := v.DeleteOverride(c.ctx, tenant, base); err != nil {
					c.t.Fatalf("%s deletes: %v", what, err)
				}
				burst = base.Burst
			} else {
				views[id] = c.view(id, confWindow) // anew: its share forgotten
				shares[id] = lease.RateShare{}
			}
		}
	}
}

// confCreditOverflow: an instance whose fair share is far above the rate
// (its demand jumped past the rate since the registry summary, which put
// every demand within it) has a credit capacity of burst*share/rate
// tokens, which for a demand of 1e300 under a burst of 2^40 and a rate
// of 1 is more than a float holds. Its entry must still read back on the
// next call: its credit, and the rate share it holds, which the bucket
// keeps withholding (a share that no reply reports is lost to every
// instance until its end).
func confCreditOverflow(c *cx) {
	lim := lease.Limits{Rate: 1, Burst: lease.MaxBurst}
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: 2 * time.Second}
	a := c.view("a", confWindow)
	g := c.edgeAcquire("ask", a, "t", lim, lease.Request{Want: 1, Demand: 0.5, Share: lease.ShareAsk, ShareTerms: terms})
	if !g.RateShare.Held() {
		c.t.Fatalf("ask: %+v, want a share", g)
	}
	c.edgeAcquire("demand jumps", a, "t", lim, lease.Request{Want: 1, Demand: 1e300})
	e := c.sp.state("t").Registry["a"]
	credit, err := strconv.ParseFloat(strings.Split(e, ":")[2], 64)
	if err != nil || math.IsInf(credit, 0) || math.IsNaN(credit) || credit < 0 {
		c.t.Errorf("entry %q after a demand of 1e300: credit %v (%v), want a finite number >= 0", e, credit, err)
	}
	if g2 := c.edgeAcquire("next", a, "t", lim, lease.Request{Want: 1, Demand: 1e300}); g2.RateShare != g.RateShare {
		c.t.Errorf("the call after a demand of 1e300 reports share %+v, want the share held, %+v", g2.RateShare, g.RateShare)
	}
}
