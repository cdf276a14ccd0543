package leasequota_test

import (
	"context"
	"sync"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestRebaseKeepsAnOverrideEqualToTheBase: a quota SetQuota stored stays
// in force over a new answer of the quota function (Invalidate,
// WithQuotaRefresh). But an override equal to the tenant's configured
// quota (an operator pinning a tenant's plan before the plan changes in
// the database) was not recorded as an override when a lease call
// reported it, the quota in force being the same: the Invalidate that
// followed the plan change then put the new plan in force here, over the
// override Redis still applied. Until the tenant's next lease call,
// requests were decided by it: a request of 5 tokens was denied as
// above the Burst (ReasonInvalidN; WaitN: ErrExceedsBurst, "can never be
// admitted") while the quota in force had a Burst of 100.
func TestRebaseKeepsAnOverrideEqualToTheBase(t *testing.T) {
	ctx := context.Background()
	plan := leasequota.Quota{Rate: 100, Burst: 100}
	var mu sync.Mutex
	f := func(string) leasequota.Quota {
		mu.Lock()
		defer mu.Unlock()
		return plan
	}
	l := newLimiter(t, setup(t), leasequota.WithQuotaFunc(f), leasequota.WithManualSync(),
		leasequota.WithColdStartWait(0))
	pinned := plan
	if err := l.SetQuota(ctx, "acme", pinned); err != nil {
		t.Fatal(err)
	}
	// The first request tracks the tenant; its first lease call reports
	// the override.
	l.AllowN(ctx, "acme", 1)
	if !leasequota.SyncUrgent(l, ctx) {
		t.Fatal("no lease call queued by the first request")
	}
	leasequota.SyncDeliver(l)
	if info, ok := l.Tenant("acme"); !ok || info.Tokens == 0 {
		t.Fatalf("after the first lease call: %+v (tracked %v), want tokens leased", info, ok)
	}

	mu.Lock()
	plan = leasequota.Quota{Rate: 1, Burst: 1} // the plan changes in the database
	mu.Unlock()
	l.Invalidate("acme")
	leasequota.SyncQuotas(l)

	if info, _ := l.Tenant("acme"); info.Quota.Rate != pinned.Rate || info.Quota.Burst != pinned.Burst {
		t.Errorf("after Invalidate: quota in force %v/%v, want the stored override's %v/%v", info.Quota.Rate, info.Quota.Burst, pinned.Rate, pinned.Burst)
	}
	if d := l.AllowN(ctx, "acme", 5); d.Reason == leasequota.ReasonInvalidN {
		t.Errorf("AllowN of 5 under an override of Burst %d: %+v", pinned.Burst, d)
	}
}
