package memstore_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/peaks"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// start is where the fake clocks start: a whole second in 2027.
var start = time.Unix(1_800_000_000, 0)

// clock is a fake clock that moves only when told.
type clock struct {
	mu  sync.Mutex
	now time.Time // guarded by mu
}

func newClock() *clock { return &clock{now: start} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newStore(t testing.TB) (*memstore.Store, *clock) {
	t.Helper()
	c := newClock()
	return memstore.New(memstore.WithClock(c.Now)), c
}

func view(t testing.TB, s *memstore.Store, id string, window time.Duration) lease.Store {
	t.Helper()
	v, err := s.Instance(id, window)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func acquire(t testing.TB, v lease.Store, tenant string, lim lease.Limits, want int64, demand float64) lease.Grant {
	t.Helper()
	res, err := v.AcquireMany(context.Background(), []lease.Request{{Tenant: tenant, Limits: lim, Want: want, Demand: demand}}, nil)
	if err != nil || res[0].Err != nil {
		t.Fatalf("acquire %d: %v, %v", want, err, res[0].Err)
	}
	return res[0].Grant
}

func release(t testing.TB, v lease.Store, tenant string, lim lease.Limits, amount int64, age time.Duration, id lease.GrantID) lease.Return {
	t.Helper()
	res := v.ReleaseMany(context.Background(), []lease.ReleaseRequest{{Tenant: tenant, Limits: lim, Amount: amount, Age: age, Grant: id}})
	if res[0].Err != nil {
		t.Fatalf("release %d: %v", amount, res[0].Err)
	}
	return res[0].Return
}

func TestZeroValueUsesTheRealClock(t *testing.T) {
	var s memstore.Store
	v := view(t, &s, "", 0)
	before := time.Now()
	g := acquire(t, v, "t", lease.Limits{Rate: 1, Burst: 5}, 2, 0)
	if g.Granted != 2 || g.Tokens != 3 {
		t.Fatalf("%+v, want 2 granted and 3 left", g)
	}
	if g.ServerTime.Before(before.Truncate(time.Microsecond)) || g.ServerTime.After(time.Now()) {
		t.Fatalf("server time %v, not between %v and now", g.ServerTime, before)
	}
}

func TestPartialGrantsAndRefill(t *testing.T) {
	s, c := newStore(t)
	v := view(t, s, "", 0)
	lim := lease.Limits{Rate: 10, Burst: 20}
	for _, step := range []struct {
		advance time.Duration
		want    int64
		granted int64
		tokens  float64
	}{
		{0, 15, 15, 5},                      // a new bucket is full
		{0, 10, 5, 1e-5},                    // partial; the clock stood still: 1µs of refill
		{250 * time.Millisecond, 0, 0, 2.5}, // a read: 250ms at 10/s since the bucket's time
		{250 * time.Millisecond, 3, 3, 2},   // fractions carry over
		{10 * time.Second, 100, 20, 0},      // capped at Burst
		{time.Microsecond, 1, 0, 1e-5},      // less than a whole token: nothing
		{100 * time.Millisecond, 1, 1, 1e-5},
	} {
		c.Add(step.advance)
		g := acquire(t, v, "t", lim, step.want, 0)
		if g.Granted != step.granted || math.Abs(g.Tokens-step.tokens) > 1e-9 {
			t.Fatalf("after %v, want %d: %+v; want %d granted, %v left", step.advance, step.want, g, step.granted, step.tokens)
		}
	}
}

func TestBucketTimesRiseWhenTheClockStandsStillOrGoesBack(t *testing.T) {
	s, c := newStore(t)
	v := view(t, s, "", 0)
	lim := lease.Limits{Rate: 1e6, Burst: 100}
	g := acquire(t, v, "t", lim, 100, 0)
	last := g.ServerTime
	for i, d := range []time.Duration{0, 0, -time.Second, 0} {
		c.Add(d)
		g := acquire(t, v, "t", lim, 1, 0)
		if g.ServerTime != last.Add(time.Microsecond) {
			t.Fatalf("call %d (clock moved %v): at %v, want a microsecond after %v", i, d, g.ServerTime, last)
		}
		// 1µs at 1e6/s is one token.
		if g.Granted != 1 || g.Tokens != 0 {
			t.Fatalf("call %d: %+v, want the one token a microsecond refills", i, g)
		}
		last = g.ServerTime
	}
	// Another bucket has its own times: the clock's.
	if g := acquire(t, v, "u", lim, 1, 0); g.ServerTime != c.Now() {
		t.Fatalf("a new bucket at %v, want the clock's %v", g.ServerTime, c.Now())
	}
}

func TestExpiry(t *testing.T) {
	s, c := newStore(t)
	v := view(t, s, "a", 100*time.Millisecond)
	lim := lease.Limits{Rate: 100, Burst: 10}
	g := acquire(t, v, "t", lim, 10, 0)
	st := s.Tenant("t")
	// 10 tokens at 100/s: 100ms to full, plus a second.
	if st.Bucket == nil || !st.Bucket.Expires.Equal(start.Add(1100*time.Millisecond)) {
		t.Fatalf("bucket %+v, want it to expire at %v", st.Bucket, start.Add(1100*time.Millisecond))
	}
	if !st.InstancesExpire.Equal(start.Add(200 * time.Millisecond)) {
		t.Fatalf("registry expires %v, want two windows after the acquire", st.InstancesExpire)
	}
	release(t, v, "t", lim, 5, time.Second, g.ID())
	if st := s.Tenant("t"); len(st.Releases) != 1 || !st.ReleasesExpire.Equal(start.Add(lease.ReleaseDedupWindow)) {
		t.Fatalf("release ids %+v, expiring %v", st.Releases, st.ReleasesExpire)
	}
	c.Add(200 * time.Millisecond)
	if s.Tenant("t").Instances == nil {
		t.Fatal("the registry is gone at its expiry; Redis drops a key only after")
	}
	c.Add(time.Millisecond)
	if st := s.Tenant("t"); st.Instances != nil || st.Bucket == nil {
		t.Fatalf("after two windows: %+v; want the registry gone, the bucket kept", st)
	}
	exp := s.Tenant("t").Bucket.Expires
	c.Add(exp.Sub(c.Now()))
	if s.Tenant("t").Bucket == nil {
		t.Fatal("the bucket is gone at its expiry; Redis drops a key only after")
	}
	c.Add(time.Millisecond)
	if st := s.Tenant("t"); st.Bucket != nil {
		t.Fatalf("the bucket is still there after its expiry: %+v", st.Bucket)
	}
	// A missing bucket is full: a release changes nothing, an acquire
	// starts over with an unknown past.
	if r := release(t, v, "t", lim, 5, time.Second, g.ID()); r.Credited != 0 || r.Tokens != 10 {
		t.Fatalf("release into an expired bucket: %+v", r)
	}
	if st := s.Tenant("t"); st.Bucket != nil || len(st.Releases) != 1 {
		t.Fatalf("a release into an expired bucket wrote: %+v", st)
	}
	g = acquire(t, v, "t", lim, 3, 0)
	st = s.Tenant("t")
	if g.Granted != 3 || len(st.Bucket.History) != 1 || st.Bucket.History[0] != (memstore.Level{Time: g.ServerTime, Tokens: 10}) {
		t.Fatalf("a new bucket: %+v, history %+v", g, st.Bucket.History)
	}

	// A bucket that would take ~31,700 years or more to refill is kept.
	acquire(t, v, "slow", lease.Limits{Rate: 1e-6, Burst: 1_000_000}, 1_000_000, 0)
	if b := s.Tenant("slow").Bucket; b == nil || !b.Expires.IsZero() {
		t.Fatalf("slow bucket %+v, want one that never expires", b)
	}

	// Every bucket keeps its level history: common.lua keeps none for a
	// burst, or an oldest level, of peaks.Limit or more, which no valid
	// quota reaches (no level is above the larger of the old and the new
	// burst), so the store does not model that case.
	if lease.MaxBurst >= peaks.Limit {
		t.Fatalf("lease.MaxBurst %d reaches peaks.Limit %d: bursts whose history is not kept", int64(lease.MaxBurst), int64(peaks.Limit))
	}
}

// TestFairShares: the registry's shares and credits, by hand.
func TestFairShares(t *testing.T) {
	s, c := newStore(t)
	lim := lease.Limits{Rate: 100, Burst: 1000}
	a, b := view(t, s, "a", time.Minute), view(t, s, "b", time.Minute)
	plain := view(t, s, "", 0)
	if g := acquire(t, a, "t", lim, 0, 150); g.Instances != 1 || g.Share != 100 {
		t.Fatalf("a alone, asking 150/s of 100/s: %+v, want share 100", g)
	}
	if g := acquire(t, b, "t", lim, 0, 20); g.Instances != 2 || g.Share != 20 {
		t.Fatalf("b asking 20/s beside a: %+v, want share 20", g)
	}
	// Drain below half, then a asks for more than its credit. a's share
	// is 80 of 100/s, its credit capacity 80% of the burst.
	acquire(t, plain, "t", lim, 700, 0)
	if g := acquire(t, a, "t", lim, 300, 150); g.Granted != 300 || g.Share != 80 {
		t.Fatalf("a asks 300 with a credit of 800: %+v", g)
	}
	// b's credit is 250: a quarter of the burst, which is more than its
	// share of the burst (200) and less than its share over half its
	// window (600). a's is 500 now.
	if g := acquire(t, b, "t", lim, 10, 20); g.Granted != 0 {
		t.Fatalf("b asks 10 of an empty bucket: %+v", g)
	}
	c.Add(1010 * time.Millisecond) // 101 tokens; a's credit +80.8, b's +20.2 (capped at 250)
	if g := acquire(t, a, "t", lim, 100, 150); g.Granted != 100 {
		t.Fatalf("a asks 100 with credit 580.8: %+v", g)
	}
	reg := s.Tenant("t").Instances
	if math.Abs(reg["a"].Credit-480.8) > 1e-3 || reg["b"].Credit != 250 || reg["a"].Demand != 150 {
		t.Fatalf("registry %+v, want a's credit about 480 and b's 250", reg)
	}
	// b's credit caps its grant while scarce.
	c.Add(3 * time.Second)
	if g := acquire(t, b, "t", lim, 280, 20); g.Granted != 250 {
		t.Fatalf("b asks 280 of 300 with credit 250: %+v", g)
	}
	// An entry older than the caller's window is dropped; the demand the
	// caller cannot use counts as 0.
	c.Add(2 * time.Minute)
	if g := acquire(t, a, "t", lim, 0, math.NaN()); g.Instances != 1 || g.Share != 0 {
		t.Fatalf("a alone again, demand NaN: %+v", g)
	}
	if reg := s.Tenant("t").Instances; len(reg) != 1 || reg["a"].Demand != 0 {
		t.Fatalf("registry %+v, want a alone with demand 0", reg)
	}
	if g := acquire(t, plain, "t", lim, 0, 5); g.Instances != 0 || g.Share != 0 {
		t.Fatalf("a view without instance: %+v", g)
	}
}

// TestAgedReturns: credits against the level history, by hand.
func TestAgedReturns(t *testing.T) {
	s, _ := newStore(t)
	a, b := view(t, s, "a", time.Minute), view(t, s, "b", time.Minute)
	lim := lease.Limits{Rate: 1e-9, Burst: 100} // no refill that shows
	ga := acquire(t, a, "t", lim, 40, 0)        // from a full bucket: 60 left
	gb := acquire(t, b, "t", lim, 40, 0)        // 20 left
	// By age alone, a's tokens reach back to the full bucket: nothing.
	if r := release(t, a, "t", lim, 40, time.Minute, 0); r.Credited != 0 {
		t.Fatalf("by age: %+v", r)
	}
	// Named, they went out when the bucket held 100 and it has held at
	// most 60 since: 40 fit under the cap.
	if r := release(t, a, "t", lim, 40, time.Minute, ga.ID()); math.Abs(r.Credited-40) > 1e-6 || math.Abs(r.Tokens-60) > 1e-6 {
		t.Fatalf("named: %+v, want 40 credited, 60 in the bucket", r)
	}
	// b's tokens: had they not gone out either, the bucket would have
	// been full since: all 40, and nothing more of a's.
	if r := release(t, b, "t", lim, 40, time.Minute, gb.ID()); math.Abs(r.Credited-40) > 1e-6 {
		t.Fatalf("b's 40: %+v", r)
	}
	if r := release(t, a, "t", lim, 10, time.Minute, ga.ID()); r.Credited > 1e-6 {
		t.Fatalf("more of a's after the room is used: %+v", r)
	}
}

// TestReleaseIDs: a view with an id numbers its releases and the store
// applies each id once; two views with one id collide, as two
// lease.Clients would.
func TestReleaseIDs(t *testing.T) {
	s, _ := newStore(t)
	one, two := view(t, s, "x", time.Minute), view(t, s, "x", time.Minute)
	lim := lease.Limits{Rate: 1e-9, Burst: 100}
	acquire(t, one, "t", lim, 50, 0)
	g := acquire(t, one, "t", lim, 20, 0)
	if r := release(t, one, "t", lim, 5, time.Minute, g.ID()); r.Credited != 5 {
		t.Fatalf("x:1: %+v", r)
	}
	before := s.Tenant("t")
	if r := release(t, two, "t", lim, 5, time.Minute, g.ID()); r.Credited != 0 {
		t.Fatalf("x:1 again: %+v", r)
	}
	if after := s.Tenant("t"); !reflect.DeepEqual(after, before) {
		t.Fatalf("a release id applied before changed the tenant:\n%+v\n%+v", before, after)
	}
	if r := release(t, two, "t", lim, 5, time.Minute, g.ID()); r.Credited != 5 {
		t.Fatalf("x:2: %+v", r)
	}
	ids := s.Tenant("t").Releases
	if len(ids) != 2 || ids[0].ID != "x:1" || ids[1].ID != "x:2" {
		t.Fatalf("release ids %+v", ids)
	}
	// Releases of 0 and invalid ones take no number.
	one.ReleaseMany(context.Background(), []lease.ReleaseRequest{{Tenant: "t", Limits: lim}, {Tenant: "t", Limits: lim, Amount: -1}})
	if r := release(t, one, "t", lim, 1, time.Minute, g.ID()); r.Credited != 0 {
		t.Fatalf("one's second release, x:2, applied already: %+v", r)
	}
	if ids := s.Tenant("t").Releases; len(ids) != 2 {
		t.Fatalf("release ids %+v", ids)
	}
}

func TestOverrides(t *testing.T) {
	s, c := newStore(t)
	v := view(t, s, "", 0)
	ctx := context.Background()
	base := lease.Limits{Rate: 10, Burst: 100}
	o := lease.Override{Rate: 1, Burst: 30, MinLease: 2, MaxLease: 9, LeaseTTL: time.Second, Mode: 1}
	acquire(t, v, "t", base, 50, 0)
	c.Add(time.Second) // 60 at the base rate
	tokens, err := v.SetOverride(ctx, "t", base, o)
	if err != nil || tokens != 30 {
		t.Fatalf("set: %v, %v; want 60 capped at 30", tokens, err)
	}
	got, err := v.GetOverride(ctx, "t")
	if err != nil || got == nil || *got != o {
		t.Fatalf("get: %+v, %v", got, err)
	}
	got.Rate = 99 // a copy
	if again, _ := v.GetOverride(ctx, "t"); again.Rate != 1 {
		t.Fatal("GetOverride returned the store's own override")
	}
	c.Add(time.Second)
	g := acquire(t, v, "t", base, 100, 0)
	if g.Granted != 30 || g.Override == nil || *g.Override != o {
		t.Fatalf("acquire under the override: %+v", g)
	}
	c.Add(2 * time.Second) // 2 at the override's rate
	if tokens, err := v.DeleteOverride(ctx, "t", base); err != nil || tokens != 2 {
		t.Fatalf("delete: %v, %v; want the 2 the override's rate refilled", tokens, err)
	}
	if got, err := v.GetOverride(ctx, "t"); err != nil || got != nil {
		t.Fatalf("after delete: %+v, %v", got, err)
	}
	if n, err := v.QuotaVersion(ctx); err != nil || n != 2 {
		t.Fatalf("quota version %d, %v; want 2", n, err)
	}
	if n, _ := view(t, memstore.New(), "", 0).QuotaVersion(ctx); n != 0 {
		t.Fatalf("another store's version %d", n)
	}
}

func TestBadArgumentsChangeNothing(t *testing.T) {
	s, _ := newStore(t)
	v := view(t, s, "a", time.Minute)
	ctx := context.Background()
	lim := lease.Limits{Rate: 1, Burst: 10}
	g := acquire(t, v, "t", lim, 5, 1)
	release(t, v, "t", lim, 1, time.Minute, g.ID())
	before := s.Tenant("t")
	bad := []lease.Limits{{Rate: math.NaN(), Burst: 1}, {Rate: 0, Burst: 1}, {Rate: math.Inf(1), Burst: 1}, {Rate: 1, Burst: 0}, {Rate: 1, Burst: lease.MaxBurst + 1}}
	check := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, lease.ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", what, err)
		}
	}
	for _, l := range bad {
		res, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: l, Want: 1}}, nil)
		if err != nil {
			t.Errorf("a batch of one bad request failed as a whole: %v", err)
		}
		check("acquire", res[0].Err)
		check("release", v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: l, Amount: 1}})[0].Err)
		_, err = v.SetOverride(ctx, "t", l, lease.Override{Rate: 1, Burst: 1})
		check("set base", err)
		_, err = v.SetOverride(ctx, "t", lim, lease.Override{Rate: l.Rate, Burst: l.Burst})
		check("set", err)
		_, err = v.DeleteOverride(ctx, "t", l)
		check("delete", err)
	}
	res, _ := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: -1}}, nil)
	check("want -1", res[0].Err)
	check("amount -1", v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: lim, Amount: -1}})[0].Err)
	check("age -1", v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 1, Age: -1}})[0].Err)
	_, err := v.SetOverride(ctx, "t", lim, lease.Override{Rate: 1, Burst: 1, LeaseTTL: -1})
	check("negative lease TTL", err)
	if after := s.Tenant("t"); !reflect.DeepEqual(after, before) {
		t.Fatalf("bad arguments changed the tenant:\n%+v\n%+v", before, after)
	}
	if n, _ := v.QuotaVersion(ctx); n != 0 {
		t.Fatalf("bad arguments moved the quota version to %d", n)
	}
	for _, w := range []time.Duration{0, -1, time.Millisecond - 1} {
		_, err := s.Instance("x", w)
		check("window "+w.String(), err)
	}
	if _, err := s.Instance("", 0); err != nil {
		t.Fatalf("a view without instance needs no window: %v", err)
	}
}

