package lease

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota/integration/redistest"
)

// testWindow is the return window of the tests that wait for the level
// history to roll: long enough that no roll happens by accident between
// two calls of a test, short enough to wait for two rolls.
const testWindow = 100 * time.Millisecond

// ageMargin is added to the local time since an acquire was sent to make
// a release's age an upper bound in Redis time: it covers the release's own
// trip to Redis.
const ageMargin = 5 * time.Millisecond

// ageSince is the age to release tokens with that were acquired by a call
// sent after start.
func ageSince(start time.Time) time.Duration {
	return time.Since(start) + ageMargin
}

// history is a bucket's level history as stored.
type history struct {
	s0, s1 int64 // µs
	m0, m1 float64
	hb     int64
}

func readHistory(t *testing.T, rdb *redis.Client, key string) history {
	t.Helper()
	v, err := rdb.HMGet(context.Background(), key, "s0", "m0", "s1", "m1", "hb").Result()
	if err != nil {
		t.Fatal(err)
	}
	var f [5]float64
	for i := range v {
		s, ok := v[i].(string)
		if !ok {
			t.Fatalf("%s: history field %d missing: %v", key, i, v)
		}
		if f[i], err = strconv.ParseFloat(s, 64); err != nil {
			t.Fatalf("%s: history field %d: %v", key, i, err)
		}
	}
	return history{s0: int64(f[0]), m0: f[1], s1: int64(f[2]), m1: f[3], hb: int64(f[4])}
}

// redisNow is Redis TIME in microseconds.
func redisNow(t *testing.T, rdb *redis.Client) int64 {
	t.Helper()
	tm, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return tm.UnixMicro()
}

// waitRoll waits until Redis TIME is one return window past the start of
// the bucket's current history segment, then acquires 0 tokens, which
// rolls the history, and checks that it did. It returns the new history.
func waitRoll(t *testing.T, c *Client, rdb *redis.Client, tenant string, lim Limits) history {
	t.Helper()
	key := c.Key(tenant)
	before := readHistory(t, rdb, key)
	target := before.s1 + c.returns.Microseconds()
	deadline := time.Now().Add(10 * time.Second)
	for redisNow(t, rdb) < target {
		if time.Now().After(deadline) {
			t.Fatalf("Redis TIME did not reach %d within 10s", target)
		}
		time.Sleep(time.Millisecond)
	}
	g, err := c.Acquire(context.Background(), tenant, lim, 0)
	if err != nil {
		t.Fatal(err)
	}
	after := readHistory(t, rdb, key)
	if after.s0 != before.s1 || after.s1 != g.ServerTime.UnixMicro() || after.m0 < before.m1 || after.m1 != g.Tokens {
		t.Fatalf("history did not roll: %+v then %+v (acquire at %d, level %v)", before, after, g.ServerTime.UnixMicro(), g.Tokens)
	}
	return after
}

// forgetPeaks rolls the history twice, so that it only holds levels seen
// since the first roll: with a rate that refills nothing, the level now.
func forgetPeaks(t *testing.T, c *Client, rdb *redis.Client, tenant string, lim Limits) history {
	t.Helper()
	waitRoll(t, c, rdb, tenant, lim)
	return waitRoll(t, c, rdb, tenant, lim)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-6 }

