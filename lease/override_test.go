package lease

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/peaks"
)

func TestOverrideRoundTrip(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	base := Limits{Rate: 100, Burst: 50}
	if o, err := c.GetOverride(ctx, "t"); err != nil || o != nil {
		t.Fatalf("GetOverride before any = %+v, %v; want nil, nil", o, err)
	}
	want := Override{Rate: 0.5, Burst: 7, MinLease: 2, MaxLease: 3, LeaseTTL: 1500 * time.Millisecond, Mode: 2}
	if _, err := c.SetOverride(ctx, "t", base, want); err != nil {
		t.Fatal(err)
	}
	qkey := QuotaKey(c.Key("t"))
	if Slot(qkey) != Slot(c.Key("t")) {
		t.Errorf("quota key %q is not in the bucket's slot", qkey)
	}
	if ttl, _ := rdb.PTTL(ctx, qkey).Result(); ttl != -1 {
		t.Errorf("quota key PTTL %v, want none (-1)", ttl)
	}
	got, err := c.GetOverride(ctx, "t")
	if err != nil || got == nil || *got != want {
		t.Fatalf("GetOverride = %+v, %v; want %+v", got, err, want)
	}
	g, err := c.Acquire(ctx, "t", base, 100)
	if err != nil {
		t.Fatal(err)
	}
	if g.Granted != 7 || g.Override == nil || *g.Override != want {
		t.Fatalf("acquire under override = %+v (override %+v); want 7 granted (the override's burst) and the override", g, g.Override)
	}
	if _, err := c.DeleteOverride(ctx, "t", base); err != nil {
		t.Fatal(err)
	}
	if o, err := c.GetOverride(ctx, "t"); err != nil || o != nil {
		t.Fatalf("GetOverride after delete = %+v, %v", o, err)
	}
	g, err = c.Acquire(ctx, "t", base, 0)
	if err != nil || g.Override != nil {
		t.Fatalf("acquire after delete = %+v, %v; want no override", g, err)
	}
	// Bad overrides never reach Redis.
	for _, o := range []Override{{Rate: 0, Burst: 1}, {Rate: math.NaN(), Burst: 1}, {Rate: 1, Burst: 0}, {Rate: 1, Burst: 1, MinLease: -1}} {
		if _, err := c.SetOverride(ctx, "t", base, o); !errors.Is(err, ErrBadRequest) {
			t.Errorf("SetOverride(%+v) = %v, want ErrBadRequest", o, err)
		}
	}
}