func TestClockOutOfRange(t *testing.T) {
	for _, at := range []time.Time{{}, time.Unix(-1, 0), time.UnixMicro(1 << 53)} {
		s := memstore.New(memstore.WithClock(func() time.Time { return at }))
		v := view(t, s, "a", time.Second)
		lim := lease.Limits{Rate: 1, Burst: 1}
		res, err := v.AcquireMany(context.Background(), []lease.Request{{Tenant: "t", Limits: lim, Want: 1}}, nil)
		if !errors.Is(err, memstore.ErrClock) || !errors.Is(res[0].Err, memstore.ErrClock) {
			t.Errorf("clock at %v: %v, %v; want ErrClock", at, err, res[0].Err)
		}
		if _, err := v.SetOverride(context.Background(), "t", lim, lease.Override{Rate: 1, Burst: 1}); !errors.Is(err, memstore.ErrClock) {
			t.Errorf("clock at %v: set: %v", at, err)
		}
		if st := s.Tenant("t"); !reflect.DeepEqual(st, memstore.TenantState{}) {
			t.Errorf("clock at %v: wrote %+v", at, st)
		}
	}
}

func TestCanceledContextChangesNothing(t *testing.T) {
	s, _ := newStore(t)
	v := view(t, s, "a", time.Second)
	lim := lease.Limits{Rate: 1, Burst: 10}
	g := acquire(t, v, "t", lim, 5, 0)
	before := s.Tenant("t")
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	res, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 1}}, nil)
	if !errors.Is(err, context.Canceled) || !errors.Is(res[0].Err, context.Canceled) {
		t.Errorf("acquire: %v, %v", err, res[0].Err)
	}
	if r := v.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 1, Grant: g.ID()}}); !errors.Is(r[0].Err, context.Canceled) {
		t.Errorf("release: %v", r[0].Err)
	}
	if _, err := v.SetOverride(ctx, "t", lim, lease.Override{Rate: 2, Burst: 2}); !errors.Is(err, context.Canceled) {
		t.Errorf("set: %v", err)
	}
	if _, err := v.DeleteOverride(ctx, "t", lim); !errors.Is(err, context.Canceled) {
		t.Errorf("delete: %v", err)
	}
	if _, err := v.GetOverride(ctx, "t"); !errors.Is(err, context.Canceled) {
		t.Errorf("get: %v", err)
	}
	if _, err := v.QuotaVersion(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("version: %v", err)
	}
	if after := s.Tenant("t"); !reflect.DeepEqual(after, before) {
		t.Fatalf("a canceled context changed the tenant:\n%+v\n%+v", before, after)
	}
}

