package integration

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"reflect"
	"strconv"
	"strings"
	"time"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/lease"
)

// The cases of the store conformance suite (conformance_test.go), in the
// order conformanceCases lists them.

// confPartialGrants: a grant is min(want, whole tokens); asking for more
// than the bucket holds is a partial grant, not an error; want 0 reads.
func confPartialGrants(c *cx) {
	v := c.view("", 0)
	lim := lease.Limits{Rate: 0.5, Burst: 10}
	var m confModel
	g := c.acquire(v, "t", lim, 4, 0)
	wg, wt := m.acquire(us(g.ServerTime), lim, 4)
	c.checkGrant("4 of a new bucket", g, wg, wt)
	if g.Granted != 4 || g.Tokens != 6 {
		c.t.Fatalf("a new bucket is full: %+v, want 4 granted and 6 left", g)
	}
	g = c.acquire(v, "t", lim, 10, 0)
	wg, wt = m.acquire(us(g.ServerTime), lim, 10)
	c.checkGrant("10 of 6", g, wg, wt)
	if g.Granted != 6 {
		c.t.Fatalf("10 of about 6: granted %d, want the 6 whole tokens", g.Granted)
	}
	g = c.acquire(v, "t", lim, 0, 0)
	wg, wt = m.acquire(us(g.ServerTime), lim, 0)
	c.checkGrant("a read", g, wg, wt)
	if g.Instances != 0 || g.Share != 0 || g.Override != nil {
		c.t.Fatalf("a view without instance: %+v, want no instances, share or override", g)
	}
	c.checkStored("t", &m)
}

// confRefill: tokens come back at Rate per second of the store's time, up
// to Burst, and fractions carry over.
func confRefill(c *cx) {
	v := c.view("", 0)
	lim := lease.Limits{Rate: 333.3, Burst: 50}
	var m confModel
	g := c.acquire(v, "t", lim, 50, 0)
	wg, wt := m.acquire(us(g.ServerTime), lim, 50)
	c.checkGrant("drain", g, wg, wt)
	c.sp.advance(30 * time.Millisecond)
	g2 := c.acquire(v, "t", lim, 0, 0)
	wg, wt = m.acquire(us(g2.ServerTime), lim, 0)
	c.checkGrant("after 30ms", g2, wg, wt)
	if span := g2.ServerTime.Sub(g.ServerTime); span < 30*time.Millisecond || g2.Tokens < 9.999 {
		c.t.Fatalf("%v after draining at 333.3/s: %v tokens, want about %v", span, g2.Tokens, span.Seconds()*333.3)
	}
	g = c.acquire(v, "t", lim, 7, 0)
	wg, wt = m.acquire(us(g.ServerTime), lim, 7)
	c.checkGrant("7 of the refill", g, wg, wt)
	c.sp.advance(200 * time.Millisecond)
	g = c.acquire(v, "t", lim, 0, 0)
	wg, wt = m.acquire(us(g.ServerTime), lim, 0)
	c.checkGrant("after 200ms", g, wg, wt)
	if g.Tokens != 50 {
		c.t.Fatalf("a refill past Burst: %v tokens, want 50", g.Tokens)
	}
	c.checkStored("t", &m)
}

// confRefillRounding: the refill is computed as the scripts compute it,
// to the last bit, at awkward rates over many calls.
func confRefillRounding(c *cx) {
	v := c.view("", 0)
	for i, rate := range []float64{0.1, 1.0 / 3, 333.3, 7.77e-7, 123456.789, 9.87654321e8} {
		tenant := "r" + strconv.Itoa(i)
		lim := lease.Limits{Rate: rate, Burst: lease.MaxBurst}
		var m confModel
		for k := range 40 {
			want := int64(1)
			if k == 0 {
				want = lease.MaxBurst // start empty, where the fractions show
			}
			g := c.acquire(v, tenant, lim, want, 0)
			wg, wt := m.acquire(us(g.ServerTime), lim, want)
			c.checkGrant(fmt.Sprintf("rate %v, call %d", rate, k), g, wg, wt)
		}
		c.checkStored(tenant, &m)
	}
}

// confClockBehind: when the store's clock is behind a bucket's last call
// (it went back, or a failover reached a replica whose clock lags), each
// call on the bucket takes the microsecond after the previous one, refills
// only that, and keeps the bucket's times distinct and rising.
func confClockBehind(c *cx) {
	v := c.view("a", confWindow)
	// A microsecond refills a thousandth of a token, and the bucket would
	// take minutes to refill: it does not expire during the case.
	lim := lease.Limits{Rate: 1000, Burst: 100_000}
	var m confModel
	g := c.acquire(v, "t", lim, 99_990, 0)
	m.acquire(us(g.ServerTime), lim, 99_990)
	m.ts = c.sp.lag("t", time.Minute)
	prev := m.ts
	for i := range 3 {
		g := c.acquire(v, "t", lim, 1, 0)
		wg, wt := m.acquire(us(g.ServerTime), lim, 1)
		c.checkGrant(fmt.Sprintf("acquire %d behind", i), g, wg, wt)
		if us(g.ServerTime) != prev+1 {
			c.t.Fatalf("acquire %d with the clock behind: at %d, want %d, a microsecond after the last call", i, us(g.ServerTime), prev+1)
		}
		prev++
	}
	r := c.release(v, "t", lim, 5, time.Hour, g.ID())
	credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, 5, time.Hour, g.ID())
	c.checkReturn("a release behind", r, credit, tokens)
	if us(r.ServerTime) != prev+1 {
		c.t.Fatalf("release with the clock behind: at %d, want %d", us(r.ServerTime), prev+1)
	}
	c.checkStored("t", &m)
}

// confRisingTimes: a bucket's calls have distinct, rising times, a
// microsecond apart when the clock has not moved; so their grant IDs
// differ.
func confRisingTimes(c *cx) {
	v := c.view("", 0)
	lim := lease.Limits{Rate: 1, Burst: 100}
	reqs := make([]lease.Request, 8)
	for i := range reqs {
		reqs[i] = lease.Request{Tenant: "t", Limits: lim, Want: 1}
	}
	var m confModel
	var times []time.Time
	for range 2 {
		res, err := v.AcquireMany(c.ctx, reqs, nil)
		if err != nil {
			c.t.Fatal(err)
		}
		for i, r := range res {
			if r.Err != nil {
				c.t.Fatal(r.Err)
			}
			wg, wt := m.acquire(us(r.Grant.ServerTime), lim, 1)
			c.checkGrant(fmt.Sprintf("call %d", i), r.Grant, wg, wt)
			times = append(times, r.Grant.ServerTime)
		}
	}
	ids := map[lease.GrantID]bool{}
	for i, tm := range times {
		g := lease.Grant{ServerTime: tm}
		if ids[g.ID()] {
			c.t.Fatalf("grant ID %d twice", g.ID())
		}
		ids[g.ID()] = true
		if i == 0 {
			continue
		}
		if !tm.After(times[i-1]) {
			c.t.Fatalf("call %d at %v, not after %v", i, tm, times[i-1])
		}
		if c.sp.still() && tm.Sub(times[i-1]) != time.Microsecond {
			c.t.Fatalf("clock standing still: call %d at %v, want a microsecond after %v", i, tm, times[i-1])
		}
	}
	c.checkStored("t", &m)
}

// confBatches: AcquireMany reuses the results slice it is given, keeps
// each request's outcome in its place, and fails an invalid request
// alone; ReleaseMany sends no release of 0.
func confBatches(c *cx) {
	v := c.view("b", confWindow)
	lim := lease.Limits{Rate: 2, Burst: 10}
	reqs := []lease.Request{
		{Tenant: "t", Limits: lim, Want: 1},
		{Tenant: "u", Limits: lim, Want: 2},
		{Tenant: "t", Limits: lim, Want: 3},
		{Tenant: "t", Limits: lease.Limits{Rate: 2, Burst: 0}, Want: 1},
		{Tenant: "u", Limits: lim, Want: 20},
	}
	buf := make([]lease.Result, 0, 8)
	res, err := v.AcquireMany(c.ctx, reqs, buf)
	if err != nil {
		c.t.Fatal(err)
	}
	if len(res) != len(reqs) || &res[0] != &buf[:1][0] {
		c.t.Fatalf("%d results, reused %v; want %d in the given slice", len(res), &res[0] == &buf[:1][0], len(reqs))
	}
	models := map[string]*confModel{"t": {}, "u": {}}
	reg := map[string]*confRegistry{"t": {}, "u": {}}
	for i, r := range reqs {
		if i == 3 {
			if !errors.Is(res[i].Err, lease.ErrBadRequest) {
				c.t.Fatalf("burst 0 in a batch: %v, want ErrBadRequest", res[i].Err)
			}
			continue
		}
		if res[i].Err != nil {
			c.t.Fatal(res[i].Err)
		}
		g := res[i].Grant
		m := models[r.Tenant]
		x := m.see(us(g.ServerTime), lim.Rate, lim.Burst)
		n, share, granted := reg[r.Tenant].acquire("b", confWindow.Milliseconds(), us(g.ServerTime), lim, 0, x, min(int64(math.Floor(x)), r.Want))
		m.store(us(g.ServerTime), x-float64(granted), lim)
		c.checkGrant(fmt.Sprintf("request %d", i), g, granted, m.tk)
		if g.Instances != n || g.Share != share {
			c.t.Fatalf("request %d: %d instances, share %v; the model: %d, %v", i, g.Instances, g.Share, n, share)
		}
	}
	rel := v.ReleaseMany(c.ctx, []lease.ReleaseRequest{
		{Tenant: "t", Limits: lim, Amount: 0, Age: time.Second},
		{Tenant: "u", Limits: lim, Amount: 1, Age: time.Second, Grant: res[1].Grant.ID()},
	})
	if rel[0] != (lease.ReleaseResult{}) {
		c.t.Fatalf("a release of 0: %+v, want a zero result", rel[0])
	}
	if rel[1].Err != nil {
		c.t.Fatal(rel[1].Err)
	}
	credit, tokens, _ := models["u"].release(us(rel[1].Return.ServerTime), us(rel[1].Return.ServerTime), lim, 1, time.Second, res[1].Grant.ID())
	c.checkReturn("a release of 1", rel[1].Return, credit, tokens)
	for tn, m := range models {
		c.checkStored(tn, m)
	}
}