// TestOverrideKeepsBucketConsistent checks the change rule: refill at the
// old rate up to the change, cap at the new burst, refill at the new rate
// after it.
func TestOverrideKeepsBucketConsistent(t *testing.T) {
	ctx := context.Background()
	c, _, _ := setup(t)
	base := Limits{Rate: 1000, Burst: 1000}
	// Empty the bucket.
	g0, err := c.Acquire(ctx, "t", base, 1000)
	if err != nil || g0.Granted != 1000 {
		t.Fatalf("%+v, %v", g0, err)
	}
	// Lower the rate to 1/s with a big burst: the tokens accrued so far at
	// 1000/s are kept (no loss below the new cap), later ones come at 1/s.
	tokens, err := c.SetOverride(ctx, "t", base, Override{Rate: 1, Burst: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	g1, err := c.Acquire(ctx, "t", base, 0)
	if err != nil {
		t.Fatal(err)
	}
	el := secondsBetween(g0, g1)
	if tokens > 1000*el+1e-6 || g1.Tokens > tokens+1*el+1e-6 || g1.Tokens < tokens {
		t.Errorf("after lowering the rate: %.6f at the change, %.6f %.3fs after the first acquire; want change <= 1000*%.3f and growth <= 1/s", tokens, g1.Tokens, el, el)
	}
	// Raising the burst of a full (missing) bucket gives no free tokens.
	c2, rdb2, _ := setup(t)
	tokens, err = c2.SetOverride(ctx, "u", Limits{Rate: 1, Burst: 10}, Override{Rate: 1, Burst: 1000})
	if err != nil || tokens != 10 {
		t.Fatalf("raising the burst of a full bucket: %v tokens, %v; want 10", tokens, err)
	}
	// Lowering the burst caps the tokens.
	tokens, err = c2.SetOverride(ctx, "u", Limits{Rate: 1, Burst: 10}, Override{Rate: 1, Burst: 3})
	if err != nil || tokens != 3 {
		t.Fatalf("lowering the burst: %v tokens, %v; want 3", tokens, err)
	}
	// Deleting goes back to the base, capped by it.
	tokens, err = c2.DeleteOverride(ctx, "u", Limits{Rate: 1, Burst: 2})
	if err != nil || tokens != 2 {
		t.Fatalf("delete: %v tokens, %v; want 2", tokens, err)
	}
	// Release credits up to the override's burst, not the caller's.
	base2 := Limits{Rate: 1, Burst: 2}
	if _, err := c2.SetOverride(ctx, "u", base2, Override{Rate: 1e-9, Burst: 5}); err != nil {
		t.Fatal(err)
	}
	waitBeyondAge(t, rdb2)
	start := time.Now()
	g, err := c2.Acquire(ctx, "u", base2, 2)
	if err != nil || g.Granted != 2 {
		t.Fatalf("acquire under override: %+v, %v", g, err)
	}
	// The peak since is the level before the grant's debit, about 2,
	// recorded rounded up (to 8 significant bits).
	r, err := c2.Release(ctx, "u", base2, 100, ageSince(start))
	if peak := peaks.Round(g.Tokens + 2); err != nil || math.Abs(r.Credited-(5-peak)) > 1e-6 || math.Abs(r.Tokens-(g.Tokens+5-peak)) > 1e-6 {
		t.Fatalf("release under override: %+v, %v; want %v credited (burst 5 - peak %v)", r, err, 5-peak, peak)
	}
}

// TestOverrideTheClientsCannotReadIsRefused, on redis-server: quota.lua
// and admin.lua refuse, without a write, an override whose fields the
// clients could not read back (overrideOf): a mode above 255, a burst
// above MaxBurst, a rate above MaxRate, an exponent, a space or a sign in
// a whole number, a hex rate. And acquire.lua refuses such an override
// stored by other means as a corrupt quota, before it debits the bucket.
// It applied them, debited the bucket and replied with the fields, which
// the client refused (ErrBadReply): the tokens were lost, call after call.
func TestOverrideTheClientsCannotReadIsRefused(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	lim := Limits{Rate: 1, Burst: 10}
	for i, f := range [][6]string{
		{"1", "10", "0", "0", "0", "300"},
		{"1", "2000000000000", "0", "0", "0", "0"},
		{"2e12", "10", "0", "0", "0", "0"},
		{"1", "10", "1e3", "0", "0", "0"},
		{"1", "10", " 5", "0", "0", "0"},
		{"1", "10", "0", "-1", "0", "0"},
		{"1", "10", "0", "0", "99999999999999999999", "0"},
		{"0x10", "10", "0", "0", "0", "0"},
		{"+1", "10", "0", "0", "0", "0"},
	} {
		tenant := fmt.Sprintf("t%d", i)
		key := c.Key(tenant)
		qkey := QuotaKey(key)
		viaQuota := quotaScript.run(ctx, rdb, []string{key, qkey}, "set", "1", "10", f[0], f[1], f[2], f[3], f[4], f[5], tenant).Err()
		viaAdmin := adminScript.run(ctx, rdb, []string{key, qkey}, "set", f[0], f[1], f[2], f[3], f[4], f[5], tenant).Err()
		for what, err := range map[string]error{"quota.lua": viaQuota, "admin.lua": viaAdmin} {
			if err == nil || !strings.Contains(err.Error(), "bad argument") {
				t.Errorf("%s set %q: %v, want a bad argument", what, f, err)
			}
		}
		if n, err := rdb.Exists(ctx, key, qkey).Result(); err != nil || n != 0 {
			t.Fatalf("after the refused sets of %q, %d of the bucket and override keys exist (%v)", f, n, err)
		}
		// Stored by other means: the acquire is refused before its debit.
		if err := rdb.HSet(ctx, qkey, "r", f[0], "b", f[1], "min", f[2], "max", f[3], "ttl", f[4], "mode", f[5]).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(ctx, tenant, lim, 3); err == nil || !strings.Contains(err.Error(), "corrupt quota") {
			t.Errorf("acquire under a stored %q: %v, want a corrupt quota", f, err)
		}
		if n, err := rdb.Exists(ctx, key).Result(); err != nil || n != 0 {
			t.Errorf("acquire under a stored %q made the bucket (%d, %v): it debited it", f, n, err)
		}
	}
	// What the clients write is taken, the largest values included.
	if _, err := c.SetOverride(ctx, "ok", lim, Override{Rate: MaxRate, Burst: MaxBurst, MinLease: 1, MaxLease: MaxBurst, LeaseTTL: math.MaxInt64, Mode: 255}); err != nil {
		t.Fatalf("SetOverride of the largest values: %v", err)
	}
	if o, err := c.GetOverride(ctx, "ok"); err != nil || o == nil || o.Burst != MaxBurst || o.LeaseTTL != math.MaxInt64 {
		t.Fatalf("GetOverride of the largest values: %+v, %v", o, err)
	}
	if _, err := c.Acquire(ctx, "ok", lim, 3); err != nil {
		t.Fatalf("acquire under the largest override: %v", err)
	}
}

// TestQuotaChangeOverACorruptOverride: an override the acquire and release
// scripts refuse as corrupt (read_override: a rate past 1e12, or written
// as hex, or with a space) was never in force: they failed, and the bucket stayed as the
// base quota left it. SetOverride and AdminSetOverride replace it taking
// the base quota as the old one (SetOverride), or no refill (admin), as
// for any corrupt override; quota.lua and admin.lua judged it by a looser
// rule than read_override and refilled the drained bucket at its rate:
// full at once.
func TestQuotaChangeOverACorruptOverride(t *testing.T) {
	ctx := context.Background()
	c, rdb, _ := setup(t)
	base := Limits{Rate: 1e-6, Burst: 100}
	for i, r := range []string{"1e13", "0x10000000", " 1e9"} {
		for _, admin := range []bool{false, true} {
			tenant := fmt.Sprintf("t%d-%v", i, admin)
			if g, err := c.Acquire(ctx, tenant, base, 100); err != nil || g.Granted != 100 {
				t.Fatalf("drain: %+v, %v", g, err)
			}
			qkey := QuotaKey(c.Key(tenant))
			if err := rdb.HSet(ctx, qkey, "r", r, "b", "100", "min", "0", "max", "0", "ttl", "0", "mode", "0").Err(); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Acquire(ctx, tenant, base, 1); err == nil || !strings.Contains(err.Error(), "corrupt quota") {
				t.Fatalf("rate %q: acquire: %v, want a corrupt quota", r, err)
			}
			var tokens float64
			if admin {
				res, err := c.AdminSetOverride(ctx, tenant, Override{Rate: 1e-6, Burst: 100})
				if err != nil {
					t.Fatal(err)
				}
				tokens = res.Tokens
			} else {
				var err error
				if tokens, err = c.SetOverride(ctx, tenant, base, Override{Rate: 1e-6, Burst: 100}); err != nil {
					t.Fatal(err)
				}
			}
			if tokens > 1 {
				t.Errorf("rate %q, admin %v: a drained bucket after replacing an override never in force: %v tokens, want about 0", r, admin, tokens)
			}
		}
	}
}
