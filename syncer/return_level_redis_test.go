package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestReturnRaisesSeenLevel, on a real Redis: tokens given back are in
// the tenant's bucket as the release script's reply says, and the
// tenant's RetryAfter counts them there (leaseState.sawReturn). A tenant
// of Rate 0.001/s leases its whole burst of 100, emptying the bucket,
// then gives all 100 back (credited but for the refill their return's
// age allows): a request for 99 need not wait the 99,000 s an empty
// bucket would take to refill, as the level of the lease call alone said.
func TestReturnRaisesSeenLevel(t *testing.T) {
	rdb := redisserver.StartServer(t).Client()
	t.Cleanup(func() { rdb.Close() })
	c, err := lease.NewClient(rdb, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lim := quota.Quota{Rate: 0.001, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Minute}
	// Calls get 10 s: the first is a new server's first script call.
	s := syncer.New(c, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{}, 1), CallTimeout: 10 * time.Second})
	tn, err := s.Track("returned", lim)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-s.Refill(ctx, tn, 100):
		if r.Err != nil {
			t.Fatalf("refill: %v", r.Err)
		}
	case <-ctx.Done():
		t.Fatal("refill: no answer")
	}
	if got := tn.Held(); got != 100 {
		t.Fatalf("held %d after leasing the burst, want 100", got)
	}
	if w := tn.RetryAfter(time.Now(), tn.Held()+1); w < 10*time.Minute {
		t.Fatalf("RetryAfter for a token beyond the lease, the bucket emptied: %v, want the refill's 1,000 s", w)
	}
	s.Close()
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	// Credited but for what the bucket refilled while they were out
	// (the return's age allows for its deadline), the part of a token
	// rounded down.
	if st := s.Stats(); st.Returned < 99 {
		t.Fatalf("returned %d of 100 (forfeited %d), want 99 or more credited", st.Returned, st.Forfeited)
	}
	if got := tn.Held(); got != 0 {
		t.Fatalf("held %d after ReleaseAll, want 0", got)
	}
	if w := tn.RetryAfter(time.Now(), 99); w > time.Second {
		t.Errorf("RetryAfter for 99 after the 100 went back to the bucket: %v, want none (the bucket holds them)", w)
	}
}
