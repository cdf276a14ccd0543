package syncer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestMaxTenantsKeepsAHeldBackTenantItsRequestsHit: over MaxTenants, a
// round evicts the least recently active tenant, and a tenant whose call
// is held back (its bucket dry) while its requests keep missing is active.
// Rounds pass such a tenant by (quiet.go), and its activity was its last
// plan's: 75 ms into the test where cool's and new's was 225 ms, and hot
// was evicted. All three have requests at every tick, so all three are
// active as of the last: the tie goes by name, and cool is evicted.
func TestMaxTenantsKeepsAHeldBackTenantItsRequestsHit(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, s := clockedSyncer(t, 2)
	defer s.Close()
	ctx := context.Background()
	lease := func(tn *syncer.Tenant, n int64) {
		t.Helper()
		if err := (<-s.Refill(ctx, tn, n)).Err; err != nil || tn.Held() != n {
			t.Fatalf("%s's first refill: %v, %d tokens held; want %d", tn.Name(), err, tn.Held(), n)
		}
	}
	// hot spends its lease at once, and its requests go on missing at
	// every tick: its calls are held back until its dry bucket refills a
	// token (10 s). cool and then new spend a token at every tick from
	// leases that last.
	hot := tracker(t, s, quota.Quota{Rate: 0.1, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: time.Minute})("hot")
	lease(hot, 10)
	for hot.Held() > 0 {
		hot.Spend(1)
	}
	track := tracker(t, s, quota.Quota{Rate: 0.1, Burst: 100_000, MinLease: 1, MaxLease: 1000, LeaseTTL: time.Minute})
	cool := track("cool")
	lease(cool, 1000)
	var new *syncer.Tenant
	for i := range 12 {
		if i == 8 {
			// A third tenant: one of the three must go.
			new = track("new")
			lease(new, 1000)
		}
		hot.NoteMiss(1)
		for _, tn := range []*syncer.Tenant{cool, new} {
			if tn != nil {
				tn.Spend(1)
			}
		}
		clock.Add(25 * time.Millisecond)
		s.Tick(ctx)
		s.Wait()
		if s.Stats().Evicted > 0 {
			break
		}
	}
	t.Logf("evicted: hot %v, cool %v, new %v", hot.Evicted(), cool.Evicted(), new.Evicted())
	if got := s.Stats().Evicted; got != 1 {
		t.Fatalf("%d tenants evicted, want 1 of the 3 (MaxTenants 2)", got)
	}
	if hot.Evicted() {
		t.Error("the tenant whose requests missed at every tick was evicted as the least recently active")
	}
}