// confAgedReturns: a return is credited with what the bucket would hold
// had its tokens never been granted, against the level history: naming
// the grant leaves the grant's own level out, an age alone does not, and
// overlapping returns cannot use the same room twice.
func confAgedReturns(c *cx) {
	a, b := c.view("a", confWindow), c.view("b", confWindow)
	// A slow refill, so that the checks below hold however slow Redis is
	// (the model's values are exact anyway).
	lim := lease.Limits{Rate: 0.01, Burst: 100}
	var m confModel
	acq := func(v lease.Store, want int64) lease.Grant {
		g := c.acquire(v, "t", lim, want, 0)
		wg, wt := m.acquire(us(g.ServerTime), lim, want)
		c.checkGrant(fmt.Sprintf("acquire %d", want), g, wg, wt)
		return g
	}
	rel := func(v lease.Store, amount int64, age time.Duration, id lease.GrantID) float64 {
		r := c.release(v, "t", lim, amount, age, id)
		credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, amount, age, id)
		c.checkReturn(fmt.Sprintf("release %d (age %v, grant %d)", amount, age, id), r, credit, tokens)
		c.checkStored("t", &m)
		return r.Credited
	}
	ga := acq(a, 40) // from a full bucket
	gb := acq(b, 10)
	acq(b, 10)
	acq(b, 10)
	// b's last 10 by age alone: the age reaches back past a's grant from
	// the full bucket, so nothing can be credited.
	if got := rel(b, 10, time.Hour, 0); got != 0 {
		c.t.Fatalf("a return whose age reaches a full bucket: credited %v, want 0", got)
	}
	// a's 40 named by their grant: the bucket since held at most what b
	// found, about 60 (recorded rounded up to 8 significant bits: 60.25),
	// so 40 fit under the cap but for that rounding: first 25, then 14.5
	// more (60.25 raised by 25 is recorded as 85.5).
	first := rel(a, 25, time.Hour, ga.ID())
	second := rel(a, 15, time.Hour, ga.ID())
	if first != 25 || second < 14.4 {
		c.t.Fatalf("a's 40 from a full bucket, named: credited %v then %v; want 25, then about 14.5", first, second)
	}
	// The room below the cap since a's grant is used up.
	if third := rel(a, 5, time.Hour, ga.ID()); third > 0.1 {
		c.t.Fatalf("5 more named by a's grant: credited %v, want about 0", third)
	}
	// b's first 10, granted after, still fit.
	if fourth := rel(b, 10, time.Hour, gb.ID()); fourth < 9.9 {
		c.t.Fatalf("b's first 10, named: credited %v, want about 10", fourth)
	}
	// An age of 71.6 minutes or more no longer tells the grant from its
	// low bits: the age decides, and reaches the full bucket.
	if got := rel(a, 5, time.Duration(1<<32)*time.Microsecond, ga.ID()); got != 0 {
		c.t.Fatalf("a return too old for its grant ID: credited %v, want 0", got)
	}
}

// confAgeRoundsUp: a release's age counts in whole milliseconds, rounded
// up, so that it stays an upper bound: 1.5 ms back from a release 1.5 ms
// after a grant from a full bucket reaches the full level.
func confAgeRoundsUp(c *cx) {
	v := c.view("", 0)
	lim := lease.Limits{Rate: 1e-3, Burst: 100}
	var m confModel
	g := c.acquire(v, "t", lim, 50, 0)
	wg, wt := m.acquire(us(g.ServerTime), lim, 50)
	c.checkGrant("50 from a full bucket", g, wg, wt)
	const age = 1500 * time.Microsecond
	c.sp.advance(age)
	r := c.release(v, "t", lim, 10, age, 0)
	credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, 10, age, 0)
	c.checkReturn("10 back, 1.5ms old", r, credit, tokens)
	if c.sp.still() && r.Credited != 0 {
		c.t.Fatalf("credited %v: an age of 1.5ms must count as 2ms and reach the full level", r.Credited)
	}
	c.checkStored("t", &m)
}

// confHistoryMerges: beyond 8 entries the history merges the two
// neighbours with the smallest drop, and a return from between them is
// credited against the higher level, exactly as the model says.
func confHistoryMerges(c *cx) {
	v := c.view("", 0)
	lim := lease.Limits{Rate: 1, Burst: 1000}
	var m confModel
	var grants []lease.Grant
	// From a full bucket, 5 then 100 at a time: the drop of 5 is the
	// smallest, so the first merge joins the full level with the next, and
	// the first grant is judged against the full level.
	for _, want := range []int64{5, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100} {
		g := c.acquire(v, "t", lim, want, 0)
		wg, wt := m.acquire(us(g.ServerTime), lim, want)
		c.checkGrant(fmt.Sprintf("acquire %d", want), g, wg, wt)
		grants = append(grants, g)
	}
	c.checkStored("t", &m)
	if n := len(m.h.Entries()); n != peaks.Max {
		c.t.Fatalf("the model's history has %d entries, want %d (merged)", n, peaks.Max)
	}
	// A grant whose credit the merges lowered.
	merged := -1
	for i, g := range grants {
		x := m.level(us(g.ServerTime)+1, lim.Rate, lim.Burst)
		if m.h.Peak(us(g.ServerTime), x) != m.u.Peak(us(g.ServerTime), x) {
			merged = i
			break
		}
	}
	if merged < 0 {
		c.t.Fatal("no grant sits between merged entries: the case needs other wants")
	}
	g := grants[merged]
	r := c.release(v, "t", lim, g.Granted, time.Hour, g.ID())
	credit, tokens, unmerged := m.release(us(r.ServerTime), us(r.ServerTime), lim, g.Granted, time.Hour, g.ID())
	c.checkReturn("a return from between merged entries", r, credit, tokens)
	if !(credit < unmerged) {
		c.t.Fatalf("credited %v; without merges %v: the case must credit less for the merge", credit, unmerged)
	}
	c.checkStored("t", &m)
}

// confBurstChange: a burst other than the one the history was recorded
// under caps the bucket and makes the past unknown: earlier grants get no
// credit.
func confBurstChange(c *cx) {
	v := c.view("", 0)
	big, small := lease.Limits{Rate: 1, Burst: 100}, lease.Limits{Rate: 1, Burst: 50}
	var m confModel
	g1 := c.acquire(v, "t", big, 30, 0)
	wg, wt := m.acquire(us(g1.ServerTime), big, 30)
	c.checkGrant("30 at burst 100", g1, wg, wt)
	g := c.acquire(v, "t", small, 0, 0)
	wg, wt = m.acquire(us(g.ServerTime), small, 0)
	c.checkGrant("a read at burst 50", g, wg, wt)
	if g.Tokens != 50 {
		c.t.Fatalf("70 under a burst of 50: %v, want 50", g.Tokens)
	}
	c.checkStored("t", &m)
	r := c.release(v, "t", small, 30, time.Hour, g1.ID())
	credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), small, 30, time.Hour, g1.ID())
	c.checkReturn("a return from before the change", r, credit, tokens)
	if r.Credited != 0 {
		c.t.Fatalf("credited %v for tokens granted under another burst, want 0", r.Credited)
	}
	c.checkStored("t", &m)
}

// confOverrides: an override replaces the callers' rate and burst in
// acquire and release; setting and deleting it refills at the old quota,
// caps at the new burst, restarts the history and drops the registry
// summary (its water level was the old rate's); Get reads it back.
func confOverrides(c *cx) {
	v := c.view("a", confWindow)
	base := lease.Limits{Rate: 10, Burst: 100}
	o := lease.Override{Rate: 5, Burst: 50, MinLease: 1, MaxLease: 20, LeaseTTL: 2 * time.Second, Mode: 2}
	var m confModel
	if got, err := v.GetOverride(c.ctx, "t"); err != nil || got != nil {
		c.t.Fatalf("no override yet: %+v, %v", got, err)
	}
	g1 := c.acquire(v, "t", base, 60, 0)
	wg, wt := m.acquire(us(g1.ServerTime), base, 60)
	c.checkGrant("60 at the base quota", g1, wg, wt)
	if c.sp.state("t").Bucket["rg"] == "" {
		c.t.Fatalf("no registry summary after a registering acquire: %v", c.sp.state("t").Bucket)
	}

	tokens, err := v.SetOverride(c.ctx, "t", base, o)
	if err != nil {
		c.t.Fatal(err)
	}
	// The summary's water level was the old rate's: dropped.
	if rg, ok := c.sp.state("t").Bucket["rg"]; ok {
		c.t.Fatalf("registry summary %q after the quota changed, want none", rg)
	}
	_, ts, _, _, _ := c.stored("t")
	ol := lease.Limits{Rate: o.Rate, Burst: o.Burst}
	if want := m.change(ts, base, ol); tokens != want {
		c.t.Fatalf("set: %v tokens, the model %v", tokens, want)
	}
	c.checkStored("t", &m)
	if got, err := v.GetOverride(c.ctx, "t"); err != nil || got == nil || *got != o {
		c.t.Fatalf("get: %+v, %v; want %+v", got, err, o)
	}
	g := c.acquire(v, "t", base, 100, 0)
	wg, wt = m.acquire(us(g.ServerTime), ol, 100)
	c.checkGrant("100 under the override", g, wg, wt)
	if g.Override == nil || *g.Override != o {
		c.t.Fatalf("the grant's override %+v, want %+v", g.Override, o)
	}
	// Tokens granted before the change are not credited; after it, they
	// are, under the override's burst.
	r := c.release(v, "t", base, 60, time.Hour, g1.ID())
	credit, left, _ := m.release(us(r.ServerTime), us(r.ServerTime), ol, 60, time.Hour, g1.ID())
	c.checkReturn("a return from before the change", r, credit, left)
	if r.Credited != 0 {
		c.t.Fatalf("credited %v across a quota change, want 0", r.Credited)
	}
	r = c.release(v, "t", base, 30, time.Hour, g.ID())
	credit, left, _ = m.release(us(r.ServerTime), us(r.ServerTime), ol, 30, time.Hour, g.ID())
	c.checkReturn("a return under the override", r, credit, left)
	if r.Tokens > float64(o.Burst) {
		c.t.Fatalf("%v tokens above the override's burst %d", r.Tokens, o.Burst)
	}

	tokens, err = v.DeleteOverride(c.ctx, "t", base)
	if err != nil {
		c.t.Fatal(err)
	}
	_, ts, _, _, _ = c.stored("t")
	if want := m.change(ts, ol, base); tokens != want {
		c.t.Fatalf("delete: %v tokens, the model %v", tokens, want)
	}
	c.checkStored("t", &m)
	if got, err := v.GetOverride(c.ctx, "t"); err != nil || got != nil {
		c.t.Fatalf("after delete: %+v, %v; want none", got, err)
	}
	g = c.acquire(v, "t", base, 1, 0)
	wg, wt = m.acquire(us(g.ServerTime), base, 1)
	c.checkGrant("after delete", g, wg, wt)
	if g.Override != nil {
		c.t.Fatalf("the grant still has an override: %+v", g.Override)
	}

	// Deleting where there is nothing creates a full bucket at base.
	tokens, err = v.DeleteOverride(c.ctx, "fresh", base)
	if err != nil || tokens != float64(base.Burst) {
		c.t.Fatalf("delete on a new tenant: %v, %v; want %d", tokens, err, base.Burst)
	}
	// A full bucket expires a second later: a slow Redis may be there.
	if _, ts, _, _, ok := c.stored("fresh"); ok {
		var fresh confModel
		fresh.change(ts, base, base)
		c.checkStored("fresh", &fresh)
	}
}