func agedClient(t *testing.T, opts ...ClientOption) (*Client, *redis.Client) {
	t.Helper()
	rdb := redistest.Client(t)
	c, err := NewClient(rdb, redistest.Prefix(t), append([]ClientOption{WithReturnWindow(testWindow)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return c, rdb
}

func TestWithReturnWindow(t *testing.T) {
	rdb := redistest.Client(t)
	for _, d := range []time.Duration{0, -time.Second, time.Millisecond - 1} {
		if _, err := NewClient(rdb, "p:", WithReturnWindow(d)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("WithReturnWindow(%v): %v, want ErrBadRequest", d, err)
		}
	}
	for d, want := range map[time.Duration]string{
		0:                                 "2000", // the default
		time.Millisecond:                  "1",
		1500 * time.Microsecond:           "2", // rounded up: the history covers at least d
		time.Minute:                       "60000",
		DefaultReturnWindow + time.Second: "3000",
	} {
		var opts []ClientOption
		if d != 0 {
			opts = append(opts, WithReturnWindow(d))
		}
		c, err := NewClient(rdb, "p:", opts...)
		if err != nil {
			t.Fatal(err)
		}
		if c.returnMS != want {
			t.Errorf("window %v sent as %q ms, want %q", d, c.returnMS, want)
		}
		// Both scripts get it.
		cl, err := c.acquireCall("t", Limits{Rate: 1, Burst: 1}, 1, 0)
		if err != nil || cl.args[3] != want {
			t.Errorf("acquire args %v, %v: want the window (%s) 4th", cl.args, err, want)
		}
		args, err := releaseArgs(Limits{Rate: 1, Burst: 1}, 1, 1500*time.Microsecond)
		if err != nil {
			t.Fatal(err)
		}
		if rc := c.releaseCall("t", args, 0); rc.args[3] != "2" || rc.args[4] != want {
			t.Errorf("release args %v: want age 2 (ms, rounded up) and the window (%s)", rc.args, want)
		}
	}
}

// TestReturnToFullBucketCreditsNothing: tokens granted from a full bucket
// are not credited back: had they not been granted, the bucket would be
// full still (its level before the debit is in the grant's history).
// TestReturnOfLastGrant: a return that names its grant (ReleaseRequest.
// Grant), while that grant is still the bucket's last acquire, is credited
// against the levels since its debit only: tokens leased from a full bucket
// come back in full. Named but no longer last, or named wrongly, the
// general rule applies (and credits nothing after a full bucket).
func TestReturnOfLastGrant(t *testing.T) {
	ctx := context.Background()
	c, _ := agedClient(t)
	lim := Limits{Rate: 1e-9, Burst: 100}
	release := func(tenant string, amount int64, start time.Time, id GrantID) Return {
		t.Helper()
		res := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: tenant, Limits: lim, Amount: amount, Age: ageSince(start), Grant: id}})
		if res[0].Err != nil {
			t.Fatal(res[0].Err)
		}
		return res[0].Return
	}
	acquire := func(tenant string, want int64) Grant {
		t.Helper()
		g, err := c.Acquire(ctx, tenant, lim, want)
		if err != nil || g.Granted != want {
			t.Fatalf("acquire %d: %+v, %v", want, g, err)
		}
		return g
	}

	// The only lease, given back in two parts: 30 then 9 of 40.
	start := time.Now()
	g := acquire("only", 40)
	if r := release("only", 30, start, g.ID()); r.Credited != 30 || !near(r.Tokens, 90) {
		t.Fatalf("30 of the last grant: %+v, want 30 credited, 90 tokens", r)
	}
	if r := release("only", 9, start, g.ID()); r.Credited != 9 || !near(r.Tokens, 99) {
		t.Fatalf("9 more of the last grant: %+v, want 9 credited, 99 tokens", r)
	}

	// A grant followed by another acquire is no longer the last.
	start = time.Now()
	a := acquire("two", 40) // 100 -> 60
	b := acquire("two", 10) // 60 -> 50
	if r := release("two", 40, start, a.ID()); r.Credited != 0 || !near(r.Tokens, 50) {
		t.Fatalf("the earlier grant, named: %+v, want 0 credited (the history holds the full level)", r)
	}
	if r := release("two", 10, start, b.ID()); r.Credited != 10 || !near(r.Tokens, 60) {
		t.Fatalf("the last grant, named: %+v, want 10 credited, 60 tokens", r)
	}

	// A wrong id, and no id: the general rule.
	start = time.Now()
	w := acquire("wrong", 40)
	if r := release("wrong", 20, start, w.ID()+1); r.Credited != 0 {
		t.Fatalf("a wrong grant id: %+v, want 0 credited", r)
	}
	if r := release("wrong", 20, start, 0); r.Credited != 0 {
		t.Fatalf("no grant id: %+v, want 0 credited", r)
	}
	if (Grant{}).ID() != 0 {
		t.Error("a Grant without a ServerTime has a non-zero ID")
	}
}

