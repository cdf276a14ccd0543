package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestSyncerOnMemstore runs the Syncer on the in-process store with one
// fake clock for the store and the syncer: the scenario of
// TestReturnAfterRefillOvertookRound (an urgent refill overtakes a round,
// another instance drains the refilled bucket, everything goes back),
// deterministic, without Redis and without waiting for the bucket.
func TestSyncerOnMemstore(t *testing.T) {
	now, advance, store, mine, other := syncer.MemstorePair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const name = "overtaken"
	lim := quota.Quota{Rate: 1000, Burst: 100, MinLease: 1, MaxLease: 40, LeaseTTL: time.Minute}
	planner := syncer.NewPlanner(syncer.Config{}, 1)
	s := syncer.New(mine, syncer.Options{Planner: planner, Now: now})
	tn, err := s.Track(name, lim)
	if err != nil {
		t.Fatal(err)
	}

	var refilled, othersTook int64
	overtaken := func(yield func(*syncer.Tenant) bool) {
		// The round has read its clock; the refill runs 10 ms later,
		// before the round reaches the tenant.
		advance(10 * time.Millisecond)
		r := <-s.Refill(ctx, tn, 40)
		if r.Err != nil {
			t.Errorf("refill: %v", r.Err)
			return
		}
		refilled = s.Stats().Granted
		// The bucket refills to full in 40 ms; the other instance takes 95.
		advance(40 * time.Millisecond)
		res, err := other.AcquireMany(ctx, []lease.Request{{Tenant: name, Limits: quota.Bucket(lim), Want: 95}}, nil)
		if err != nil || res[0].Err != nil {
			t.Errorf("the other instance's acquire: %v, %v", err, res[0].Err)
			return
		}
		othersTook = res[0].Grant.Granted
		tn.NoteMiss(60)
		yield(tn)
	}
	s.Round(ctx, overtaken)
	if t.Failed() {
		return
	}
	checkOvertakenReturns(t, ctx, s, refilled, othersTook)
	if b := store.Tenant(name).Bucket; b == nil || b.Tokens > float64(lim.Burst) {
		t.Errorf("bucket after the returns: %+v", b)
	}
}
