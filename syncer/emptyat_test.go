package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestSeenLevelFromTheReply: the global bucket's level a lease call
// reports is anchored at the reply's arrival, not at the plan. Redis ran
// the call after its way there, so a level anchored at the plan counted
// that way's refill as if it were in the bucket: RetryAfter then told a
// request that a token was there 200 ms before one was, and the planner
// took the bucket for refilled early (forfeiting expired tokens it would
// have returned).
func TestSeenLevelFromTheReply(t *testing.T) {
	r := newDrivenRig(t, 100*time.Millisecond)
	ctx := context.Background()
	const way = 200 * time.Millisecond
	r.store.before = func() { r.clock.Add(int64(way)) }
	tn, err := r.s.Track("a", quota.Quota{Rate: 10, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.s.Refill(ctx, tn, 10)
	r.s.Refills(ctx)
	r.s.Deliver()
	if got := tn.Held(); got != 10 {
		t.Fatalf("held %d after a lease of the whole burst, want 10", got)
	}
	// Redis emptied the bucket when the call reached it, which is now:
	// its next token comes 100 ms on.
	if w := tn.RetryAfter(r.now(), tn.Held()+1); w < 100*time.Millisecond {
		t.Errorf("RetryAfter for a token beyond the lease, as the reply arrives: %v, want the bucket's 100 ms to make one", w)
	}
}