func TestReturnToFullBucketCreditsNothing(t *testing.T) {
	ctx := context.Background()
	c, rdb := agedClient(t)
	lim := Limits{Rate: 1e-9, Burst: 100}
	for _, want := range []int64{100, 30} {
		tenant := "full-" + strconv.FormatInt(want, 10)
		start := time.Now()
		g, err := c.Acquire(ctx, tenant, lim, want)
		if err != nil || g.Granted != want {
			t.Fatalf("acquire %d: %+v, %v", want, g, err)
		}
		r, err := c.Release(ctx, tenant, lim, want, ageSince(start))
		if err != nil || r.Credited != 0 || !near(r.Tokens, float64(100-want)) {
			t.Fatalf("return of %d granted from a full bucket: %+v, %v; want 0 credited, %d tokens", want, r, err, 100-want)
		}
		if h := readHistory(t, rdb, c.Key(tenant)); h.m1 != 100 || h.m0 != 100 || h.s0 != 0 || h.hb != 100 {
			t.Fatalf("history %+v, want the full level in m1 and an unknown past (s0 0, m0 100)", h)
		}
	}
}

// TestAgedReturnCredit checks the credit rule with exact numbers, on
// buckets whose rate refills nothing during the test.
func TestAgedReturnCredit(t *testing.T) {
	ctx := context.Background()
	lim := Limits{Rate: 1e-9, Burst: 100}
	c, rdb := agedClient(t)

	acquire := func(tenant string, want int64) Grant {
		t.Helper()
		g, err := c.Acquire(ctx, tenant, lim, want)
		if err != nil || g.Granted != want {
			t.Fatalf("%s: acquire %d: %+v, %v", tenant, want, g, err)
		}
		return g
	}
	release := func(tenant string, amount int64, age time.Duration, credited, tokens float64) Return {
		t.Helper()
		r, err := c.Release(ctx, tenant, lim, amount, age)
		if err != nil || !near(r.Credited, credited) || !near(r.Tokens, tokens) {
			t.Fatalf("%s: release %d (age %v): %+v, %v; want %v credited, %v tokens", tenant, amount, age, r, err, credited, tokens)
		}
		return r
	}

	t.Run("room below the cap", func(t *testing.T) {
		acquire("room", 90) // 100 -> 10
		if h := forgetPeaks(t, c, rdb, "room", lim); !near(h.m0, 10) || !near(h.m1, 10) {
			t.Fatalf("history %+v, want peaks of 10", h)
		}
		start := time.Now()
		acquire("room", 10)                          // 10 -> 0, peak 10
		release("room", 10, ageSince(start), 10, 10) // min(10, 100-10)
		// The credit is in the history: the bucket without those 10
		// granted would have been 10 higher since.
		if h := readHistory(t, rdb, c.Key("room")); !near(h.m0, 20) || !near(h.m1, 20) {
			t.Fatalf("history after the credit %+v, want peaks of 20", h)
		}
	})

	t.Run("credit capped by the peak", func(t *testing.T) {
		acquire("peak", 5) // 100 -> 95
		forgetPeaks(t, c, rdb, "peak", lim)
		start := time.Now()
		acquire("peak", 95)                        // 95 -> 0, peak 95
		release("peak", 95, ageSince(start), 5, 5) // min(95, 100-95): 90 would have been lost to the cap
	})

	t.Run("older than the history", func(t *testing.T) {
		old := time.Now()
		acquire("old", 50) // 100 -> 50
		forgetPeaks(t, c, rdb, "old", lim)
		// Tokens granted before the history's start: nothing, though
		// there is room below the cap.
		release("old", 20, ageSince(old), 0, 50)
		// The same return of tokens granted within the history: credited.
		start := time.Now()
		acquire("old", 20)                          // 50 -> 30
		release("old", 20, ageSince(start), 20, 50) // min(20, 100-50)
		// An age just past what the history covers: nothing again.
		h := readHistory(t, rdb, c.Key("old"))
		past := time.Duration(redisNow(t, rdb)-h.s0)*time.Microsecond + time.Second
		release("old", 20, past, 0, 50)
	})

	t.Run("peaks roll out after two windows", func(t *testing.T) {
		g0 := acquire("roll", 10) // 100 -> 90; the history: s0 0, m0 100, s1 now, m1 100
		start1 := time.Now()
		acquire("roll", 10)                          // 90 -> 80
		release("roll", 10, ageSince(start1), 0, 80) // the full level is in m1

		h := waitRoll(t, c, rdb, "roll", lim)
		if h.s0 != g0.ServerTime.UnixMicro() || h.m0 != 100 || !near(h.m1, 80) {
			t.Fatalf("after one roll %+v, want s0 %d, m0 100, m1 80", h, g0.ServerTime.UnixMicro())
		}
		start2 := time.Now()
		acquire("roll", 10)                          // 80 -> 70
		release("roll", 10, ageSince(start2), 0, 70) // 100 is still in m0

		h = waitRoll(t, c, rdb, "roll", lim)
		if !near(h.m0, 80) || !near(h.m1, 70) {
			t.Fatalf("after two rolls %+v, want m0 80 (the level at the first roll), m1 70", h)
		}
		start3 := time.Now()
		acquire("roll", 10)                           // 70 -> 60
		release("roll", 10, ageSince(start3), 10, 70) // min(10, 100-80)
		// The grant of start1 is older than s0 (the first roll).
		release("roll", 10, ageSince(start1), 0, 70)
	})
}

