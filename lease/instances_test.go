package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/redisserver"
)

func TestInstanceRegistry(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	const window = 200 * time.Millisecond
	a, err := NewClient(rdb, prefix, WithInstance("a", window))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewClient(rdb, prefix, WithInstance("b", window))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	lim := Limits{Rate: 1000, Burst: 1000}

	g, err := a.Acquire(ctx, "t", lim, 1)
	if err != nil || g.Instances != 1 {
		t.Fatalf("first instance: %+v, %v; want Instances 1", g, err)
	}
	res, err := b.AcquireMany(ctx, []Request{{Tenant: "t", Limits: lim, Want: 1}}, nil)
	if err != nil || res[0].Err != nil || res[0].Grant.Instances != 2 {
		t.Fatalf("second instance (pipelined): %+v, %v; want Instances 2", res, err)
	}
	if g, err := plain.Acquire(ctx, "t", lim, 1); err != nil || g.Instances != 0 {
		t.Fatalf("client without registry: %+v, %v; want Instances 0", g, err)
	}
	ikey := InstancesKey(Key(prefix, "t"))
	if Slot(ikey) != Slot(Key(prefix, "t")) {
		t.Errorf("registry key %q is not in the bucket's slot", ikey)
	}
	if pttl, _ := rdb.PTTL(ctx, ikey).Result(); pttl <= 0 || pttl > 2*window {
		t.Errorf("registry PTTL %v, want in (0, %v]", pttl, 2*window)
	}

	// Once b has not acquired for a whole window, it no longer counts and
	// its entry is removed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		g, err := a.Acquire(ctx, "t", lim, 1)
		if err != nil {
			t.Fatal(err)
		}
		if g.Instances == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance b still counted 5s after its last acquire (window %v)", window)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n, _ := rdb.HExists(ctx, ikey, "b").Result(); n {
		t.Error("stale instance b still in the registry")
	}

	if _, err := NewClient(rdb, prefix, WithInstance("x", 0)); !errors.Is(err, ErrBadRequest) {
		t.Errorf("zero window: %v, want ErrBadRequest", err)
	}
}