// confListOverrides: the overrides stored are listed, each with its
// tenant (long ones too, whose keys are hashed) and under its key; a
// deleted one and a bucket without one are not; a done ctx ends the
// listing with its error.
func confListOverrides(c *cx) {
	v := c.view("", 0)
	base := lease.Limits{Rate: 10, Burst: 10}
	list := func(ctx context.Context) (map[string]lease.Override, error) {
		got := map[string]lease.Override{}
		for lo, err := range v.ListOverrides(ctx) {
			if err != nil {
				return got, err
			}
			if !strings.HasSuffix(lo.Key, lease.QuotaKey(lease.Key("", lo.Tenant))) {
				c.t.Errorf("%.20q listed under %q", lo.Tenant, lo.Key)
			}
			got[lo.Tenant] = lo.Override
		}
		return got, nil
	}
	if got, err := list(c.ctx); err != nil || len(got) != 0 {
		c.t.Fatalf("listing before any override: %v, %v", got, err)
	}
	want := map[string]lease.Override{}
	long := strings.Repeat("long\x00", 40)
	for i, tn := range []string{"a", "", "b c{}", long, long + "2", "gone"} {
		o := lease.Override{Rate: float64(i) + 0.5, Burst: int64(i + 1), MinLease: 1, MaxLease: int64(i + 1), LeaseTTL: time.Duration(i) * time.Second, Mode: uint8(i % 3)}
		if _, err := v.SetOverride(c.ctx, tn, base, o); err != nil {
			c.t.Fatal(err)
		}
		want[tn] = o
	}
	if _, err := v.DeleteOverride(c.ctx, "gone", base); err != nil {
		c.t.Fatal(err)
	}
	delete(want, "gone")
	if _, err := v.AcquireMany(c.ctx, []lease.Request{{Tenant: "bucket only", Limits: base, Want: 1}}, nil); err != nil {
		c.t.Fatal(err)
	}
	got, err := list(c.ctx)
	if err != nil || !maps.Equal(got, want) {
		c.t.Fatalf("listed %v, %v; want %v", got, err, want)
	}
	done, cancel := context.WithCancel(c.ctx)
	cancel()
	if got, err := list(done); !errors.Is(err, context.Canceled) || len(got) != 0 {
		c.t.Fatalf("listing with a done ctx: %v, %v; want nothing and context.Canceled", got, err)
	}
}

// confQuotaVersion: every set and delete raises the version by one, and
// another keyspace's version stays.
func confQuotaVersion(c *cx) {
	v := c.view("", 0)
	other := c.open(c.t)
	ov, err := other.newView("", 0)
	if err != nil {
		c.t.Fatal(err)
	}
	defer other.final()
	version := func(st lease.Store, want int64) {
		c.t.Helper()
		if n, err := st.QuotaVersion(c.ctx); err != nil || n != want {
			c.t.Fatalf("quota version %d, %v; want %d", n, err, want)
		}
	}
	version(v, 0)
	base := lease.Limits{Rate: 5, Burst: 5}
	for i, f := range []func() error{
		func() error { _, err := v.SetOverride(c.ctx, "t", base, lease.Override{Rate: 1, Burst: 1}); return err },
		func() error { _, err := v.SetOverride(c.ctx, "t", base, lease.Override{Rate: 2, Burst: 2}); return err },
		func() error { _, err := v.DeleteOverride(c.ctx, "t", base); return err },
		func() error { _, err := v.DeleteOverride(c.ctx, "t", base); return err }, // none stored: still a change
		func() error { _, err := v.SetOverride(c.ctx, "u", base, lease.Override{Rate: 3, Burst: 3}); return err },
	} {
		if err := f(); err != nil {
			c.t.Fatal(err)
		}
		version(v, int64(i+1))
	}
	version(ov, 0)
}

// confFairShares: an acquire registers the instance with its demand and
// learns its max-min fair share; while the demands exceed the rate and
// the bucket is less than half full, a grant is capped at the credit the
// share accrued (starting at the instance's share of the burst).
func confFairShares(c *cx) {
	// A slow refill: the bucket stays below half full however slow Redis
	// is.
	lim := lease.Limits{Rate: 10, Burst: 1000}
	views := map[string]lease.Store{}
	for _, id := range []string{"a", "b", "c", "d"} {
		views[id] = c.view(id, confWindow)
	}
	plain := c.view("", 0)
	var m confModel
	reg := &confRegistry{}
	acq := func(id string, want int64, demand float64) lease.Grant {
		c.t.Helper()
		v := plain
		if id != "" {
			v = views[id]
		}
		g := c.acquire(v, "t", lim, want, demand)
		x := m.see(us(g.ServerTime), lim.Rate, lim.Burst)
		granted, n, share := min(int64(math.Floor(x)), want), 0, 0.0
		if id != "" {
			n, share, granted = reg.acquire(id, confWindow.Milliseconds(), us(g.ServerTime), lim, demand, x, granted)
		}
		m.store(us(g.ServerTime), x-float64(granted), lim)
		c.checkGrant(fmt.Sprintf("%q asks %d (demand %v)", id, want, demand), g, granted, m.tk)
		if g.Instances != n || g.Share != share {
			c.t.Fatalf("%q: %d instances, share %v; the model: %d, %v", id, g.Instances, g.Share, n, share)
		}
		return g
	}
	// Registration: the shares of 1, 3 and 20 in 10/s are 1, 3, 6; d's
	// demand cannot be used and counts as 0.
	for _, r := range []struct {
		id            string
		demand, share float64
		n             int
	}{{"a", 1, 1, 1}, {"b", 3, 3, 2}, {"c", 20, 6, 3}, {"d", math.NaN(), 0, 4}} {
		if g := acq(r.id, 0, r.demand); g.Share != r.share || g.Instances != r.n {
			c.t.Fatalf("%q registers: share %v of %d instances, want %v of %d", r.id, g.Share, g.Instances, r.share, r.n)
		}
	}
	big := acq("", 600, 0)
	if big.Instances != 0 || big.Share != 0 || big.Granted != 600 {
		c.t.Fatalf("a view without instance: %+v; want 600, no instances, no share", big)
	}
	// Scarce: a's credit is its share of the burst, 100; b's 300.
	if g := acq("a", 400, 1); g.Granted != 100 {
		c.t.Fatalf("a asks 400 while scarce: %d, want its credit 100", g.Granted)
	}
	if g := acq("b", 400, 3); g.Granted != 300 {
		c.t.Fatalf("b asks 400 while scarce: %d, want its credit 300", g.Granted)
	}
	acq("c", 400, 20) // what is left
	// Put 200 of the plain view's 600 back: a, its credit spent, gets
	// next to nothing, while c, with its credit, gets what it asks.
	r := c.release(plain, "t", lim, 200, time.Hour, big.ID())
	credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, 200, time.Hour, big.ID())
	c.checkReturn("200 back", r, credit, tokens)
	if r.Credited != 200 {
		c.t.Fatalf("200 of 600 granted from a full bucket, named: credited %v", r.Credited)
	}
	if g := acq("a", 10, 1); g.Granted == 10 {
		c.t.Fatalf("a, its credit spent a moment ago, got all it asked: %d", g.Granted)
	}
	if g := acq("c", 10, 20); g.Granted != 10 {
		c.t.Fatalf("c with its credit: %d granted, want 10", g.Granted)
	}
	if got := c.sp.state("t").Registry; !reflect.DeepEqual(got, reg.fields()) {
		c.t.Fatalf("registry %v;\nthe model's %v", got, reg.fields())
	}
}

// confRegistryRun drives acquires of one token of tenant "t" by instances
// of one registry window through the conformance model (the bucket, m,
// and the registry, reg), and fails on a grant, an instance count or a
// share the model does not give.
type confRegistryRun struct {
	c      *cx
	window time.Duration
	lim    lease.Limits
	views  map[string]lease.Store // by instance id, made on its first call
	m      confModel
	reg    confRegistry
}

func newConfRegistryRun(c *cx, window time.Duration, lim lease.Limits) *confRegistryRun {
	return &confRegistryRun{c: c, window: window, lim: lim, views: map[string]lease.Store{}}
}

// acquire is instance id's acquire, reporting demand.
func (r *confRegistryRun) acquire(id string, demand float64) lease.Grant {
	c := r.c
	c.t.Helper()
	v := r.views[id]
	if v == nil {
		v = c.view(id, r.window)
		r.views[id] = v
	}
	g := c.acquire(v, "t", r.lim, 1, demand)
	x := r.m.see(us(g.ServerTime), r.lim.Rate, r.lim.Burst)
	n, share, granted := r.reg.acquire(id, r.window.Milliseconds(), us(g.ServerTime), r.lim, demand, x, min(int64(math.Floor(x)), 1))
	r.m.store(us(g.ServerTime), x-float64(granted), r.lim)
	c.checkGrant(fmt.Sprintf("%q (demand %v)", id, demand), g, granted, r.m.tk)
	if g.Instances != n || g.Share != share {
		c.t.Fatalf("%q: %d instances, share %v; the model: %d, %v", id, g.Instances, g.Share, n, share)
	}
	return g
}

// confRegistrySummary: acquires take the shares from the registry
// summary in the bucket, recomputed from every entry when an eighth of
// the window old (or for a new instance); an entry is rewritten only when
// it changes what a later call computes, or a quarter of a window on.
func confRegistrySummary(c *cx) {
	const window = 400 * time.Millisecond
	lim := lease.Limits{Rate: 40, Burst: 1000}
	r := newConfRegistryRun(c, window, lim)
	acq := r.acquire
	acq("a", 5)
	if g := acq("b", 30); g.Share != 30 || g.Instances != 2 {
		c.t.Fatalf("b registers next to a (5 and 30 of 40): share %v of %d, want 30 of 2", g.Share, g.Instances)
	}
	seenB := c.sp.state("t").Registry["b"]
	// a's demand rises: its entry is rewritten, but b's share follows the
	// summary until it is an eighth of a window old.
	acq("a", 30)
	g := acq("b", 30)
	if c.sp.still() && g.Share != 30 {
		c.t.Fatalf("b's share from a fresh summary: %v, want 30", g.Share)
	}
	if got := c.sp.state("t").Registry; !reflect.DeepEqual(got, r.reg.fields()) {
		c.t.Fatalf("registry %v;\nthe model's %v", got, r.reg.fields())
	}
	if c.sp.still() && c.sp.state("t").Registry["b"] != seenB {
		c.t.Fatalf("b's entry rewritten though nothing changed: %q, was %q", c.sp.state("t").Registry["b"], seenB)
	}
	c.sp.advance(window/8 + time.Millisecond)
	if g := acq("b", 30); g.Share != 20 {
		c.t.Fatalf("b's share from a summary recomputed (30 and 30 of 40): %v, want 20", g.Share)
	}
	if got := c.sp.state("t").Registry; !reflect.DeepEqual(got, r.reg.fields()) {
		c.t.Fatalf("registry %v;\nthe model's %v", got, r.reg.fields())
	}
}

