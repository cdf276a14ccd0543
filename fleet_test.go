package leasequota_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestFleetRemaining: Decision.FleetRemaining is this instance's
// Remaining plus the global level its last lease call for the tenant
// saw, not lowered by another instance's lease until this instance's
// next lease call, which brings the level it leaves.
func TestFleetRemaining(t *testing.T) {
	store := setup(t)
	// Nothing refills during the test; leases of 40 out of 100. No
	// scheduled round runs during the test: lease calls are the requests'.
	q := leasequota.Quota{Rate: 1e-6, Burst: 100, MinLease: 40, MaxLease: 40}
	opts := []leasequota.Option{leasequota.WithDefaultQuota(q), leasequota.WithRefreshInterval(time.Hour),
		leasequota.WithLeaseTTL(3 * time.Hour), leasequota.WithColdStartWait(10 * time.Second)}
	// A waits for a fresh lease when short; B denies at once.
	a := newLimiter(t, store, append(opts, leasequota.WithMaxWait(10*time.Second))...)
	b := newLimiter(t, store, opts...)
	ctx := context.Background()
	check := func(who string, d leasequota.Decision, remaining, fleet int64) {
		t.Helper()
		if !d.Allowed || d.Remaining != remaining || d.FleetRemaining != fleet {
			t.Errorf("%s: %+v, want admitted with Remaining %d, FleetRemaining %d", who, d, remaining, fleet)
		}
	}
	check("A's first request", a.AllowN(ctx, "t", 1), 39, 60+39)
	check("B's first request", b.AllowN(ctx, "t", 1), 39, 20+39)
	// A last saw 60 tokens in the bucket: B's lease is not taken off.
	check("A's second request", a.AllowN(ctx, "t", 1), 38, 60+38)
	// A request for more than A holds waits for A's next lease call, which
	// sees the bucket B left and takes what is left of it.
	d := a.AllowN(ctx, "t", 45)
	level := int64(math.Floor(globalTokens(t, store, "t")))
	if !d.Allowed || d.Reason != leasequota.ReasonRefilled || d.FleetRemaining != d.Remaining+level {
		t.Errorf("A's request for 45: %+v, want admitted after a refill, FleetRemaining = Remaining + %d (the bucket's level)",
			d, level)
	}
	// A denial: the tokens held and the level last seen (20 for B, though
	// A has taken some since).
	if level >= 20 {
		t.Fatalf("the bucket holds %d after A's refill, want less than 20", level)
	}
	if d := b.AllowN(ctx, "t", 50); d.Allowed || d.Remaining != 39 || d.FleetRemaining != 39+20 {
		t.Errorf("B's request for 50: %+v, want denied with Remaining 39, FleetRemaining %d", d, 39+20)
	}
}

// TestAllowAllFleetRemaining: AllowAll's FleetRemaining is the deciding
// tenant's, as its Remaining is.
func TestAllowAllFleetRemaining(t *testing.T) {
	store := setup(t)
	l := newLimiter(t, store, leasequota.WithQuotaFunc(policyQuota), leasequota.WithColdStartWait(10*time.Second))
	ctx := context.Background()
	// ip:a leases its whole Burst of 2, tenant:x 50 of 100.
	d := l.AllowAll(ctx, 1, "tenant:x", "ip:a")
	if !d.Allowed || d.Tenant != "ip:a" || d.Remaining != 1 || d.FleetRemaining != 1 {
		t.Errorf("AllowAll = %+v, want admitted, decided by ip:a with Remaining and FleetRemaining 1", d)
	}
	if d := l.AllowN(ctx, "tenant:x", 1); !d.Allowed || d.Remaining != 48 || d.FleetRemaining != 98 {
		t.Errorf("AllowN(tenant:x) = %+v, want Remaining 48, FleetRemaining 98 (50 in the bucket)", d)
	}
}

// TestAllowAllFleetRemainingTie: of the tenants with the least Remaining,
// AllowAll's decision is the one with the least FleetRemaining, whatever
// their order.
func TestAllowAllFleetRemainingTie(t *testing.T) {
	store := setup(t)
	quotas := map[string]leasequota.Quota{
		"small": {Rate: 1e-6, Burst: 10, MinLease: 5, MaxLease: 5},
		"large": {Rate: 1e-6, Burst: 100, MinLease: 5, MaxLease: 5},
	}
	l := newLimiter(t, store, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quotas[tenant] }),
		leasequota.WithRefreshInterval(time.Hour), leasequota.WithLeaseTTL(3*time.Hour),
		leasequota.WithColdStartWait(10*time.Second))
	ctx := context.Background()
	for _, name := range []string{"small", "large"} {
		if d := l.AllowN(ctx, name, 1); !d.Allowed || d.Remaining != 4 {
			t.Fatalf("AllowN(%s) = %+v, want admitted from a lease of 5", name, d)
		}
	}
	for i, order := range [][]string{{"large", "small"}, {"small", "large"}} {
		d := l.AllowAll(ctx, 1, order...)
		if want := int64(3 - i); !d.Allowed || d.Tenant != "small" || d.Remaining != want || d.FleetRemaining != 5+want {
			t.Errorf("AllowAll(%q) = %+v, want decided by small, Remaining %d, FleetRemaining %d", order, d, want, 5+want)
		}
	}
}