// TestReleaseDeduplicated replays the exact command of a release, as
// go-redis does when it retries after a lost reply: the bucket is credited
// once, and the replay reports a credit of 0.
func TestReleaseDeduplicated(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	c, err := NewClient(rdb, prefix, WithInstance("i1", time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Rate so low that nothing refills during the test.
	lim := Limits{Rate: 1e-9, Burst: 100}
	// 50 left, and the full bucket out of reach of the releases' age:
	// returns of later grants are credited up to 100 - 50.
	if g, err := c.Acquire(ctx, "t", lim, 50); err != nil || g.Granted != 50 {
		t.Fatalf("acquire: %+v, %v", g, err)
	}
	waitBeyondAge(t, rdb)
	start := time.Now()
	if g, err := c.Acquire(ctx, "t", lim, 50); err != nil || g.Granted != 50 {
		t.Fatalf("acquire: %+v, %v", g, err)
	}
	cl := c.releaseCall(ReleaseRequest{Tenant: "t", Limits: lim, Amount: 10, Age: ageSince(start)})
	first, err := parseRelease(releaseScript.run(ctx, rdb, cl.keys, cl.argv()...), 10)
	if err != nil || math.Abs(first.Credited-10) > 1e-6 || math.Abs(first.Tokens-10) > 1e-6 {
		t.Fatalf("release: %+v, %v; want 10 credited, 10 tokens", first, err)
	}
	again, err := parseRelease(releaseScript.run(ctx, rdb, cl.keys, cl.argv()...), 10)
	if err != nil || again.Credited != 0 || math.Abs(again.Tokens-10) > 1e-6 {
		t.Fatalf("replayed release: %+v, %v; want 0 credited, 10 tokens still", again, err)
	}
	// A new release (a new id) is applied: the first credit raised the
	// history's level after the grant to 60, so up to 40 more.
	if r, err := c.Release(ctx, "t", lim, 10, ageSince(start)); err != nil || math.Abs(r.Credited-10) > 1e-6 || math.Abs(r.Tokens-20) > 1e-6 {
		t.Fatalf("second release: %+v, %v; want 10 credited, 20 tokens", r, err)
	}
	rkey := ReleasesKey(Key(prefix, "t"))
	if n, _ := rdb.ZCard(ctx, rkey).Result(); n != 2 {
		t.Errorf("%d release ids remembered, want 2", n)
	}
	if pttl, _ := rdb.PTTL(ctx, rkey).Result(); pttl <= 0 || pttl > ReleaseDedupWindow {
		t.Errorf("release ids PTTL %v, want in (0, %v]", pttl, ReleaseDedupWindow)
	}
	if Slot(rkey) != Slot(Key(prefix, "t")) {
		t.Error("release ids are not in the bucket's slot")
	}
}

// TestFairShareCredit: while the active instances' reported demands exceed
// the rate and the bucket is less than half full, an instance's grant is
// capped by the credit its max-min fair share accrued (starting at its
// share of the burst), so the first to ask cannot take what the others are
// owed; otherwise it gets what it asks.
func TestFairShareCredit(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	// A rate so low that nothing refills during the test.
	lim := Limits{Rate: 1e-6, Burst: 1000}
	client := func(id string) *Client {
		c, err := NewClient(rdb, prefix, WithInstance(id, time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	a, b, c, d := client("a"), client("b"), client("c"), client("d")
	plain, err := NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}

	// Not scarce: with no demand reported (0), the demands never exceed
	// the rate, so there is no cap: a takes what it asks.
	g, err := acquireRequest(ctx, a, Request{Tenant: "free", Limits: lim, Want: 600})
	if err != nil || g.Granted != 600 {
		t.Fatalf("no demand reported: %+v, %v; want 600 granted", g, err)
	}

	// Scarce: four instances report demand far above the rate, so each
	// one's share is a quarter of it and its credit starts at a quarter
	// of the burst, 250. The bucket is drained below half (400 left).
	if g, err := plain.Acquire(ctx, "scarce", lim, 600); err != nil || g.Granted != 600 {
		t.Fatalf("drain: %+v, %v", g, err)
	}
	for _, x := range []*Client{b, c, d} {
		if _, err := acquireRequest(ctx, x, Request{Tenant: "scarce", Limits: lim, Want: 0, Demand: 1000}); err != nil {
			t.Fatal(err)
		}
	}
	g, err = acquireRequest(ctx, a, Request{Tenant: "scarce", Limits: lim, Want: 400, Demand: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if g.Granted != 250 || g.Instances != 4 || g.Share <= 0 {
		t.Fatalf("a asks 400 of 400 while three others are owed theirs: %+v; want 250 granted (its credit), 4 instances, a share", g)
	}
	g, err = acquireRequest(ctx, b, Request{Tenant: "scarce", Limits: lim, Want: 400, Demand: 1000})
	if err != nil || g.Granted != 150 {
		t.Fatalf("b asks 400: %+v, %v; want the 150 left", g, err)
	}
	// a's credit is spent: nothing more until its share accrues. Put 100
	// tokens back (directly: a release would credit nothing, the bucket
	// was full moments ago).
	if err := rdb.HSet(ctx, plain.Key("scarce"), "tk", "100").Err(); err != nil {
		t.Fatal(err)
	}
	g, err = acquireRequest(ctx, a, Request{Tenant: "scarce", Limits: lim, Want: 10, Demand: 1000})
	if err != nil || g.Granted != 0 {
		t.Fatalf("a again, with 100 back in the bucket: %+v, %v; want 0 (no credit left)", g, err)
	}
	g, err = acquireRequest(ctx, c, Request{Tenant: "scarce", Limits: lim, Want: 10, Demand: 1000})
	if err != nil || g.Granted != 10 {
		t.Fatalf("c asks 10: %+v, %v; want 10 (its credit is untouched)", g, err)
	}
}

// TestQuotaVersion: every SetOverride and DeleteOverride raises the quota
// version under the client's prefix, which instances poll to know when to
// re-read quotas; other prefixes are not affected.
func TestQuotaVersion(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	c, err := NewClient(rdb, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	other, err := NewClient(rdb, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.QuotaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("before any change: %d, %v; want 0", v, err)
	}
	base := Limits{Rate: 10, Burst: 10}
	if _, err := c.SetOverride(ctx, "t", base, Override{Rate: 20, Burst: 20}); err != nil {
		t.Fatal(err)
	}
	if v, err := c.QuotaVersion(ctx); err != nil || v != 1 {
		t.Fatalf("after a set: %d, %v; want 1", v, err)
	}
	if _, err := c.DeleteOverride(ctx, "t", base); err != nil {
		t.Fatal(err)
	}
	if v, err := c.QuotaVersion(ctx); err != nil || v != 2 {
		t.Fatalf("after a delete: %d, %v; want 2", v, err)
	}
	if v, err := other.QuotaVersion(ctx); err != nil || v != 0 {
		t.Fatalf("another prefix: %d, %v; want 0", v, err)
	}
	if k := QuotaVersionKey("p:"); Slot(k) == Slot(Key("p:", "quota-version")) && k == Key("p:", "quota-version") {
		t.Errorf("the version key %q collides with a tenant's key", k)
	}
}

// acquireRequest is one acquire that reports the caller's demand: a
// pipeline of one request.
func acquireRequest(ctx context.Context, c *Client, r Request) (Grant, error) {
	res, err := c.AcquireMany(ctx, []Request{r}, nil)
	if err != nil {
		return Grant{}, err
	}
	return res[0].Grant, res[0].Err
}

// TestManyStaleRegistryEntries, on redis-server: a recompute of the
// registry summary that finds 8,001 stale entries (instances that
// stopped within the last windows: short-lived ones, a fleet restarted
// under new ids) deletes them all and grants. It failed: unpack takes at
// most about 8,000 values, so every such acquire failed for up to a
// window, where memstore granted.
func TestManyStaleRegistryEntries(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	const n = 8001
	window := time.Second
	now, err := rdb.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	old := now.Add(-2 * window).UnixMicro()
	ikey := InstancesKey(Key(prefix, "t"))
	fields := make([]interface{}, 0, 2*n)
	for i := range n {
		fields = append(fields, fmt.Sprintf("old-%d", i), fmt.Sprintf("%d:0:1:", old))
	}
	if err := rdb.HSet(ctx, ikey, fields...).Err(); err != nil {
		t.Fatal(err)
	}
	c, err := NewClient(rdb, prefix, WithInstance("new", window))
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.AcquireMany(ctx, []Request{{Tenant: "t", Limits: Limits{Rate: 100, Burst: 100}, Want: 1}}, nil)
	if err != nil || res[0].Err != nil || res[0].Grant.Granted != 1 {
		t.Fatalf("acquire over %d stale registry entries: %+v, %v", n, res, err)
	}
	if left, err := rdb.HLen(ctx, ikey).Result(); err != nil || left != 1 {
		t.Errorf("the registry keeps %d entries (%v), want the caller's alone", left, err)
	}
}

// TestShortWindowKeepsTheLongerWindowsRegistry, on redis-server: instances
// with different registry windows (different lease TTLs or refresh
// intervals) share a tenant, and the one with the short window recomputes
// the registry summary (it is new). The registry must stay as long as
// the long windows' recomputes kept it: two of their windows, here 20 s.
// The script set the hash's TTL to twice the caller's window, whatever it
// was, so the short window's acquire cut it to 100 ms; the hash expired
// with the long-window instances' entries, a few milliseconds old, and
// the next of them counted itself alone, as a new instance (its credit
// reset to full), where three were active within its window.
func TestShortWindowKeepsTheLongerWindowsRegistry(t *testing.T) {
	ctx := context.Background()
	rdb := redisserver.Client(t)
	prefix := redisserver.Prefix(t)
	const long, short = 10 * time.Second, 50 * time.Millisecond
	client := func(id string, window time.Duration) *Client {
		t.Helper()
		c, err := NewClient(rdb, prefix, WithInstance(id, window))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	l1, l2, s := client("long-1", long), client("long-2", long), client("short", short)
	req := Request{Tenant: "t", Limits: Limits{Rate: 1000, Burst: 1000}, Want: 1, Demand: 10}
	ikey := InstancesKey(Key(prefix, "t"))
	acquireOne(t, l1, req)
	gl := acquireOne(t, l2, req)
	if gl.Instances != 2 {
		t.Fatalf("second long-window instance: %d instances, want 2", gl.Instances)
	}
	gs := acquireOne(t, s, req)
	if gs.Instances != 3 {
		t.Fatalf("short-window instance: %d instances, want 3", gs.Instances)
	}
	ttl, err := rdb.PTTL(ctx, ikey).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 2*long-time.Since(gl.ServerTime)-time.Second {
		t.Errorf("registry PTTL %v after the short window's acquire, want about %v (two long windows since the long-window acquire)", ttl, 2*long)
	}
	// Once Redis's clock has passed two short windows after that acquire,
	// the long-window instances' entries, written within a window of
	// theirs, must still be there.
	until := gs.ServerTime.Add(-gs.Wait).Add(2*short + 5*time.Millisecond)
	deadline := time.Now().Add(5 * time.Second)
	for {
		now, err := rdb.Time(ctx).Result()
		if err != nil {
			t.Fatal(err)
		}
		if now.After(until) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis's clock at %v, not past %v after 5 s", now, until)
		}
		time.Sleep(5 * time.Millisecond) // between polls of Redis's clock
	}
	if g := acquireOne(t, l1, req); g.Instances != 3 {
		t.Errorf("long-window instance %v after the short window's acquire: %d instances, want 3 (all within its window; the registry holds %v)",
			g.ServerTime.Sub(gs.ServerTime), g.Instances, rdb.HKeys(ctx, ikey).Val())
	}
}