// TestOverlappingReturnsShareTheRoom: two returns of tokens granted before
// the same peak share its room below the cap: the second sees the first's
// credit in the history, so together they never lift the bucket above the
// level it would have without both grants.
func TestOverlappingReturnsShareTheRoom(t *testing.T) {
	ctx := context.Background()
	lim := Limits{Rate: 1e-9, Burst: 100}
	c, rdb := agedClient(t)

	for _, pipelined := range []bool{false, true} {
		tenant := "overlap-" + strconv.FormatBool(pipelined)
		key := c.Key(tenant)
		acq := func(want int64) {
			t.Helper()
			if g, err := c.Acquire(ctx, tenant, lim, want); err != nil || g.Granted != want {
				t.Fatalf("acquire %d: %+v, %v", want, g, err)
			}
		}
		acq(50) // 100 -> 50
		forgetPeaks(t, c, rdb, tenant, lim)
		start := time.Now()
		acq(20) // grant 1: 50 -> 30
		acq(20) // grant 2: 30 -> 10
		// The bucket refills to 95 (standing in for 85 tokens of refill,
		// which this rate would take ages to do) ...
		if err := rdb.HSet(ctx, key, "tk", "95").Err(); err != nil {
			t.Fatal(err)
		}
		acq(0)  // ... and is seen there,
		acq(95) // then drained by spending 95.
		// Without grants 1 and 2 the bucket would have held 50, refilled
		// to 100 (losing 5 to the cap) and held 5 after the drain. So the
		// two returns may credit 5 in all, not 5 each.
		age := ageSince(start)
		var rets [2]Return
		if pipelined {
			res := c.ReleaseMany(ctx, []ReleaseRequest{
				{Tenant: tenant, Limits: lim, Amount: 20, Age: age},
				{Tenant: tenant, Limits: lim, Amount: 20, Age: age},
			})
			for i := range res {
				if res[i].Err != nil {
					t.Fatal(res[i].Err)
				}
				rets[i] = res[i].Return
			}
		} else {
			for i := range rets {
				r, err := c.Release(ctx, tenant, lim, 20, age)
				if err != nil {
					t.Fatal(err)
				}
				rets[i] = r
			}
		}
		if !near(rets[0].Credited, 5) || !near(rets[0].Tokens, 5) || rets[1].Credited != 0 || !near(rets[1].Tokens, 5) {
			t.Fatalf("pipelined %v: returns %+v, want 5 credited then 0, 5 tokens", pipelined, rets)
		}
		if g, err := c.Acquire(ctx, tenant, lim, 0); err != nil || !near(g.Tokens, 5) {
			t.Fatalf("pipelined %v: bucket %+v, %v; want 5", pipelined, g, err)
		}
	}
}