// confHalfFull: a bucket exactly half full is not scarce: the credit cap
// applies below half only.
func confHalfFull(c *cx) {
	// A rate so low that no refill shows in a float64 next to 500: the
	// levels stay whole.
	lim := lease.Limits{Rate: 1e-12, Burst: 1000}
	plain := c.view("", 0)
	views := map[string]lease.Store{}
	var m confModel
	reg := &confRegistry{}
	acq := func(id string, want int64) lease.Grant {
		c.t.Helper()
		v := plain
		if id != "" {
			v = views[id]
		}
		g := c.acquire(v, "t", lim, want, 1)
		x := m.see(us(g.ServerTime), lim.Rate, lim.Burst)
		granted := min(int64(math.Floor(x)), want)
		if id != "" {
			_, _, granted = reg.acquire(id, confWindow.Milliseconds(), us(g.ServerTime), lim, 1, x, granted)
		}
		m.store(us(g.ServerTime), x-float64(granted), lim)
		c.checkGrant(fmt.Sprintf("%q asks %d", id, want), g, granted, m.tk)
		return g
	}
	for _, id := range []string{"a", "b", "c", "d"} {
		views[id] = c.view(id, confWindow)
		acq(id, 0) // demands of 1/s each, far above the rate: credits of 250
	}
	acq("", 500)
	if g := acq("a", 400); g.Granted != 400 {
		c.t.Fatalf("a asks 400 of a bucket exactly half full: %d, want 400 (not scarce)", g.Granted)
	}
	if g := acq("b", 400); g.Granted != 100 {
		c.t.Fatalf("b asks 400 of 100: %d", g.Granted)
	}
	if g := acq("c", 400); g.Granted != 0 {
		c.t.Fatalf("c asks 400 of an empty bucket: %d", g.Granted)
	}
}

// confCreditSpan: a starved instance's credit may accrue for half the
// caller's window, up to a quarter of the burst, when that is more than
// its share of the burst.
func confCreditSpan(c *cx) {
	lim := lease.Limits{Rate: 10, Burst: 100} // a fill time of 10 s
	windows := map[string]time.Duration{"a": time.Minute, "b": 24 * time.Second, "c": confWindow, "d": confWindow, "e": confWindow}
	plain := c.view("", 0)
	views := map[string]lease.Store{}
	var m confModel
	reg := &confRegistry{}
	acq := func(id string, want int64) lease.Grant {
		c.t.Helper()
		v, demand := plain, 0.0
		if id != "" {
			v, demand = views[id], 100
		}
		g := c.acquire(v, "t", lim, want, demand)
		x := m.see(us(g.ServerTime), lim.Rate, lim.Burst)
		granted := min(int64(math.Floor(x)), want)
		if id != "" {
			_, _, granted = reg.acquire(id, windows[id].Milliseconds(), us(g.ServerTime), lim, demand, x, granted)
		}
		m.store(us(g.ServerTime), x-float64(granted), lim)
		c.checkGrant(fmt.Sprintf("%q asks %d", id, want), g, granted, m.tk)
		return g
	}
	for _, id := range []string{"a", "b", "c", "d", "e"} {
		views[id] = c.view(id, windows[id])
		acq(id, 0) // demands of 100/s each: shares of 2/s once all are in
	}
	acq("", 51) // 49 left: scarce
	// b's share of the burst is 20 tokens; 12 s (half its window) of its
	// share, 24, is more, and under a quarter of the burst.
	if g := acq("b", 50); g.Granted != 24 {
		c.t.Fatalf("b asks 50 of 49 while scarce: %d, want its credit of 12 s at 2/s, 24", g.Granted)
	}
	// a's half window, 30 s at 2/s, is capped at a quarter of the burst.
	if g := acq("a", 50); g.Granted != 25 {
		c.t.Fatalf("a asks 50 of 25 while scarce: %d, want its credit of a quarter of the burst, 25", g.Granted)
	}
	if got := c.sp.state("t").Registry; !reflect.DeepEqual(got, reg.fields()) {
		c.t.Fatalf("registry %v;\nthe model's %v", got, reg.fields())
	}
}

// confInstanceWindow: an instance counts as active within the caller's
// window of its last acquire; an older entry is dropped.
func confInstanceWindow(c *cx) {
	const window = 150 * time.Millisecond
	r := newConfRegistryRun(c, window, lease.Limits{Rate: 1000, Burst: 100})
	acq := func(id string) lease.Grant { return r.acquire(id, 5) }
	gb := acq("b")
	acq("a")
	// A window later b still counts: it is dropped only once its last
	// acquire is more than a window old. Exactly at the edge with a clock
	// that stands still; on the others the model says.
	c.sp.advance(window)
	if g := acq("a"); c.sp.still() && (g.Instances != 2 || g.ServerTime.Sub(gb.ServerTime) != window) {
		c.t.Fatalf("exactly a window after b's acquire: %d instances %v after it, want 2 instances", g.Instances, g.ServerTime.Sub(gb.ServerTime))
	}
	c.sp.advance(50 * time.Millisecond)
	ga := acq("a")
	if ga.Instances != 1 {
		c.t.Fatalf("b's last acquire more than a window ago: %d instances, want 1", ga.Instances)
	}
	// The registry itself lives two windows after the last acquire; on a
	// Redis slowed down that long, it may be gone by the time it is read.
	got := c.sp.state("t").Registry
	if _, now := c.sp.pttl("t", ":i"); got == nil && now.Sub(ga.ServerTime) > 2*window {
		c.t.Logf("the registry expired before it was read, %v after the acquire", now.Sub(ga.ServerTime))
	} else if !reflect.DeepEqual(got, r.reg.fields()) || len(got) != 1 {
		c.t.Fatalf("registry %v;\nthe model's %v (a alone)", got, r.reg.fields())
	}
	if g := acq("b"); g.Instances != 2 && g.ServerTime.Sub(ga.ServerTime) <= window {
		c.t.Fatalf("b back within a window of a's acquire: %d instances, want 2", g.Instances)
	}
}

// confRegistryJoin: a new instance whose demand, with those the summary
// counts, stays within the rate joins the summary without reading the
// other entries: one instance more, its demand added, the summary's time
// kept. It counts what the summary counts: an entry gone stale since the
// summary was computed still counts, until a recompute drops it. A new
// instance whose demand takes the total past the rate recomputes.
func confRegistryJoin(c *cx) {
	const window = 800 * time.Millisecond
	r := newConfRegistryRun(c, window, lease.Limits{Rate: 100, Burst: 100})
	acq := r.acquire
	summaryAt := func() string {
		c.t.Helper()
		at, _, _ := strings.Cut(c.sp.state("t").Bucket["rg"], ":")
		return at
	}
	acq("a", 10)
	first := summaryAt()
	if g := acq("b", 10); g.Instances != 2 || summaryAt() != first {
		c.t.Fatalf("b's first acquire: %d instances, summary of %s; want 2, b joined the summary of %s", g.Instances, summaryAt(), first)
	}
	// b's summary is older than an eighth of the window: b recomputes,
	// counting a, whose entry goes stale before c joins.
	c.sp.advance(window * 19 / 20)
	acq("b", 10)
	c.sp.advance(window / 10)
	if g := acq("c", 10); c.sp.still() && g.Instances != 3 {
		c.t.Fatalf("c joined a summary that counts a: %d instances, want 3", g.Instances)
	}
	// The summary's 30 and d's 90 pass the rate: d recomputes, a, stale,
	// is dropped, and d's share is what b and c leave.
	if g := acq("d", 90); c.sp.still() && (g.Instances != 3 || g.Share != 80) {
		c.t.Fatalf("d, past the rate: %d instances, share %v; want 3 (a dropped), 80", g.Instances, g.Share)
	}
	if c.sp.still() {
		if got := c.sp.state("t").Registry; !reflect.DeepEqual(got, r.reg.fields()) {
			c.t.Fatalf("registry %v;\nthe model's %v", got, r.reg.fields())
		}
	}
}

// confRegistryNeverShortened: an acquire that recomputes the registry
// summary keeps the registry two of the caller's windows, but never less
// than an earlier acquire kept it: beside a long window's entries, a short
// window's recompute leaves the long window's TTL (it cut it to its own,
// and the hash expired with entries the long window still counted). A
// registry emptied of stale entries by a caller that had none is a new
// hash, kept for the caller's two windows alone.
func confRegistryNeverShortened(c *cx) {
	const long, short = 2 * time.Second, 40 * time.Millisecond
	l, s := c.view("long", long), c.view("short", short)
	lim := lease.Limits{Rate: 1000, Burst: 100}
	gl := c.acquire(l, "t", lim, 1, 5)
	c.checkTTL("t", ":i", gl.ServerTime, 2*long.Milliseconds())
	if g := c.acquire(s, "t", lim, 1, 5); g.Instances != 2 {
		c.t.Fatalf("the short window's first acquire counted %d instances, want 2", g.Instances)
	}
	c.checkTTL("t", ":i", gl.ServerTime, 2*long.Milliseconds())

	c.acquire(l, "u", lim, 1, 5)
	c.sp.advance(2 * short)
	gs := c.acquire(s, "u", lim, 1, 5)
	if gs.Instances != 1 {
		c.t.Fatalf("the short window's acquire two of its windows after the long one's: %d instances, want 1", gs.Instances)
	}
	if got := c.sp.state("u").Registry; len(got) != 1 || got["short"] == "" {
		c.t.Fatalf("registry %v, want the short window's entry alone", got)
	}
	c.checkTTL("u", ":i", gs.ServerTime, 2*short.Milliseconds())
}

// checkTTL fails unless the key of tenant (suffix) lives want ms from the
// store's time at, or a little less by the time it is read.
func (c *cx) checkTTL(tenant, suffix string, at time.Time, want int64) {
	c.t.Helper()
	ms, now := c.sp.pttl(tenant, suffix)
	if ms == -2 && want >= 0 && now.Sub(at) > time.Duration(want)*time.Millisecond {
		// A Redis slowed down for longer than the TTL: nothing to check.
		c.t.Logf("PTTL of %q%s: gone, %v after the write", tenant, suffix, now.Sub(at))
		return
	}
	if want < 0 {
		if ms != want {
			c.t.Fatalf("PTTL of %q%s: %d, want %d", tenant, suffix, ms, want)
		}
		return
	}
	// The key's expiry counts from the store's clock in whole milliseconds
	// at the write, so it has lost at most the time since, rounded up.
	// Redis counts from its clock at the PEXPIRE (since 7.2 the time the
	// script started), which may be in the millisecond before the TIME the
	// call reported: one more, unless the clock stands still.
	slack := int64(math.Ceil(float64(now.Sub(at)) / float64(time.Millisecond)))
	if !c.sp.still() {
		slack++
	}
	if ms > want || ms < want-slack {
		c.t.Fatalf("PTTL of %q%s: %d ms, %v after the write; want %d minus at most %d", tenant, suffix, ms, now.Sub(at), want, slack)
	}
}

