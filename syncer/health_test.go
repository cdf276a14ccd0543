package syncer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestEvictedFailingTenantIsNotDegraded: on a Redis Cluster, a tenant
// evicted while its node is down counts as failing no more. Only a
// success of the same tenant took it off the failing tenants, so the
// Syncer stayed Degraded for good, after the node came back and other
// tenants leased again, with no OnDegraded(false).
func TestEvictedFailingTenantIsNotDegraded(t *testing.T) {
	clock, view := clockedView(t)
	st := &lateNodeStore{Store: view, clock: clock, late: map[string]time.Duration{}, out: map[string]bool{}}
	var (
		mu      sync.Mutex
		changes []bool
	)
	s := syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		Cluster:     true,
		CallTimeout: 10 * time.Second,
		IdleTimeout: time.Second,
		OnDegraded: func(degraded bool, _ error) {
			mu.Lock()
			changes = append(changes, degraded)
			mu.Unlock()
		},
	})
	defer s.Close()
	ctx := context.Background()
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	st.set("c", 0, true) // node c does not answer
	c := track("c-0")
	<-s.Refill(ctx, c, 1)
	if !c.Failing() || !s.Degraded() {
		t.Fatalf("after a failed call: failing %v, Degraded %v; want both", c.Failing(), s.Degraded())
	}
	// Its requests stop while the node is down: idle, it is evicted.
	for i := 0; s.Len() > 0; i++ {
		if i == 1000 {
			t.Fatalf("the idle tenant was not evicted in %d ticks", i)
		}
		clock.Add(20 * time.Millisecond)
		s.Tick(ctx)
		s.Wait()
	}
	if s.Degraded() {
		t.Errorf("Degraded with the only failing tenant evicted")
	}
	mu.Lock()
	got := append([]bool(nil), changes...)
	mu.Unlock()
	if len(got) != 2 || !got[0] || got[1] {
		t.Errorf("OnDegraded reported %v, want [true false]", got)
	}
	// The node comes back: a tenant there leases, and nothing is failing.
	st.set("c", 0, false)
	d := track("c-1")
	<-s.Refill(ctx, d, 1)
	if d.Held() == 0 || d.Failing() || s.Degraded() {
		t.Errorf("a tenant on the node back: held %d, failing %v, Degraded %v; want tokens, neither", d.Held(), d.Failing(), s.Degraded())
	}
}