// TestUnknownHistoryCreditsNothing: a missing key, a bucket hash without
// history (written by an older version), one with an unreadable history and
// one whose history was recorded under another burst credit nothing.
func TestUnknownHistoryCreditsNothing(t *testing.T) {
	ctx := context.Background()
	lim := Limits{Rate: 1e-9, Burst: 100}
	c, rdb := agedClient(t)

	r, err := c.Release(ctx, "missing", lim, 10, 0)
	if err != nil || r.Credited != 0 || r.Tokens != 100 {
		t.Fatalf("release into a missing key: %+v, %v; want 0 credited, 100 tokens", r, err)
	}
	if exists(t, rdb, c.Key("missing")) {
		t.Fatal("release into a missing key created it")
	}

	// An older version's bucket: tk and ts only.
	key := c.Key("old-version")
	if err := rdb.HSet(ctx, key, "tk", "10", "ts", strconv.FormatInt(redisNow(t, rdb), 10)).Err(); err != nil {
		t.Fatal(err)
	}
	r, err = c.Release(ctx, "old-version", lim, 10, 0)
	if err != nil || r.Credited != 0 || !near(r.Tokens, 10) {
		t.Fatalf("release into a bucket without history: %+v, %v; want 0 credited, 10 tokens", r, err)
	}
	h := readHistory(t, rdb, key)
	if h.s0 != 0 || h.m0 != 100 || h.s1 != r.ServerTime.UnixMicro() || !near(h.m1, 10) || h.hb != 100 {
		t.Fatalf("history started as %+v, want s0 0, m0 100, s1 now, m1 10, hb 100", h)
	}
	// Once it has rolled past, grants are credited again.
	forgetPeaks(t, c, rdb, "old-version", lim)
	start := time.Now()
	if g, err := c.Acquire(ctx, "old-version", lim, 10); err != nil || g.Granted != 10 {
		t.Fatalf("%+v, %v", g, err)
	}
	if r, err := c.Release(ctx, "old-version", lim, 10, ageSince(start)); err != nil || !near(r.Credited, 10) {
		t.Fatalf("release after the history rolled: %+v, %v; want 10 credited", r, err)
	}

	// An unreadable history is unknown, not an error.
	key = c.Key("garbled")
	if err := rdb.HSet(ctx, key, "tk", "10", "ts", strconv.FormatInt(redisNow(t, rdb), 10),
		"s0", "1", "m0", "garbage", "s1", "1", "m1", "0", "hb", "100").Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Release(ctx, "garbled", lim, 10, 0); err != nil || r.Credited != 0 || !near(r.Tokens, 10) {
		t.Fatalf("release into a garbled history: %+v, %v; want 0 credited", r, err)
	}
	if h := readHistory(t, rdb, key); h.s0 != 0 || h.m0 != 100 {
		t.Fatalf("garbled history replaced by %+v, want s0 0, m0 100", h)
	}

	// A history recorded under a burst of 100 says nothing of the room
	// below a burst of 200: a caller raising the burst restarts it.
	if g, err := c.Acquire(ctx, "burst", lim, 50); err != nil || g.Granted != 50 {
		t.Fatalf("%+v, %v", g, err)
	}
	forgetPeaks(t, c, rdb, "burst", lim)
	start = time.Now()
	if g, err := c.Acquire(ctx, "burst", lim, 10); err != nil || g.Granted != 10 {
		t.Fatalf("%+v, %v", g, err)
	}
	raised := Limits{Rate: lim.Rate, Burst: 200}
	if r, err := c.Release(ctx, "burst", raised, 10, ageSince(start)); err != nil || r.Credited != 0 || !near(r.Tokens, 40) {
		t.Fatalf("release after raising the burst: %+v, %v; want 0 credited, 40 tokens", r, err)
	}
	if h := readHistory(t, rdb, c.Key("burst")); h.s0 != 0 || h.m0 != 200 || h.hb != 200 {
		t.Fatalf("history after raising the burst %+v, want s0 0, m0 200, hb 200", h)
	}
}