// TestConcurrentUse: many goroutines on a few tenants with the real
// clock (run with -race): no tenant grants more than Burst + Rate*T.
func TestConcurrentUse(t *testing.T) {
	s := memstore.New()
	lim := lease.Limits{Rate: 1000, Burst: 50}
	tenants := []string{"a", "b", "c"}
	first := time.Now()
	var (
		mu      sync.Mutex
		granted = map[string]int64{}
		wg      sync.WaitGroup
	)
	for w := range 8 {
		v := view(t, s, string(rune('p'+w)), 50*time.Millisecond)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 300 {
				tn := tenants[i%len(tenants)]
				res, _ := v.AcquireMany(context.Background(), []lease.Request{{Tenant: tn, Limits: lim, Want: 3, Demand: 500}}, nil)
				if res[0].Err != nil {
					t.Error(res[0].Err)
					return
				}
				if i%7 == 0 && res[0].Grant.Granted > 0 {
					v.ReleaseMany(context.Background(), []lease.ReleaseRequest{{Tenant: tn, Limits: lim, Amount: 1, Age: time.Second, Grant: res[0].Grant.ID()}})
				}
				mu.Lock()
				granted[tn] += res[0].Grant.Granted
				mu.Unlock()
				_, _ = v.QuotaVersion(context.Background())
			}
		}()
	}
	wg.Wait()
	bound := float64(lim.Burst) + lim.Rate*time.Since(first).Seconds()
	for tn, n := range granted {
		// Credits only lower the net; the gross count may pass the bound
		// by what was credited back, at most a token per seventh call.
		if float64(n) > bound+8*300/7 {
			t.Errorf("tenant %s: %d granted in %v, bound %v", tn, n, time.Since(first), bound)
		}
	}
}