// confExpiry: every write keeps the bucket until it would be full again,
// plus a second (for ever when that is beyond ~31,700 years), the registry
// for two windows and the release ids for lease.ReleaseDedupWindow; an
// expired bucket is a full one with an unknown past, and a release into
// it changes nothing.
func confExpiry(c *cx) {
	const window = 100 * time.Millisecond
	v := c.view("a", window)
	lim := lease.Limits{Rate: 1000, Burst: 5}
	var m confModel
	ttl := func(tokens float64) int64 { return int64(math.Ceil((float64(lim.Burst)-tokens)/lim.Rate*1000)) + 1000 }
	g := c.acquire(v, "t", lim, 5, 1)
	m.acquire(us(g.ServerTime), lim, 5)
	c.checkTTL("t", "", g.ServerTime, ttl(g.Tokens))
	c.checkTTL("t", ":i", g.ServerTime, 2*window.Milliseconds())
	r := c.release(v, "t", lim, 2, time.Second, g.ID())
	credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, 2, time.Second, g.ID())
	c.checkReturn("2 back", r, credit, tokens)
	c.checkTTL("t", "", r.ServerTime, ttl(r.Tokens))
	c.checkTTL("t", ":r", r.ServerTime, lease.ReleaseDedupWindow.Milliseconds())

	slow := lease.Limits{Rate: 1e-6, Burst: 1_000_000}
	c.acquire(v, "slow", slow, 1_000_000, 0)
	c.checkTTL("slow", "", time.Time{}, -1)

	if c.sp.still() {
		// To the millisecond: a key lives while the clock is at its
		// expiry, and is gone a millisecond later.
		ms, _ := c.sp.pttl("t", "")
		c.sp.advance(time.Duration(ms) * time.Millisecond)
		if c.sp.state("t").Bucket == nil {
			c.t.Fatal("the bucket is gone at its expiry, want it gone only after")
		}
		c.sp.advance(time.Millisecond)
	} else {
		c.sp.advance(1200 * time.Millisecond)
	}
	m.forget()
	st := c.sp.state("t")
	if st.Bucket != nil || st.Registry != nil || st.Releases == nil {
		c.t.Fatalf("after the bucket's expiry: %+v; want the bucket and the registry gone, the release ids kept", st)
	}
	r = c.release(v, "t", lim, 3, time.Second, g.ID())
	if r.Credited != 0 || r.Tokens != 5 {
		c.t.Fatalf("a release into an expired bucket: %+v, want 0 credited and 5 tokens", r)
	}
	if after := c.sp.state("t"); !reflect.DeepEqual(after, st) {
		c.t.Fatalf("a release into an expired bucket wrote %+v", after)
	}
	g = c.acquire(v, "t", lim, 1, 1)
	wg, wt := m.acquire(us(g.ServerTime), lim, 1)
	c.checkGrant("a new bucket", g, wg, wt)
	c.checkStored("t", &m)
	if c.sp.state("slow").Bucket == nil {
		c.t.Fatal("the bucket kept for ever is gone")
	}
}

// confReleaseMissing: a release into a bucket that was never used (a full
// one) credits nothing, reports Burst, and writes nothing.
func confReleaseMissing(c *cx) {
	v := c.view("a", confWindow)
	lim := lease.Limits{Rate: 1, Burst: 7}
	r := c.release(v, "t", lim, 5, 0, 0)
	if r.Credited != 0 || r.Tokens != 7 || r.ServerTime.IsZero() {
		c.t.Fatalf("a release into a missing bucket: %+v; want 0 credited, 7 tokens, a time", r)
	}
	if st := c.sp.state("t"); !reflect.DeepEqual(st, confState{}) {
		c.t.Fatalf("a release into a missing bucket wrote %+v", st)
	}
}

// confReleaseIDs: a view with an instance id numbers its releases, and a
// release id is applied once: two views with one id (a mistake, but the
// semantics must agree) share the numbers, so the second one's first
// release changes nothing. Views without an id are never deduplicated.
func confReleaseIDs(c *cx) {
	one, two := c.view("dup", confWindow), c.view("dup", confWindow)
	lim := lease.Limits{Rate: 1e-3, Burst: 100}
	var m confModel
	acq := func(v lease.Store, want int64) lease.Grant {
		c.t.Helper()
		g := c.acquire(v, "t", lim, want, 0)
		x := m.see(us(g.ServerTime), lim.Rate, lim.Burst)
		m.store(us(g.ServerTime), x-float64(want), lim)
		return g
	}
	acq(one, 50)
	g := acq(one, 30)
	rel := func(v lease.Store, amount int64) lease.Return {
		c.t.Helper()
		r := c.release(v, "t", lim, amount, time.Hour, g.ID())
		return r
	}
	r := rel(one, 10) // dup:1
	credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, 10, time.Hour, g.ID())
	c.checkReturn("dup:1", r, credit, tokens)
	before := c.sp.state("t")
	r = rel(two, 10) // dup:1 again
	if r.Credited != 0 || r.Tokens != m.level(us(r.ServerTime), lim.Rate, lim.Burst) {
		c.t.Fatalf("a release id applied before: %+v; want 0 credited and the bucket's level", r)
	}
	if after := c.sp.state("t"); !reflect.DeepEqual(after, before) {
		c.t.Fatalf("a release id applied before changed the tenant:\n%+v\n%+v", before, after)
	}
	r = rel(two, 10) // dup:2
	credit, tokens, _ = m.release(us(r.ServerTime), us(r.ServerTime), lim, 10, time.Hour, g.ID())
	c.checkReturn("dup:2", r, credit, tokens)
	if ids := c.sp.state("t").Releases; len(ids) != 2 || ids["dup:1"] == 0 || ids["dup:2"] == 0 {
		c.t.Fatalf("release ids %v, want dup:1 and dup:2", ids)
	}
	c.checkStored("t", &m)

	p, q := c.view("", 0), c.view("", 0)
	for _, v := range []lease.Store{p, q} {
		r := c.release(v, "t", lim, 1, time.Hour, g.ID())
		credit, tokens, _ := m.release(us(r.ServerTime), us(r.ServerTime), lim, 1, time.Hour, g.ID())
		c.checkReturn("a release without id", r, credit, tokens)
		if r.Credited != 1 {
			c.t.Fatalf("a release without id: credited %v, want 1", r.Credited)
		}
	}
	c.checkStored("t", &m)
}

// confTenantsApart: any byte string is a tenant of its own.
func confTenantsApart(c *cx) {
	v := c.view("", 0)
	lim := lease.Limits{Rate: 1e-3, Burst: 3}
	long := strings.Repeat("x", 200)
	tenants := []string{"", "{", "}", "a{b}c", "t", "t:i", "t:q", "ü\x00\n", long, long + "y", strings.Repeat("x", 128)}
	for round := range 2 {
		for _, tn := range tenants {
			g := c.acquire(v, tn, lim, 1, 0)
			if g.Granted != 1 || math.Abs(g.Tokens-float64(2-round)) > 1e-3 {
				c.t.Fatalf("round %d, tenant %q: %+v; want 1 granted and %d left", round, tn, g, 2-round)
			}
		}
	}
}

// confBadArguments: every invalid argument fails with an error wrapping
// lease.ErrBadRequest and changes nothing.
func confBadArguments(c *cx) {
	v := c.view("a", confWindow)
	// Slow refills: no bucket may expire (full, plus a second) while the
	// case runs, however slow Redis is.
	lim := lease.Limits{Rate: 0.01, Burst: 100}
	// Something of every kind to leave untouched.
	g := c.acquire(v, "t", lim, 60, 5)
	c.release(v, "t", lim, 10, time.Hour, g.ID())
	if _, err := v.SetOverride(c.ctx, "o", lim, lease.Override{Rate: 0.02, Burst: 50}); err != nil {
		c.t.Fatal(err)
	}
	c.acquire(v, "o", lim, 30, 0)
	tenants := []string{"t", "o"}

	badLimits := []lease.Limits{
		{Rate: math.NaN(), Burst: 10}, {Rate: math.Inf(1), Burst: 10}, {Rate: math.Inf(-1), Burst: 10},
		{Rate: 0, Burst: 10}, {Rate: -1, Burst: 10}, {Rate: 2 * lease.MaxRate, Burst: 10},
		{Rate: 1, Burst: 0}, {Rate: 1, Burst: -1}, {Rate: 1, Burst: lease.MaxBurst + 1},
	}
	bad := func(what string, err error) {
		c.t.Helper()
		if !errors.Is(err, lease.ErrBadRequest) {
			c.t.Errorf("%s: %v, want an error wrapping lease.ErrBadRequest", what, err)
		}
	}
	for _, tn := range tenants {
		for _, l := range badLimits {
			c.unchanged(fmt.Sprintf("acquire with %+v", l), v, tenants, func() {
				res, err := v.AcquireMany(c.ctx, []lease.Request{{Tenant: tn, Limits: l, Want: 1}}, nil)
				if err != nil {
					c.t.Errorf("a batch of bad requests failed as a whole: %v", err)
				}
				bad(fmt.Sprintf("acquire with %+v", l), res[0].Err)
			})
			c.unchanged(fmt.Sprintf("release with %+v", l), v, tenants, func() {
				res := v.ReleaseMany(c.ctx, []lease.ReleaseRequest{{Tenant: tn, Limits: l, Amount: 1, Age: time.Second}})
				bad(fmt.Sprintf("release with %+v", l), res[0].Err)
			})
			c.unchanged(fmt.Sprintf("set quota on base %+v", l), v, tenants, func() {
				_, err := v.SetOverride(c.ctx, tn, l, lease.Override{Rate: 1, Burst: 1})
				bad(fmt.Sprintf("set quota on base %+v", l), err)
			})
			c.unchanged(fmt.Sprintf("set quota to %+v", l), v, tenants, func() {
				_, err := v.SetOverride(c.ctx, tn, lim, lease.Override{Rate: l.Rate, Burst: l.Burst})
				bad(fmt.Sprintf("set quota to %+v", l), err)
			})
			c.unchanged(fmt.Sprintf("delete quota on base %+v", l), v, tenants, func() {
				_, err := v.DeleteOverride(c.ctx, tn, l)
				bad(fmt.Sprintf("delete quota on base %+v", l), err)
			})
		}
		c.unchanged("want -1", v, tenants, func() {
			res, _ := v.AcquireMany(c.ctx, []lease.Request{{Tenant: tn, Limits: lim, Want: -1}}, nil)
			bad("want -1", res[0].Err)
		})
		c.unchanged("amount -1", v, tenants, func() {
			res := v.ReleaseMany(c.ctx, []lease.ReleaseRequest{{Tenant: tn, Limits: lim, Amount: -1}})
			bad("amount -1", res[0].Err)
		})
		c.unchanged("age -1ns", v, tenants, func() {
			res := v.ReleaseMany(c.ctx, []lease.ReleaseRequest{{Tenant: tn, Limits: lim, Amount: 1, Age: -1}})
			bad("age -1ns", res[0].Err)
		})
		for _, o := range []lease.Override{
			{Rate: 1, Burst: 1, MinLease: -1}, {Rate: 1, Burst: 1, MaxLease: -1}, {Rate: 1, Burst: 1, LeaseTTL: -1},
		} {
			c.unchanged(fmt.Sprintf("set quota to %+v", o), v, tenants, func() {
				_, err := v.SetOverride(c.ctx, tn, lim, o)
				bad(fmt.Sprintf("set quota to %+v", o), err)
			})
		}
	}
	// One bad request in a batch fails alone.
	c.unchanged("a bad request beside a good one", v, tenants, func() {
		res, err := v.AcquireMany(c.ctx, []lease.Request{
			{Tenant: "t", Limits: lim, Want: -5}, {Tenant: "other", Limits: lim, Want: 1},
		}, nil)
		if err != nil || res[1].Err != nil || res[1].Grant.Granted != 1 {
			c.t.Errorf("the good request beside a bad one: %+v, %v", res, err)
		}
		bad("want -5 in a batch", res[0].Err)
	})
	for _, w := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		if _, err := c.sp.newView("x", w); !errors.Is(err, lease.ErrBadRequest) {
			c.t.Errorf("window %v: %v, want an error wrapping lease.ErrBadRequest", w, err)
		}
	}
	if _, err := c.sp.newView("", 0); err != nil {
		c.t.Errorf("no instance, no window: %v", err)
	}
}

