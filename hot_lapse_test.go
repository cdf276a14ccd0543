package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestHotTenantLapseDeniedAtOnce: a busy tenant (a request of 2 tokens
// every millisecond, against a Rate of 1 and a Burst of 3) holds a lease
// of 1 token its requests cannot spend while its bucket is dry, its lease
// calls held back until the bucket refills. That token's lease expires
// unspent; the syncer still keeps a lease for the tenant (its demand, 2,000
// tokens a second, sizes one), only the bucket is dry. Its requests are
// misses on an exhausted quota, denied at once without WithMaxWait. Taken
// for a tenant the syncer keeps no lease for (syncer.Tenant.Cold, its
// last tokens expired unspent), the next request waited WithColdStartWait
// (100 ms) for a lease that the dry bucket could not give, then was
// denied.
func TestHotTenantLapseDeniedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 3, LeaseTTL: 300 * time.Millisecond}))
		ctx := context.Background()
		if d := l.AllowN(ctx, "busy", 2); !d.Allowed {
			t.Fatalf("first request: %v", d.Reason)
		}
		waited := 0
		end := time.Now().Add(3 * time.Second)
		for time.Now().Before(end) {
			start := time.Now()
			d := l.AllowN(ctx, "busy", 2)
			if el := time.Since(start); el > 0 || d.Reason == leasequota.ReasonColdStart {
				if waited++; waited <= 3 {
					t.Errorf("a request of a busy tenant, 1 ms after the one before: waited %v, %v (allowed %v); want a decision at once", el, d.Reason, d.Allowed)
				}
			}
			time.Sleep(time.Millisecond)
		}
		if waited > 0 {
			t.Errorf("%d requests of a busy tenant waited", waited)
		}
	})
}