func TestZeroInstanceFails(t *testing.T) {
	var in memstore.Instance
	ctx := context.Background()
	lim := lease.Limits{Rate: 1, Burst: 1}
	res, err := in.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lim, Want: 1}}, nil)
	if !errors.Is(err, memstore.ErrNoStore) || !errors.Is(res[0].Err, memstore.ErrNoStore) {
		t.Errorf("acquire: %v, %v", err, res[0].Err)
	}
	if r := in.ReleaseMany(ctx, []lease.ReleaseRequest{{Tenant: "t", Limits: lim, Amount: 1}}); !errors.Is(r[0].Err, memstore.ErrNoStore) {
		t.Errorf("release: %v", r[0].Err)
	}
	if _, err := in.GetOverride(ctx, "t"); !errors.Is(err, memstore.ErrNoStore) {
		t.Errorf("get: %v", err)
	}
	if _, err := in.SetOverride(ctx, "t", lim, lease.Override{Rate: 1, Burst: 1}); !errors.Is(err, memstore.ErrNoStore) {
		t.Errorf("set: %v", err)
	}
	if _, err := in.DeleteOverride(ctx, "t", lim); !errors.Is(err, memstore.ErrNoStore) {
		t.Errorf("delete: %v", err)
	}
	if _, err := in.QuotaVersion(ctx); !errors.Is(err, memstore.ErrNoStore) {
		t.Errorf("version: %v", err)
	}
	var s *memstore.Store
	if _, err := s.Instance("a", time.Second); !errors.Is(err, memstore.ErrNoStore) {
		t.Errorf("Instance of a nil Store: %v", err)
	}
}