// confCanceled: a call whose context is done fails with the context's
// error, as a whole, and changes nothing.
func confCanceled(c *cx) {
	v := c.view("a", confWindow)
	lim := lease.Limits{Rate: 0.01, Burst: 100} // no expiry during the case
	g := c.acquire(v, "t", lim, 60, 5)
	c.release(v, "t", lim, 10, time.Hour, g.ID())
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	canceled := func(what string, err error) {
		c.t.Helper()
		if !errors.Is(err, context.Canceled) {
			c.t.Errorf("%s with a canceled context: %v, want an error wrapping context.Canceled", what, err)
		}
	}
	c.unchanged("calls with a canceled context", v, []string{"t"}, func() {
		res, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 1}, {Tenant: "u", Limits: lim, Want: 1}}, nil)
		canceled("AcquireMany", err)
		canceled("AcquireMany's request", res[0].Err)
		canceled("AcquireMany's request", res[1].Err)
		rel := v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 5, Age: time.Hour, Grant: g.ID()}})
		canceled("ReleaseMany", rel[0].Err)
		_, err = v.GetOverride(ctx, "t")
		canceled("GetOverride", err)
		_, err = v.SetOverride(ctx, "t", lim, lease.Override{Rate: 1, Burst: 1})
		canceled("SetOverride", err)
		_, err = v.DeleteOverride(ctx, "t", lim)
		canceled("DeleteOverride", err)
		_, err = v.QuotaVersion(ctx)
		canceled("QuotaVersion", err)
	})
	if st := c.sp.state("u"); !reflect.DeepEqual(st, confState{}) {
		c.t.Errorf("a canceled acquire wrote %+v", st)
	}
}

// checkReserving runs the model of an acquire of want by instance id
// (reporting demand) with a reservation of lms milliseconds, which Redis
// answered with g, on m and reg, and fails the case unless g is what the
// model grants, reserves and leaves.
func (c *cx) checkReserving(what string, g lease.Grant, m *confModel, reg *confRegistry, id string, lim lease.Limits, want int64, demand float64, lms int64) {
	c.t.Helper()
	at := us(g.ServerTime)
	clock := at - g.Wait.Microseconds()
	x := m.see(at, lim.Rate, lim.Burst)
	granted := min(int64(math.Floor(x)), want)
	_, share, granted := reg.acquire(id, confWindow.Milliseconds(), at, lim, demand, x, granted)
	left := x - float64(granted)
	r, pace, ts := reserve(at, clock, lim, want, granted, left, share, lms, reg.held)
	if r > 0 {
		left = math.Floor(left)
	}
	m.store(ts, left, lim)
	c.checkGrant(what, g, granted+r, left)
	if g.Reserved != r || g.Pace != pace || g.Share != share {
		c.t.Fatalf("%s: %+v; the model: %d reserved at %v (share %v)", what, g, r, pace, share)
	}
}

// confReservationsHeld: an instance held to its share by the credit rule
// (two instances, each asking 80/s of a rate of 100, the bucket under
// half full) reserves its share over the length even though the bucket
// could serve its want now; the whole tokens left stay in the bucket for
// the other instance, which takes them at once (the bucket frozen: no
// refill until ts), and an instance within its share does not reserve.
func confReservationsHeld(c *cx) {
	lim := lease.Limits{Rate: 100, Burst: 100}
	views := map[string]lease.Store{"a": c.view("a", confWindow), "b": c.view("b", confWindow)}
	var m confModel
	reg := &confRegistry{}
	acq := func(what, id string, want int64, demand float64) lease.Grant {
		c.t.Helper()
		res, err := views[id].AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: want, Demand: demand, Reserve: time.Second}}, nil)
		if err != nil || res[0].Err != nil {
			c.t.Fatalf("%s: %v, %+v", what, err, res)
		}
		g := res[0].Grant
		c.checkReserving(what, g, &m, reg, id, lim, want, demand, 1000)
		c.checkStored("t", &m)
		return g
	}
	// A full bucket serves whatever is asked: no credit rule, no
	// reservation.
	if g := acq("full bucket", "a", 60, 80); g.Reserved != 0 {
		c.t.Fatalf("full bucket: %+v, want no reservation", g)
	}
	// b is held to its share of 50/s: it gets its want now and reserves
	// 50 tokens over the second; the ~35 whole tokens left stay.
	g := acq("held", "b", 5, 80)
	if g.Reserved != 50 || g.Pace != 50 || g.Tokens < 30 {
		c.t.Fatalf("held: %+v, want 50 reserved at 50/s and the whole tokens left in the bucket", g)
	}
	// a takes from them at once, within its credit.
	if g := acq("the tokens kept", "a", 10, 80); g.Granted < 10 || g.Wait <= 0 {
		c.t.Fatalf("the tokens kept: %+v, want 10 now from a frozen bucket", g)
	}
	// Within its share (demand 20 of a share 20), an instance does not
	// reserve while the bucket can serve it.
	if g := acq("within its share", "b", 1, 20); g.Reserved != 0 {
		c.t.Fatalf("within its share: %+v, want no reservation", g)
	}
}

// confReservations: a reservation's size (capped by the want, by
// share over its length, capped by the room up to ReserveAhead past the
// clock), the frozen bucket it leaves
// (read by later acquires: no tokens until ts, then the refill), its TTL,
// a release into it, and an invalid horizon.
func confReservations(c *cx) {
	lim := lease.Limits{Rate: 100, Burst: 10}
	v := c.view("a", confWindow)
	var m confModel
	reg := &confRegistry{}
	acq := func(what string, want int64, h time.Duration) lease.Grant {
		c.t.Helper()
		res, err := v.AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: want, Demand: 40, Reserve: h}}, nil)
		if err != nil || res[0].Err != nil {
			c.t.Fatalf("%s: %v, %+v", what, err, res)
		}
		g := res[0].Grant
		if at, clock := us(g.ServerTime), us(g.ServerTime.Add(-g.Wait)); g.Wait < 0 || m.live && at != max(clock, m.ts+1) {
			c.t.Fatalf("%s: bucket time %d, wait %v; the bucket's ts was %d", what, at, g.Wait, m.ts)
		}
		hms := int64(h / time.Millisecond)
		if h%time.Millisecond != 0 {
			hms++
		}
		c.checkReserving(what, g, &m, reg, "a", lim, want, 40, hms)
		return g
	}
	acq("drain", 10, 100*time.Millisecond)
	// share*H caps: 40/s for 100 ms, of 10 tokens of room.
	g := acq("share cap", 100, 100*time.Millisecond)
	if g.Reserved != 4 || g.Pace != 40 {
		c.t.Fatalf("share cap: %+v, want 4 reserved at 40/s", g)
	}
	clock := g.ServerTime.Add(-g.Wait)
	c.checkStored("t", &m)
	// The key lives until the frozen bucket would be full, counted from
	// the clock.
	ttl := int64(math.Ceil(float64(m.ts-us(clock))/1000+(float64(lim.Burst)-m.tk)/lim.Rate*1000)) + 1000
	c.checkTTL("t", "", clock, ttl)
	// The share over the length, whatever the want; the bucket is frozen:
	// the call's time is ts + 1 µs.
	g = acq("length on a frozen bucket", 3, 500*time.Millisecond)
	if g.Reserved != 20 { // (frozen ~100 ms ahead: a slow call may come after, with no wait)
		c.t.Fatalf("length on a frozen bucket: %+v, want 20 reserved after a wait", g)
	}
	// The room caps (the refill up to ReserveAhead past the clock; the
	// model checks how much), and then there is none.
	g = acq("room cap", 100, 10*time.Second)
	if g.Reserved == 0 || g.Reserved >= 400 {
		c.t.Fatalf("room cap: %+v, want what the room holds", g)
	}
	c.checkStored("t", &m)
	// No room left but what the clock's advance since opened (the model
	// checks it exactly; on a busy machine the calls are milliseconds
	// apart, a token at this rate every 10 ms).
	g2 := acq("no room", 100, 100*time.Millisecond)
	since := g2.ServerTime.Add(-g2.Wait).Sub(g.ServerTime.Add(-g.Wait)).Seconds()
	if float64(g2.Granted) > since*lim.Rate+1 {
		c.t.Fatalf("no room: %+v, %.1f ms after the room was full: want at most the refill since", g2, since*1000)
	}
	// A release into the frozen bucket keeps ts: the credit goes into tk.
	r := c.release(v, "t", lim, g.Reserved, time.Second, g.ID())
	credit, tokens, _ := m.release(us(r.ServerTime), us(clock), lim, g.Reserved, time.Second, g.ID())
	c.checkReturn("release into a frozen bucket", r, credit, tokens)
	if r.ServerTime.UnixMicro() <= us(clock) {
		c.t.Fatalf("release: bucket time %v, want ahead of the clock %v", r.ServerTime, clock)
	}
	c.checkStored("t", &m)
	// Past ts, the bucket refills again.
	c.sp.advance(lease.ReserveAhead + 100*time.Millisecond)
	g = acq("after ts", 0, 0)
	if g.Wait != 0 || g.Tokens <= m.tk-1e-9 && g.Tokens == 0 {
		c.t.Fatalf("after ts: %+v, want a refill and no wait", g)
	}
	c.checkStored("t", &m)
	// An invalid horizon touches nothing.
	c.unchanged("a negative horizon", v, []string{"t"}, func() {
		res, _ := v.AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 1, Reserve: -time.Millisecond}}, nil)
		if !errors.Is(res[0].Err, lease.ErrBadRequest) {
			c.t.Errorf("a negative horizon: %v, want ErrBadRequest", res[0].Err)
		}
	})
}

