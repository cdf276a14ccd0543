package lease

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/redisserver"
)

func quotaVersion(t *testing.T, c *Client) int64 {
	t.Helper()
	v, err := c.QuotaVersion(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func inspect(t *testing.T, c *Client, tenant string) Inspection {
	t.Helper()
	in, err := c.Inspect(context.Background(), tenant)
	if err != nil {
		t.Fatal(err)
	}
	return in
}

// TestAdminSetOverrideWithoutBase: without a stored override the bucket is
// not refilled at all (the services' rate is unknown), only capped; with
// one it is refilled at the override's rate, as SetOverride would.
func TestAdminSetOverrideWithoutBase(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	// A rate of 1e9/s refills 1,000 tokens in the microsecond every call
	// on the bucket is at least apart from the previous one.
	fast := Limits{Rate: 1e9, Burst: 40}
	if g, err := c.Acquire(ctx, "drained", fast, 40); err != nil || g.Granted != 40 {
		t.Fatalf("drain = %+v, %v", g, err)
	}
	v0 := quotaVersion(t, c)
	o := Override{Rate: 5, Burst: 10, LeaseTTL: time.Second}
	res, err := c.AdminSetOverride(ctx, "drained", o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Stored || res.Had || res.Tokens != 0 {
		t.Errorf("set without an override before = %+v, want stored, 0 tokens (no refill at the unknown rate), none before", res)
	}
	if got, err := c.GetOverride(ctx, "drained"); err != nil || got == nil || *got != o {
		t.Errorf("GetOverride = %+v, %v; want %+v", got, err, o)
	}
	if v := quotaVersion(t, c); v != v0+1 {
		t.Errorf("quota version %d, want %d", v, v0+1)
	}
	in := inspect(t, c, "drained")
	if in.Burst != 10 || len(in.History) != 1 || in.History[0].Level != 40 {
		t.Errorf("bucket after set: burst %d, history %+v; want burst 10 and one entry at the old burst 40", in.Burst, in.History)
	}
	if in.TTL <= 0 || in.TTL > 3*time.Second {
		t.Errorf("TTL %v, want the new quota's time to full (2 s) plus 1 s", in.TTL)
	}

	// Under an override, the bucket refills at the override's rate first.
	if _, err := c.AdminSetOverride(ctx, "under", Override{Rate: 1e9, Burst: 40}); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Acquire(ctx, "under", Limits{Rate: 1, Burst: 1}, 40); err != nil || g.Granted != 40 {
		t.Fatalf("drain under the override = %+v, %v", g, err)
	}
	res, err = c.AdminSetOverride(ctx, "under", o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Stored || !res.Had || res.Tokens != 10 {
		t.Errorf("set under an override = %+v, want stored, 10 tokens (refilled at 1e9/s, capped at the new burst), one before", res)
	}

	// A missing bucket without an override is left to the next acquire,
	// which creates it full at the new burst.
	res, err = c.AdminSetOverride(ctx, "new", o)
	if err != nil || res.Stored || res.Had {
		t.Fatalf("set on a new tenant = %+v, %v; want nothing stored", res, err)
	}
	if exists(t, rdb, c.Key("new")) {
		t.Error("set on a new tenant created its bucket")
	}
	if g, err := c.Acquire(ctx, "new", Limits{Rate: 1, Burst: 1000}, 1000); err != nil || g.Granted != 10 {
		t.Errorf("acquire after set = %+v, %v; want the new burst, 10", g, err)
	}

	// Bad overrides are refused before Redis.
	v1 := quotaVersion(t, c)
	for _, bad := range []Override{{Rate: math.NaN(), Burst: 1}, {Rate: -1, Burst: 1}, {Rate: 0, Burst: 1}, {Rate: 1, Burst: 0}, {Rate: 1, Burst: 1, LeaseTTL: -1}} {
		if _, err := c.AdminSetOverride(ctx, "bad", bad); !errors.Is(err, ErrBadRequest) {
			t.Errorf("AdminSetOverride(%+v) = %v, want ErrBadRequest", bad, err)
		}
	}
	if exists(t, rdb, QuotaKey(c.Key("bad"))) || quotaVersion(t, c) != v1 {
		t.Error("a refused override was written")
	}
}

// TestAdminDeleteOverrideWithoutBase: delete refills at the override's
// rate up to the change, and leaves the bucket, without expiry, to the
// services' next acquire, which caps it at their burst.
func TestAdminDeleteOverrideWithoutBase(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	v0 := quotaVersion(t, c)
	res, err := c.AdminDeleteOverride(ctx, "none")
	if err != nil || res != (AdminResult{}) {
		t.Fatalf("delete without an override = %+v, %v; want nothing done", res, err)
	}
	if quotaVersion(t, c) != v0 || exists(t, rdb, c.Key("none")) {
		t.Error("delete without an override wrote something")
	}

	if _, err := c.AdminSetOverride(ctx, "t", Override{Rate: 1e9, Burst: 40}); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Acquire(ctx, "t", Limits{Rate: 1, Burst: 1}, 40); err != nil || g.Granted != 40 {
		t.Fatalf("drain = %+v, %v", g, err)
	}
	res, err = c.AdminDeleteOverride(ctx, "t")
	if err != nil || !res.Had || !res.Stored || res.Tokens != 40 {
		t.Fatalf("delete = %+v, %v; want 40 tokens (refilled at the override's rate, capped at its burst)", res, err)
	}
	if o, err := c.GetOverride(ctx, "t"); err != nil || o != nil {
		t.Fatalf("override after delete = %+v, %v", o, err)
	}
	if quotaVersion(t, c) != v0+2 {
		t.Errorf("quota version %d, want %d", quotaVersion(t, c), v0+2)
	}
	if ttl := pttl(t, rdb, c.Key("t")); ttl != -1 {
		t.Errorf("bucket PTTL %d after delete, want -1 (kept until a service acquires)", ttl)
	}
	// The services' quota applies from the next acquire: capped at its
	// burst, and the key expires again.
	if g, err := c.Acquire(ctx, "t", Limits{Rate: 1, Burst: 10}, 100); err != nil || g.Granted != 10 {
		t.Errorf("acquire after delete = %+v, %v; want the services' burst, 10", g, err)
	}
	if ttl := pttl(t, rdb, c.Key("t")); ttl <= 0 {
		t.Errorf("bucket PTTL %d after the acquire, want a TTL", ttl)
	}

	// A slow override: the bucket is stored at what it refilled at that
	// rate, not at any other.
	if _, err := c.AdminSetOverride(ctx, "slow", Override{Rate: 0.001, Burst: 40}); err != nil {
		t.Fatal(err)
	}
	if g, err := c.Acquire(ctx, "slow", Limits{Rate: 1e9, Burst: 1000}, 40); err != nil || g.Granted != 40 {
		t.Fatalf("drain = %+v, %v", g, err)
	}
	if res, err := c.AdminDeleteOverride(ctx, "slow"); err != nil || !res.Stored || res.Tokens >= 1 {
		t.Errorf("delete of a slow override = %+v, %v; want under a token", res, err)
	}
	if in := inspect(t, c, "slow"); in.Tokens >= 1 || in.TTL != -1 {
		t.Errorf("bucket after delete: %v tokens, TTL %v; want under a token, no expiry", in.Tokens, in.TTL)
	}

	// A missing bucket under an override is full at the override's burst.
	if _, err := c.AdminSetOverride(ctx, "idle", Override{Rate: 1, Burst: 7}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.AdminDeleteOverride(ctx, "idle"); err != nil || !res.Stored || res.Tokens != 7 {
		t.Errorf("delete on a missing bucket = %+v, %v; want 7 tokens stored", res, err)
	}
}

// TestInspect reads what instances and an override left in Redis.
func TestInspect(t *testing.T) {
	ctx := context.Background()
	prefix := redisserver.Prefix(t)
	a, b := instanceClient(t, prefix, "inst-a"), instanceClient(t, prefix, "inst-b")
	lim := Limits{Rate: 10, Burst: 1000}
	for _, c := range []*Client{a, b} {
		g := acquireOne(t, c, Request{Tenant: "acme", Limits: lim, Want: 500, Demand: 20})
		if g.Granted != 500 {
			t.Fatalf("grant %+v, want 500", g)
		}
	}
	in := inspect(t, a, "acme")
	if !in.Exists || !in.Named || in.Tenant != "acme" || in.Burst != 1000 || in.Override != nil {
		t.Fatalf("inspection %+v", in)
	}
	if in.Tokens > 1 || in.Updated > in.Now || in.Now-in.Updated > int64(time.Minute/time.Microsecond) {
		t.Errorf("bucket level %v at %d (now %d), want about 0 just before now", in.Tokens, in.Updated, in.Now)
	}
	ids := []string{}
	for _, e := range in.Instances {
		ids = append(ids, e.ID)
		if e.Demand != 20 || e.LastAcquire > in.Now || e.LastAcquire < in.Updated-int64(time.Minute/time.Microsecond) {
			t.Errorf("entry %+v, want demand 20 and a recent acquire", e)
		}
	}
	if !slices.Equal(ids, []string{"inst-a", "inst-b"}) {
		t.Errorf("instances %v, want inst-a, inst-b", ids)
	}
	if in.Registry == nil || in.Registry.Instances != 2 || in.Registry.Demand != 40 {
		t.Errorf("registry summary %+v, want 2 instances demanding 40/s", in.Registry)
	}
	if len(in.History) == 0 || in.History[0].Level != 1000 {
		t.Errorf("history %+v, want the first entry at the full level", in.History)
	}
	// Without an override the rate comes from the key's TTL: within 1%.
	lv := in.Level()
	if !lv.Known || lv.Exact || math.Abs(lv.Rate-10) > 0.1 || lv.Burst != 1000 {
		t.Errorf("level %+v, want an estimated rate of 10/s", lv)
	}
	if lv.Tokens < in.Tokens || lv.Tokens > in.Tokens+10*float64(in.Now-in.Updated)/1e6*1.01+1e-9 {
		t.Errorf("level now %v, want the stored %v refilled at 10/s since", lv.Tokens, in.Tokens)
	}

	// A release id is remembered; an override is read back with its name.
	if _, err := a.Release(ctx, "acme", lim, 5, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := a.AdminSetOverride(ctx, "acme", Override{Rate: 2, Burst: 100}); err != nil {
		t.Fatal(err)
	}
	in = inspect(t, a, "acme")
	if in.Releases != 1 || in.Override == nil || in.Override.Rate != 2 {
		t.Errorf("after a release and a set: releases %d, override %+v", in.Releases, in.Override)
	}
	if lv := in.Level(); !lv.Exact || lv.Rate != 2 || lv.Burst != 100 || lv.Tokens > 100 {
		t.Errorf("level under an override %+v, want exact at 2/s, burst 100", lv)
	}

	// A missing bucket: full, at a burst only an override tells.
	none := inspect(t, a, "nobody")
	if none.Exists || none.Override != nil || len(none.Instances) != 0 || !none.Level().Full || none.Level().Known {
		t.Errorf("missing bucket: %+v, level %+v", none, none.Level())
	}
}

// TestBucketSampler: successive Next calls return at most count keys and
// cover every bucket in a pass; ReadBuckets names their tenants, the long
// one by its override's stored name.
func TestBucketSampler(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	want := map[string]bool{}
	for i := range 40 {
		tenant := "tenant-" + string(rune('a'+i%26)) + strings.Repeat("x", i)
		if _, err := c.Acquire(ctx, tenant, lim, 1); err != nil {
			t.Fatal(err)
		}
		want[tenant] = true
	}
	long := strings.Repeat("L", 300)
	if _, err := c.AdminSetOverride(ctx, long, Override{Rate: 1, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Acquire(ctx, long, lim, 1); err != nil {
		t.Fatal(err)
	}
	want[long] = true

	s := c.NewBucketSampler()
	if _, err := s.Next(ctx, 0); !errors.Is(err, ErrBadRequest) {
		t.Errorf("Next(0) = %v, want ErrBadRequest", err)
	}
	// A pass visits the whole keyspace, which holds other tests' keys
	// too: each call's SCAN looks at about 5 keys, or at 50 empty slots
	// of the table.
	dbsize, err := rdb.DBSize(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	limit := 100 + int(dbsize)
	seen := map[string]bool{}
	for calls := 0; s.Passes() == 0; calls++ {
		if calls > limit {
			t.Fatalf("no pass over 41 keys after %d calls (%d keys in the database)", limit, dbsize)
		}
		keys, err := s.Next(ctx, 5)
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) > 5 {
			t.Fatalf("Next(5) returned %d keys", len(keys))
		}
		states, errs, err := c.ReadBuckets(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, st := range states {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if !st.Named || !st.Exists || st.Key != keys[i] {
				t.Fatalf("state %+v of %q", st, keys[i])
			}
			seen[st.Tenant] = true
		}
	}
	for tenant := range want {
		if !seen[tenant] {
			t.Errorf("a pass did not return %.20q", tenant)
		}
	}
	if len(seen) != len(want) {
		t.Errorf("saw %d tenants, want %d", len(seen), len(want))
	}
}

// TestAdminChangesDropTheSummary: the registry summary in a bucket (rg)
// holds a water level computed for the rate then in force, so the
// operator's set and delete drop it, as quota.lua's do (the conformance
// case "overrides"), and the next acquire computes it again.
func TestAdminChangesDropTheSummary(t *testing.T) {
	ctx := context.Background()
	_, rdb, _ := setup(t)
	c, err := NewClient(rdb, redisserver.Prefix(t), WithInstance("a", time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	key := c.Key("t")
	lim := Limits{Rate: 10, Burst: 10}
	hasSummary := func(what string, want bool) {
		t.Helper()
		if got, err := rdb.HExists(ctx, key, "rg").Result(); err != nil || got != want {
			t.Fatalf("%s: rg in the bucket %v (%v), want %v", what, got, err, want)
		}
	}
	acquireOne(t, c, Request{Tenant: "t", Limits: lim, Want: 1, Demand: 5})
	hasSummary("after an acquire", true)
	if _, err := c.AdminSetOverride(ctx, "t", Override{Rate: 1000, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	hasSummary("after the operator's set", false)
	acquireOne(t, c, Request{Tenant: "t", Limits: lim, Want: 1, Demand: 5})
	hasSummary("after the next acquire", true)
	if _, err := c.AdminDeleteOverride(ctx, "t"); err != nil {
		t.Fatal(err)
	}
	hasSummary("after the operator's delete", false)
}
