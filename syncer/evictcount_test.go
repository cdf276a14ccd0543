package syncer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestEvictedAdmissionsCountOnce: every admission from an evicted
// tenant's lease counts once in LeaseTotals, whenever it was made. The
// registry summed an evicted tenant's admissions when it removed the
// tenant, and the tenant was drained after that: a request holding it
// spent its tokens in between, admitted and counted nowhere (754 of 60
// million in a stress test). Here the request is made at a point of the
// eviction between the two: a Cluster-mode tenant evicted while its lease
// calls fail is taken off the failing tenants there, and the last one
// reports OnDegraded(false), from which the test spends. Then a
// multi-tenant decision takes back an admission made before the eviction
// (Syncer.Uncount): taken off the evicted tenant, it was lost too.
func TestEvictedAdmissionsCountOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	st := &recordingStore{Store: view}
	var (
		s        *syncer.Syncer
		c        *syncer.Tenant
		admitted int64 // the admissions made from c's lease
		inside   bool  // OnDegraded(false) ran during the eviction
		during   int64 // LeaseTotals' admissions there
	)
	spend := func() {
		if ok, _ := c.Spend(1); ok {
			admitted++
		}
	}
	s = syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		Cluster:     true,
		CallTimeout: 10 * time.Second,
		IdleTimeout: time.Second,
		OnDegraded: func(degraded bool, _ error) {
			if degraded || c == nil {
				return
			}
			// c is evicted, being taken off the failing tenants: a
			// request that looked it up before may still spend from it.
			inside = true
			spend()
			during, _ = s.LeaseTotals()
		},
	})
	defer s.Close()
	ctx := context.Background()
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Minute})
	c = track("c-0")
	if err := (<-s.Refill(ctx, c, 1)).Err; err != nil || c.Held() < 3 {
		t.Fatalf("first refill: %v, %d tokens held; want a lease", err, c.Held())
	}
	spend()
	spend()
	// Redis fails: c's next call fails, its lease held.
	st.fail.Store(true)
	clock.Add(150 * time.Millisecond) // past the hold-back after a grant
	<-s.Refill(ctx, c, c.Held()+1)
	if !c.Failing() {
		t.Fatalf("c is not failing after a failed call: %+v", s.Snapshot(c))
	}
	for i := 0; !c.Evicted(); i++ {
		if i == 1000 {
			t.Fatalf("c was not evicted in %d ticks", i)
		}
		clock.Add(20 * time.Millisecond)
		s.Tick(ctx)
		s.Wait()
	}
	if !inside {
		t.Fatal("OnDegraded(false) did not run during the eviction")
	}
	if during != admitted {
		t.Errorf("LeaseTotals during the eviction: %d admitted, want %d", during, admitted)
	}
	if got, _ := s.LeaseTotals(); got != admitted {
		t.Errorf("LeaseTotals after the eviction: %d admitted, want %d", got, admitted)
	}
	// A multi-tenant decision gives back an admission made before the
	// eviction.
	s.Uncount(c)
	admitted--
	if got, _ := s.LeaseTotals(); got != admitted {
		t.Errorf("LeaseTotals after an admission was taken back: %d admitted, want %d", got, admitted)
	}
}