// confShares: a bucket with rate shares recorded (field sh, which this
// release honours and a later one writes) refills at the rate less the
// shares in force until their epochs end, the booked part for an epoch
// more, then at the whole rate (lease.RefillShares); every call writes the
// record as it moved on, and drops it once nothing is in force; a release
// refills the same way before it credits; a reservation is not made while
// shares are in force.
func confShares(c *cx) {
	v := c.view("a", confWindow)
	lim := lease.Limits{Rate: 1000, Burst: 1000}
	g := c.acquire(v, "t", lim, 1000, 0)
	at, tokens := us(g.ServerTime), g.Tokens
	const period = 150_000 // µs
	sh := lease.Shares{Epoch: (at - 40_000) / period, Committed: 600, Booked: 250, Period: period, Phase: 40_000}
	c.sp.setShares("t", sh)
	for step := 0; sh.InForce(); step++ {
		if step > 10 {
			c.t.Fatalf("shares %+v still in force after %d steps of 40 ms", sh, step)
		}
		c.sp.advance(40 * time.Millisecond)
		var got float64
		var now int64
		what := fmt.Sprintf("step %d", step)
		switch step % 3 {
		case 1:
			r := c.release(v, "t", lim, 1, time.Hour, 0)
			now = us(r.ServerTime)
			level, left := lease.RefillShares(tokens, at, now, lim.Rate, lim.Burst, sh)
			if want := min(level+r.Credited, float64(lim.Burst)); r.Tokens != want {
				c.t.Fatalf("%s: release left %v, credited %v; the rule: %v before, %v after", what, r.Tokens, r.Credited, level, want)
			}
			got, sh = r.Tokens, left
		default:
			res, err := v.AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 5, Demand: 5000, Reserve: time.Second}}, nil)
			if err != nil || res[0].Err != nil {
				c.t.Fatalf("%s: acquire: %v %+v", what, err, res)
			}
			g := res[0].Grant
			now = us(g.ServerTime)
			level, left := lease.RefillShares(tokens, at, now, lim.Rate, lim.Burst, sh)
			if want := min(5, math.Floor(level)); float64(g.Granted) != want && left.InForce() {
				c.t.Fatalf("%s: granted %d of %v, want %v and no reservation (%+v)", what, g.Granted, level, want, g)
			}
			if left.InForce() && (g.Reserved != 0 || g.Tokens != level-float64(g.Granted)) {
				c.t.Fatalf("%s: %+v; the rule: %v before the grant, no reservation", what, g, level)
			}
			if g.Reserved != 0 { // no share in force any more: the tokens left are the reservation's
				return
			}
			got, sh = g.Tokens, left
		}
		stored := c.sp.state("t").Bucket["sh"]
		if (sh.InForce() && stored != sh.String()) || (!sh.InForce() && stored != "") {
			c.t.Fatalf("%s: sh %q, the rule leaves %+v", what, stored, sh)
		}
		// The key is kept until the bucket is full after the shares end,
		// plus a second, counted from the call (no bucket here is frozen).
		until, full := lease.Settled(got, now, lim.Rate, lim.Burst, sh)
		ttl := int64(math.Ceil(float64(until-now)/1000+(float64(lim.Burst)-full)/lim.Rate*1000)) + 1000
		ms, then := c.sp.pttl("t", "")
		if lo := ttl - (us(then)-now)/1000 - 2; ms < lo || ms > ttl+1 {
			c.t.Fatalf("%s: PTTL %d ms, the rule %d ms from the call, %v before the read", what, ms, ttl, then.Sub(time.UnixMicro(now)))
		}
		at, tokens = now, got
	}
}

// confShareInstances: an ask that names the instances it expects
// (lease.ShareTerms.Instances) is granted at most an even part of what
// shares may take, Rate*(1 - Headroom)/Instances, however few instances
// have registered; an ask that names none gets min(its max-min fair
// share, what the shares in force leave).
func confShareInstances(c *cx) {
	lim := lease.Limits{Rate: 100, Burst: 100}
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: 500 * time.Millisecond, Headroom: 0.1}
	ask := func(id string, instances int) float64 {
		c.t.Helper()
		t := terms
		t.Instances = instances
		res, err := c.view(id, confWindow).AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 0, Demand: 60,
			Share: lease.ShareAsk, ShareTerms: t}}, nil)
		if err != nil || res[0].Err != nil {
			c.t.Fatalf("%s: %v %+v", id, err, res)
		}
		return res[0].Grant.RateShare.Rate
	}
	// a alone: its fair share is its demand, 60; an even part among 4 of
	// the 90 that shares may take is 22.5.
	if got := ask("a", 4); got != 22.5 {
		c.t.Fatalf("a's share among 4 expected: %v, want 22.5", got)
	}
	if got := ask("b", 4); got != 22.5 {
		c.t.Fatalf("b's share among 4 expected: %v, want 22.5", got)
	}
	// c names none: its fair share among three demands of 60 is 100/3,
	// and 45 is left.
	if got := ask("c", 0); got != 100.0/3 {
		c.t.Fatalf("c's share naming no instances: %v, want 100/3", got)
	}
	// 1 names none either.
	if got := ask("a", 1); got != 100.0/3 {
		c.t.Fatalf("a's share asked again among 1: %v, want 100/3", got)
	}
}

// confShareGrants: instances ask for rate shares (lease.ShareAsk) and end
// them (lease.ShareEnd). Each grant is min(the caller's fair share, what
// the shares in force leave of rate*(1 - headroom)), until the end of the
// epoch (or of the next one in its second half), and the bucket records
// it and refills at the rate less it; an instance's share is replaced
// when it asks again, ended only by its own From, and gone with its
// epoch. Every reply and record is held to lease.GrantShare, Drop and
// RefillShares from the state before the call; the values that do not
// depend on the clock are fixed too.
func confShareGrants(c *cx) {
	lim := lease.Limits{Rate: 100, Burst: 100}
	terms := lease.ShareTerms{Period: time.Second, Hold: 500 * time.Millisecond, Headroom: 0.1}
	views := map[string]lease.Store{"a": c.view("a", confWindow), "b": c.view("b", confWindow), "c": c.view("c", confWindow)}
	held := map[string]lease.RateShare{}
	var rec lease.Shares
	var tk float64
	var at int64
	call := func(id string, op lease.ShareOp, from time.Time, want int64) lease.Grant {
		c.t.Helper()
		res, err := views[id].AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: want, Demand: 60,
			Share: op, ShareTerms: terms, ShareFrom: from}}, nil)
		if err != nil || res[0].Err != nil {
			c.t.Fatalf("%s: %v %+v", id, err, res)
		}
		g := res[0].Grant
		now := us(g.ServerTime)
		level, sh := float64(lim.Burst), lease.Shares{}
		if at != 0 {
			level, sh = lease.RefillShares(tk, at, now, lim.Rate, lim.Burst, rec)
		}
		mine := held[id]
		if !sh.Holds(mine, time.UnixMicro(now)) {
			mine = lease.RateShare{}
		}
		if mine.Held() && (op == lease.ShareAsk || op == lease.ShareEnd && mine.From.Equal(from)) {
			sh, mine = sh.Drop(mine), lease.RateShare{}
		}
		if op == lease.ShareAsk {
			sh, mine = lease.GrantShare(sh, now, terms, lim.Rate, g.Share)
		}
		if g.RateShare != mine || g.Tokens != level-float64(g.Granted) {
			c.t.Fatalf("%s op %d: share %+v, %v tokens; the rules: %+v, %v", id, op, g.RateShare, g.Tokens, mine, level-float64(g.Granted))
		}
		stored := c.sp.state("t").Bucket["sh"]
		if (sh.InForce() && stored != sh.String()) || (!sh.InForce() && stored != "") {
			c.t.Fatalf("%s op %d: sh %q, the rules %+v", id, op, stored, sh)
		}
		if e := c.sp.state("t").Registry[id]; !strings.HasSuffix(e, ":"+mine.String()) || strings.Count(e, ":") != 3 {
			c.t.Fatalf("%s: entry %q, want its share %q as the fourth field", id, e, mine.String())
		}
		held[id], rec, tk, at = mine, sh, g.Tokens, now
		return g
	}
	// The epochs are put so that the first call is 30 % into one: a's
	// share is asked in its first half, b's 300 ms later in its second,
	// booked into the next epoch (unless the calls take 200 ms: the
	// rules still hold).
	first := us(call("a", lease.ShareKeep, time.Time{}, 0).ServerTime)
	period := terms.Period.Microseconds()
	terms.Phase = time.Duration(((first-period*30/100)%period+period)%period) * time.Microsecond
	call("b", lease.ShareKeep, time.Time{}, 0)
	// a's fair share of 100 among demands of 60 and 60 is 50, all of
	// which the 90 grantable leave; b then gets the 40 left.
	if g := call("a", lease.ShareAsk, time.Time{}, 0); g.RateShare.Rate != 50 || !g.RateShare.From.Equal(g.ServerTime) {
		c.t.Fatalf("a's share %+v, want 50 from the call", g.RateShare)
	}
	c.sp.advance(300 * time.Millisecond)
	if g := call("b", lease.ShareAsk, time.Time{}, 0); g.RateShare.Rate != 40 {
		c.t.Fatalf("b's share %+v, want the 40 left", g.RateShare)
	}
	if rec.Booked != 40 {
		c.t.Logf("b's share not booked into the next epoch: %+v", rec)
	}
	// c's fair share is a third, and nothing is left: none.
	if g := call("c", lease.ShareAsk, time.Time{}, 0); g.RateShare.Held() {
		c.t.Fatalf("c's share %+v, want none", g.RateShare)
	}
	// Tokens are still taken from what the bucket holds.
	call("c", lease.ShareKeep, time.Time{}, 5)
	// An end naming another share ends nothing; b's own ends it (and its
	// booked part); again, nothing; then a's.
	call("a", lease.ShareEnd, held["a"].From.Add(time.Microsecond), 0)
	if !held["a"].Held() {
		c.t.Fatalf("an end of another From ended a's share")
	}
	bFrom := held["b"].From
	call("b", lease.ShareEnd, bFrom, 0)
	call("b", lease.ShareEnd, bFrom, 0)
	call("a", lease.ShareEnd, held["a"].From, 0)
	// Asked again: granted again (booked, in the epoch's second half).
	call("b", lease.ShareAsk, time.Time{}, 0)
	call("a", lease.ShareAsk, time.Time{}, 0)
	call("a", lease.ShareAsk, time.Time{}, 0) // replaced
	if !rec.InForce() || rec.Booked == 0 {
		c.t.Logf("no share booked into the next epoch: %+v", rec)
	}
	// Past the last share's end every share has ended, and the record is
	// gone.
	var last time.Time
	for _, h := range held {
		if h.Until.After(last) {
			last = h.Until
		}
	}
	c.sp.advance(last.Sub(time.UnixMicro(at)) + 10*time.Millisecond)
	for _, id := range []string{"a", "b", "c"} {
		if g := call(id, lease.ShareKeep, time.Time{}, 0); g.RateShare.Held() {
			c.t.Fatalf("%s holds %+v past the last share's end", id, g.RateShare)
		}
	}
	if rec.InForce() {
		c.t.Fatalf("record %+v past the last share's end", rec)
	}
}