// TestQuotaChangeResetsHistory: setting or deleting an override makes
// grants before the change uncreditable.
func TestQuotaChangeResetsHistory(t *testing.T) {
	ctx := context.Background()
	base := Limits{Rate: 1e-9, Burst: 100}
	c, rdb := agedClient(t)
	key := c.Key("t")
	acq := func(want int64) {
		t.Helper()
		if g, err := c.Acquire(ctx, "t", base, want); err != nil || g.Granted != want {
			t.Fatalf("acquire %d: %+v, %v", want, g, err)
		}
	}
	acq(50) // 100 -> 50
	forgetPeaks(t, c, rdb, "t", base)

	start := time.Now()
	acq(10) // 50 -> 40: creditable in full, were it not for the change
	tokens, err := c.SetOverride(ctx, "t", base, Override{Rate: 1e-9, Burst: 100})
	if err != nil || !near(tokens, 40) {
		t.Fatalf("SetOverride: %v, %v", tokens, err)
	}
	h := readHistory(t, rdb, key)
	if h.s0 != 0 || h.m0 != 100 || !near(h.m1, 40) || h.hb != 100 {
		t.Fatalf("history after SetOverride %+v, want s0 0, m0 100, m1 40, hb 100", h)
	}
	if r, err := c.Release(ctx, "t", base, 10, ageSince(start)); err != nil || r.Credited != 0 || !near(r.Tokens, 40) {
		t.Fatalf("return of a grant before SetOverride: %+v, %v; want 0 credited", r, err)
	}

	// Grants after the change are creditable once the history rolled.
	forgetPeaks(t, c, rdb, "t", base)
	start = time.Now()
	acq(10) // 40 -> 30
	if r, err := c.Release(ctx, "t", base, 10, ageSince(start)); err != nil || !near(r.Credited, 10) || !near(r.Tokens, 40) {
		t.Fatalf("return after the history rolled past SetOverride: %+v, %v; want 10 credited", r, err)
	}

	// Deleting, to a smaller burst.
	start = time.Now()
	acq(10) // 40 -> 30
	small := Limits{Rate: 1e-9, Burst: 60}
	if tokens, err := c.DeleteOverride(ctx, "t", small); err != nil || !near(tokens, 30) {
		t.Fatalf("DeleteOverride: %v, %v", tokens, err)
	}
	if h := readHistory(t, rdb, key); h.s0 != 0 || h.m0 != 100 || h.hb != 60 {
		t.Fatalf("history after DeleteOverride %+v, want s0 0, m0 max(100, 60), hb 60", h)
	}
	if r, err := c.Release(ctx, "t", small, 10, ageSince(start)); err != nil || r.Credited != 0 || !near(r.Tokens, 30) {
		t.Fatalf("return of a grant before DeleteOverride: %+v, %v; want 0 credited", r, err)
	}
}

