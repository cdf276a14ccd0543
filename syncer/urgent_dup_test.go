package syncer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/quota"
)

// TestUrgentRoundCountsATenantOnce: a tenant queued twice for an urgent
// round (a miss queued it, a tick planned it and took its urgency, and a
// later miss queued it again before the urgent round ran) counts once
// toward Options.MaxTenants there. The round planned it twice and listed
// it twice as kept: with MaxTenants 1 it found itself one over the cap
// and evicted the syncer's one tenant (tracked 0, Stats().Evicted 1).
func TestUrgentRoundCountsATenantOnce(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, s := clockedSyncer(t, 1)
	defer s.Close()
	ctx := context.Background()
	track := tracker(t, s, quota.Quota{Rate: 1, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: time.Minute})
	c := track("c")
	if err := (<-s.Refill(ctx, c, 10)).Err; err != nil || c.Held() != 10 {
		t.Fatalf("first refill: %v, %d tokens held; want the bucket's 10", err, c.Held())
	}
	for c.Held() > 0 {
		c.Spend(1)
	}
	s.NoteMiss(c, 1) // queued
	clock.Add(3 * time.Second)
	s.Tick(ctx) // plans c: takes its urgency
	s.Wait()
	for c.Held() > 0 {
		c.Spend(1)
	}
	s.NoteMiss(c, 1) // queued again
	for s.Urgent(ctx) {
		s.Wait()
	}
	t.Logf("after the urgent round: %d tracked, evicted %v, Stats().Evicted %d, %+v", s.Len(), c.Evicted(), s.Stats().Evicted, s.Snapshot(c))
	if c.Evicted() || s.Len() != 1 {
		t.Errorf("the one tenant of a syncer of MaxTenants 1 was evicted by an urgent round (tracked %d)", s.Len())
	}
}