// confShareOutlivesWindow: an instance holding a rate share makes no call
// between its renewals, which may be further apart than the registry
// window of the instance that recomputes the summary (each caller sends
// its own: a Limiter without rate shares sends a shorter one than those
// with). The holder's entry is kept while its share is in force, however
// old: another instance's recompute keeps it (without counting it, as an
// instance a window without a call is not counted), its next reply still
// reports the share (the call recomputes the summary, counting itself),
// and its renewal replaces the share (the record then holds the new one
// alone, not both). The registry is kept until the record's shares end
// when that is after two windows. Ended, the share no longer keeps the
// entry: a window later a recompute drops it.
func confShareOutlivesWindow(c *cx) {
	const window = 100 * time.Millisecond
	lim := lease.Limits{Rate: 100, Burst: 100}
	terms := lease.ShareTerms{Period: 2 * time.Second, Hold: 500 * time.Millisecond}
	views := map[string]lease.Store{"a": c.view("a", window), "b": c.view("b", window)}
	call := func(id string, op lease.ShareOp, from time.Time) lease.Grant {
		c.t.Helper()
		res, err := views[id].AcquireMany(c.ctx, []lease.Request{{Tenant: "t", Limits: lim, Demand: 60,
			Share: op, ShareTerms: terms, ShareFrom: from}}, nil)
		if err != nil || res[0].Err != nil {
			c.t.Fatalf("%s: %v %+v", id, err, res)
		}
		return res[0].Grant
	}
	// registryKept fails unless the registry lives until the record's
	// shares end, from the call that kept it (g).
	registryKept := func(what string, g lease.Grant) {
		c.t.Helper()
		sh, err := lease.ParseShares(c.sp.state("t").Bucket["sh"])
		if err != nil || !sh.InForce() {
			c.t.Fatalf("%s: record %+v (%v), want shares in force", what, sh, err)
		}
		want := int64(math.Ceil(float64(sh.Until()-us(g.ServerTime)) / 1000))
		if want <= 2*window.Milliseconds() {
			c.t.Fatalf("%s: the shares end %d ms after the call, want more than two windows", what, want)
		}
		c.checkTTL("t", ":i", g.ServerTime, want)
	}
	// The epochs are put so that a's ask is 10 % into one: its share runs
	// for most of the period, many windows.
	first := us(call("a", lease.ShareKeep, time.Time{}).ServerTime)
	period := terms.Period.Microseconds()
	terms.Phase = time.Duration(((first-period/10)%period+period)%period) * time.Microsecond
	call("b", lease.ShareKeep, time.Time{})
	ga := call("a", lease.ShareAsk, time.Time{})
	if ga.RateShare.Rate != 50 || ga.Instances != 2 {
		c.t.Fatalf("a's ask: %+v, want a share of 50 beside b", ga)
	}
	registryKept("a's ask", ga)
	// Three windows without a call from a: b's own entry is stale too, so
	// b recomputes the summary, and a's entry, its share in force, stays,
	// not counted.
	c.sp.advance(3 * window)
	gb := call("b", lease.ShareKeep, time.Time{})
	if gb.Instances != 1 {
		c.t.Fatalf("b, 3 windows after a's last call: %d instances, want 1 (a not counted)", gb.Instances)
	}
	if _, ok := c.sp.state("t").Registry["a"]; !ok {
		c.t.Fatalf("a's entry dropped while its share is in force: %v", c.sp.state("t").Registry)
	}
	registryKept("b's recompute", gb)
	if g := call("a", lease.ShareKeep, time.Time{}); g.RateShare != ga.RateShare || g.Instances != 2 {
		c.t.Fatalf("a, 3 windows after its ask: %+v, want its share %+v and 2 instances", g, ga.RateShare)
	}
	// The renewal replaces the share: the record commits the new one only.
	g2 := call("a", lease.ShareAsk, time.Time{})
	if sh, err := lease.ParseShares(c.sp.state("t").Bucket["sh"]); err != nil || sh.Committed != g2.RateShare.Rate {
		c.t.Fatalf("after a's renewal %+v: record %+v (%v), want the new share's %v committed alone", g2.RateShare, sh, err, g2.RateShare.Rate)
	}
	// Ended, the share keeps the entry no more: a window after a's last
	// call, b's recompute drops it.
	call("a", lease.ShareEnd, g2.RateShare.From)
	c.sp.advance(window + 10*time.Millisecond)
	if g := call("b", lease.ShareKeep, time.Time{}); g.Instances != 1 {
		c.t.Fatalf("b, a window after a ended its share: %d instances, want 1", g.Instances)
	}
}

// confInstanceRoster: CountInstances counts each instance once however
// often it counts, each for its own window since its last count
// (lease.RosterKey), so a short window drops out of a long one's count and
// not the other way round; LeaveRoster takes an instance out at once; a
// view without an instance id is refused.
// Only the short window's view, sh, counts where time is the subject:
// a and b have windows no stall of a loaded machine outlasts.
func confInstanceRoster(c *cx) {
	const short = 150 * time.Millisecond
	a, b, sh, plain := c.view("a", confWindow), c.view("b", confWindow), c.view("sh", short), c.view("", 0)
	count := func(v lease.Store, what string, want int) {
		c.t.Helper()
		n, err := v.(lease.InstanceCounter).CountInstances(c.ctx)
		if err != nil || n != want {
			c.t.Fatalf("%s: CountInstances = %d, %v; want %d", what, n, err, want)
		}
	}
	count(a, "a alone", 1)
	count(a, "a again", 1)
	count(b, "b after a", 2)
	count(a, "a after b", 2)
	if n, err := plain.(lease.InstanceCounter).CountInstances(c.ctx); !errors.Is(err, lease.ErrBadRequest) || n != 0 {
		c.t.Fatalf("a view without an instance id: %d, %v; want 0 and ErrBadRequest", n, err)
	}
	count(sh, "sh with a and b", 3)
	c.sp.advance(short + 50*time.Millisecond)
	count(b, "b once sh's window passed", 2)
	count(sh, "sh back", 3)
	// An instance that leaves is counted no more at once, whatever its
	// window; leaving again, or without an entry, is no error; a later
	// count records it again.
	leave := func(v lease.Store, what string) {
		c.t.Helper()
		if err := v.(lease.RosterLeaver).LeaveRoster(c.ctx); err != nil {
			c.t.Fatalf("%s: LeaveRoster: %v", what, err)
		}
	}
	leave(a, "a")
	count(b, "b after a left", 2)
	leave(a, "a again")
	count(sh, "sh after a left twice", 2)
	count(a, "a back", 3)
	if err := plain.(lease.RosterLeaver).LeaveRoster(c.ctx); !errors.Is(err, lease.ErrBadRequest) {
		c.t.Fatalf("a view without an instance id leaves: %v; want ErrBadRequest", err)
	}
	count(b, "b after a refused leave", 3)
}

// confFrozenReleaseAge: a release that names no grant into a frozen
// bucket (its time ahead of Redis's clock while its refill is reserved)
// counts its age back from Redis's clock, not from the bucket's time: a
// grant age before the clock may be older than the calls since, and their
// levels count. Here the drain's own level (the burst) is within the age
// of the clock, so nothing is credited; counted back from the bucket's
// time (some 800 ms ahead), the age would end after every call, and the
// whole return would be credited.
func confFrozenReleaseAge(c *cx) {
	// The result is the same whatever the release's clock only while the
	// calls come close enough together (below): a machine too busy for
	// that gets another try on a tenant of its own, rather than a skip.
	for try := range 5 {
		if confFrozenReleaseAgeOn(c, fmt.Sprintf("t%d", try)) {
			return
		}
	}
	c.t.Fatal("five tries, each with calls more than 400 ms apart")
}

// confFrozenReleaseAgeOn runs confFrozenReleaseAge on tenant, and reports
// false, having checked nothing, when its calls came too far apart.
func confFrozenReleaseAgeOn(c *cx, tenant string) bool {
	lim := lease.Limits{Rate: 100, Burst: 10}
	v := c.view("a", confWindow)
	var m confModel
	reg := &confRegistry{}
	acq := func(what string, want int64, h time.Duration) lease.Grant {
		c.t.Helper()
		res, err := v.AcquireMany(c.ctx, []lease.Request{{Tenant: tenant, Limits: lim, Want: want, Demand: 40, Reserve: h}}, nil)
		if err != nil || res[0].Err != nil {
			c.t.Fatalf("%s: %v, %+v", what, err, res)
		}
		g := res[0].Grant
		c.checkReserving(what, g, &m, reg, "a", lim, want, 40, h.Milliseconds())
		return g
	}
	drain := acq("drain", 10, 0)
	g := acq("reserve", 100, 2*time.Second)
	if g.Reserved == 0 {
		c.t.Fatalf("reserve: %+v, want a reservation", g)
	}
	clock := us(g.ServerTime.Add(-g.Wait)) // Redis's clock then: the release's is as late or later
	const age = 400 * time.Millisecond
	if clock-us(drain.ServerTime) >= age.Microseconds() || m.ts-clock <= age.Microseconds() {
		c.t.Logf("the calls took %v: the drain is not within the age of the clock, or the bucket not that far ahead; again", time.Duration(clock-us(drain.ServerTime))*time.Microsecond)
		return false
	}
	r := c.release(v, tenant, lim, 5, age, 0)
	if us(r.ServerTime) != m.ts+1 {
		c.t.Fatalf("release: bucket time %v, want the frozen bucket's ts + 1 µs (%d)", r.ServerTime, m.ts+1)
	}
	credit, tokens, _ := m.release(us(r.ServerTime), clock, lim, 5, age, 0)
	c.checkReturn("a release without a grant into a frozen bucket", r, credit, tokens)
	if credit != 0 {
		c.t.Fatalf("the model credits %v of a return whose age reaches back past the drain", credit)
	}
	c.checkStored(tenant, &m)
	return true
}
