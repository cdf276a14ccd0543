package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestRefundSkipsFifthTenantAdmittedByMode: Refund of an AllowAll
// admission gives back nothing for a tenant its failure mode admitted
// (nothing was leased for it), whatever its place in the call. The fifth
// and later tenants were not marked: a FailOpen admission of the fifth
// was counted refunded and forfeited (Stats.Refunded, Stats.Forfeited,
// and through them the utilization gauge's tokens spent).
func TestRefundSkipsFifthTenantAdmittedByMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := faultstore.New(memstore.New())
		l := newLimiter(t, store, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if tenant == "e" {
				return leasequota.Quota{Rate: 0.001, Burst: 1, FailureMode: leasequota.FailOpen}
			}
			return leasequota.Quota{Rate: 1, Burst: 100, MinLease: 50, FailureMode: leasequota.FailOpen}
		}))
		t.Cleanup(store.SetUp) // before Close (cleanups run last first)
		tenants := []string{"a", "b", "c", "d", "e"}
		for _, tenant := range tenants {
			if !l.Allow(tenant) {
				t.Fatalf("%s: first request denied", tenant)
			}
		}
		// Redis goes down; e's lease is spent, and its next lease call fails.
		store.SetDown(nil)
		for i := 0; ; i++ {
			if d := l.AllowN(ctx, "e", 1); d.Reason == leasequota.ReasonFailOpen {
				break
			}
			if i == 100 {
				t.Fatal("e not decided by its failure mode after 10 s of outage")
			}
			time.Sleep(100 * time.Millisecond)
		}
		d := l.AllowAll(ctx, 1, tenants...)
		if !d.Allowed {
			t.Fatalf("AllowAll = %+v, want admitted", d)
		}
		before := l.Stats()
		if err := l.Refund(&d, tenants...); err != nil {
			t.Fatal(err)
		}
		after := l.Stats()
		if got := after.Refunded - before.Refunded; got != 4 {
			t.Errorf("Refund of AllowAll(1) of 4 leased tenants and 1 admitted by FailOpen: Refunded +%d, want +4", got)
		}
		if got := after.Forfeited - before.Forfeited; got != 0 {
			t.Errorf("Refund forfeited %d tokens, want 0 (the leased ones went back into their leases)", got)
		}
	})
}