// TestSetShares: a record of rate shares slows the bucket's refill until
// its epochs end and keeps the key until the bucket is full after them;
// a bad record, or one for a missing bucket, is refused and changes
// nothing; the zero Shares removes it.
func TestSetShares(t *testing.T) {
	s, c := newStore(t)
	v := view(t, s, "", 0)
	lim := lease.Limits{Rate: 100, Burst: 100}
	sh := lease.Shares{Epoch: start.UnixMicro() / 10e6, Committed: 60, Period: 10e6}
	if err := s.SetShares("t", sh); !errors.Is(err, memstore.ErrNoBucket) {
		t.Fatalf("SetShares of a missing bucket = %v, want ErrNoBucket", err)
	}
	acquire(t, v, "t", lim, 100, 0)
	if err := s.SetShares("t", lease.Shares{Committed: 1, Period: 999}); !errors.Is(err, lease.ErrBadShares) {
		t.Fatalf("SetShares of a bad record = %v, want ErrBadShares", err)
	}
	if got := s.Tenant("t").Bucket.Shares; got != (lease.Shares{}) {
		t.Fatalf("a refused record was kept: %+v", got)
	}
	if err := s.SetShares("t", sh); err != nil {
		t.Fatal(err)
	}
	c.Add(time.Second)
	// 1 s at 100 - 60 tokens a second. The epoch (start is a whole 10 s)
	// ends 10 s after start, when the bucket, at 40 a second, is full
	// already: the key is kept until then, plus a second.
	if g := acquire(t, v, "t", lim, 0, 0); g.Tokens != 40 {
		t.Fatalf("after 1 s with 60/s of shares: %v tokens, want 40", g.Tokens)
	}
	st := s.Tenant("t").Bucket
	if st.Shares != sh || !st.Expires.Equal(start.Add(11*time.Second)) {
		t.Fatalf("bucket %+v, want the record kept and the key until 11 s after start", st)
	}
	if err := s.SetShares("t", lease.Shares{}); err != nil {
		t.Fatal(err)
	}
	c.Add(100 * time.Millisecond)
	if g := acquire(t, v, "t", lim, 0, 0); g.Tokens != 50 {
		t.Fatalf("record removed: %v tokens after 100 ms, want 50", g.Tokens)
	}
}
