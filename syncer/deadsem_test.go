package syncer_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestClusterDeadNodeRefillsLeaveLiveCalls: on a Redis Cluster, urgent
// refills of tenants on a dead master (each hanging until its call
// deadline) must not hold up a live master's calls: a new tenant of the
// live master gets its lease at once.
func TestClusterDeadNodeRefillsLeaveLiveCalls(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		view, err := memstore.New().Instance("me", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		st := &nodeStore{Store: view, unblock: make(chan struct{})}
		s := syncer.New(st, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{}, 1), Cluster: true, CallTimeout: time.Second})
		defer s.Close()
		q := quota.Defaults{Interval: 100 * time.Millisecond, LeaseTTL: 2 * time.Second}.Resolve(quota.Quota{Rate: 100, Burst: 100})
		ctx := context.Background()
		const dead = 8
		for i := range dead {
			tn, err := s.Track(fmt.Sprintf("dead-%d", i), q)
			if err != nil {
				t.Fatal(err)
			}
			s.Refill(ctx, tn, 1)
		}
		synctest.Wait()
		_, hanging, _ := st.counts()
		t.Logf("dead master's calls hanging: %d", hanging)
		live, err := s.Track("live-a", q)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		if r := <-s.Refill(ctx, live, 1); r.Err != nil {
			t.Fatal(r.Err)
		}
		took := time.Since(start)
		t.Logf("live tenant's refill took %v, %d tokens", took, live.Held())
		if took > 0 || live.Held() == 0 {
			t.Fatalf("the live master's refill waited %v behind the dead master's calls (held %d)", took, live.Held())
		}
	})
}