// TestAgedReturnsProperty drives one bucket that refills in real time with
// random acquires, returns (of part or all of a grant, one at a time or
// two in a pipeline, with ages that are upper bounds, sometimes far too
// large) and pauses, and checks after every step that the bucket holds
// exactly what an ideal bucket holds in which every credited token was
// never granted: it never got more than that bucket. At the end it checks
// the bound itself: over every span between two grants, granted minus
// credited <= burst + rate * span.
func TestAgedReturnsProperty(t *testing.T) {
	ctx := context.Background()
	const (
		burst  = 50
		rate   = 400.0 // tokens/s: a few tokens per pause, a fraction per call
		steps  = 400
		margin = 50 * time.Millisecond // ages are local time since the acquire was sent + margin
	)
	lim := Limits{Rate: rate, Burst: burst}
	c, rdb := agedClient(t, WithReturnWindow(100*time.Millisecond))
	rng := rand.New(rand.NewPCG(7, 11))

	type grant struct {
		at       int64     // Redis TIME of the acquire, µs
		sent     time.Time // local time before the acquire was sent
		granted  int64
		returned int64 // tokens given back so far
		credited float64
		id       GrantID
	}
	var grants []*grant
	var open []*grant // grants with tokens not given back

	// ideal replays the grants, less what was credited of each, on a
	// bucket that starts full before the first call, up to Redis time now.
	ideal := func(now int64) float64 {
		level, last := float64(burst), int64(0)
		for i, g := range grants {
			if i > 0 {
				level = min(burst, level+float64(g.at-last)*rate/1e6)
			}
			level -= float64(g.granted) - g.credited
			last = g.at
		}
		if len(grants) > 0 {
			level = min(burst, level+float64(now-last)*rate/1e6)
		}
		return level
	}
	check := func(step int, what string, tokens float64, now int64) {
		t.Helper()
		if tokens < -1e-9 || tokens > burst {
			t.Fatalf("step %d (%s): bucket holds %v, want 0..%d", step, what, tokens, burst)
		}
		if want := ideal(now); math.Abs(tokens-want) > 1e-6 {
			t.Fatalf("step %d (%s): bucket holds %.9f, the bucket without the credited tokens %.9f", step, what, tokens, want)
		}
	}
	checkReturn := func(step int, g *grant, amount int64, age time.Duration, r Return) {
		t.Helper()
		// The premise: age bounds the time between the two calls in Redis.
		if ms := ceilMillis(age); ms*1000 < r.ServerTime.UnixMicro()-g.at {
			t.Fatalf("step %d: test premise broken: age %dms < %dµs between grant and release (raise margin)", step, ms, r.ServerTime.UnixMicro()-g.at)
		}
		if r.Credited < 0 || r.Credited > float64(amount) {
			t.Fatalf("step %d: credited %v of %d", step, r.Credited, amount)
		}
		// Never more than the room below the cap before the release.
		if before := r.Tokens - r.Credited; r.Credited > burst-before+1e-9 {
			t.Fatalf("step %d: credited %v with %v in a bucket of %d", step, r.Credited, before, burst)
		}
		g.credited += r.Credited
	}
	takeReturn := func() (*grant, int64, time.Duration) {
		i := rng.IntN(len(open))
		g := open[i]
		amount := g.granted - g.returned
		if amount > 1 && rng.IntN(2) == 0 {
			amount = 1 + rng.Int64N(amount-1) // part of it
		}
		g.returned += amount
		if g.returned == g.granted {
			open = append(open[:i], open[i+1:]...)
		}
		age := time.Since(g.sent) + margin
		if rng.IntN(8) == 0 {
			age += time.Duration(rng.IntN(400)) * time.Millisecond // often older than the history
		}
		return g, amount, age
	}

	var credits, zeroes, partial, named int
	for step := range steps {
		switch p := rng.IntN(100); {
		case p < 45 || len(open) == 0: // acquire
			g := &grant{sent: time.Now()}
			want := 1 + rng.Int64N(25)
			res, err := c.Acquire(ctx, "p", lim, want)
			if err != nil {
				t.Fatal(err)
			}
			g.at, g.granted, g.id = res.ServerTime.UnixMicro(), res.Granted, res.ID()
			grants = append(grants, g)
			if g.granted > 0 {
				open = append(open, g)
			}
			check(step, "acquire", res.Tokens, g.at)
			if g.granted > 1 && rng.IntN(3) == 0 {
				// Give part of it back at once, naming it: the last
				// acquire, so the rule of mt applies.
				amount := 1 + rng.Int64N(g.granted-1)
				g.returned = amount
				age := time.Since(g.sent) + margin
				res := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: "p", Limits: lim, Amount: amount, Age: age, Grant: g.id}})
				if res[0].Err != nil {
					t.Fatal(res[0].Err)
				}
				checkReturn(step, g, amount, age, res[0].Return)
				check(step, "return of the last grant", res[0].Return.Tokens, res[0].Return.ServerTime.UnixMicro())
				named++
			}
		case p < 70: // one return, naming its grant half the time
			g, amount, age := takeReturn()
			var r Return
			var err error
			if rng.IntN(2) == 0 {
				r, err = c.Release(ctx, "p", lim, amount, age)
			} else {
				res := c.ReleaseMany(ctx, []ReleaseRequest{{Tenant: "p", Limits: lim, Amount: amount, Age: age, Grant: g.id}})
				r, err = res[0].Return, res[0].Err
			}
			if err != nil {
				t.Fatal(err)
			}
			checkReturn(step, g, amount, age, r)
			check(step, "release", r.Tokens, r.ServerTime.UnixMicro())
			switch {
			case r.Credited == 0:
				zeroes++
			case r.Credited < float64(amount):
				partial++
			default:
				credits++
			}
		case p < 80 && len(open) >= 2: // two returns in one pipeline
			var reqs []ReleaseRequest
			var gs []*grant
			for range 2 {
				if len(open) == 0 {
					break
				}
				g, amount, age := takeReturn()
				gs = append(gs, g)
				reqs = append(reqs, ReleaseRequest{Tenant: "p", Limits: lim, Amount: amount, Age: age})
			}
			for i, r := range c.ReleaseMany(ctx, reqs) {
				if r.Err != nil {
					t.Fatal(r.Err)
				}
				checkReturn(step, gs[i], reqs[i].Amount, reqs[i].Age, r.Return)
				if r.Return.Credited > 0 {
					credits++
				}
			}
			// Both credits are known only now: check the bucket as of the second.
			res, err := c.Acquire(ctx, "p", lim, 0)
			if err != nil {
				t.Fatal(err)
			}
			check(step, "pipelined releases", res.Tokens, res.ServerTime.UnixMicro())
		default: // let the bucket refill for a while, in Redis time
			target := redisNow(t, rdb) + int64(1+rng.IntN(40))*1000
			for redisNow(t, rdb) < target {
				time.Sleep(time.Millisecond)
			}
		}
	}

	// The bound, over every span from one grant to another.
	worst := math.Inf(-1)
	for i := range grants {
		var net float64
		for j := i; j < len(grants); j++ {
			net += float64(grants[j].granted) - grants[j].credited
			span := float64(grants[j].at-grants[i].at) / 1e6
			excess := net - (burst + rate*span)
			if excess > 1e-6 {
				t.Fatalf("grants %d..%d: %v granted net of credits in %.6fs, bound %v", i, j, net, span, burst+rate*span)
			}
			worst = max(worst, excess)
		}
	}
	t.Logf("%d grants; returns credited in full %d, in part %d, not at all %d (%d named the last acquire); tightest span %.6f tokens under the bound",
		len(grants), credits, partial, zeroes, named, -worst)
	if named == 0 {
		t.Fatal("no return named the last acquire: the rule of mt was not exercised")
	}
	// The run must have exercised the rule both ways.
	if credits+partial == 0 || zeroes == 0 {
		t.Fatalf("returns credited in full %d, in part %d, not at all %d: want both some credits and some zeroes", credits, partial, zeroes)
	}
}
