package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestRoundLeavesHeldBackTenantAlone: while a tenant's next call is held
// back (its bucket drained, its share still accruing), the ticks' rounds
// leave it alone: its requests' misses wait, unobserved, and no call is
// made. The first round after the hold ends observes them all (the demand
// it estimates is what the requests asked for) and calls.
func TestRoundLeavesHeldBackTenantAlone(t *testing.T) {
	r := newDrivenRig(t, 100*time.Millisecond)
	ctx := context.Background()
	tn, err := r.s.Track("a", quota.Quota{Rate: 10, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r.s.Refill(ctx, tn, 10)
	r.s.Refills(ctx)
	r.s.Deliver()
	if ok, _ := tn.Spend(tn.Held()); !ok {
		t.Fatal("could not spend the lease")
	}
	// Requests miss perTick tokens a tick: 80 a second.
	const perTick = 2
	tick := func() {
		r.clock.Add(int64(25 * time.Millisecond))
		r.s.Tick(ctx)
	}
	// Misses until a plan sees the bucket dry and holds the next call back.
	var held time.Time
	for i := 0; i < 40 && held.IsZero(); i++ {
		tn.NoteMiss(perTick)
		tick()
		if w := tn.RetryAfter(r.now(), tn.Held()+1); w > 500*time.Millisecond {
			held = r.now().Add(w)
		}
	}
	if held.IsZero() {
		t.Fatal("no call held back for a drained bucket")
	}
	// The plan after the call that found the bucket dry observes the
	// misses since and is the last until the hold ends.
	tn.NoteMiss(perTick)
	tick()
	calls, demand := len(r.store.calls()), r.s.Snapshot(tn).Demand
	quietTicks := 0
	for r.now().Add(25 * time.Millisecond).Before(held) {
		tn.NoteMiss(perTick)
		tick()
		quietTicks++
		if n := len(r.store.calls()); n != calls {
			t.Fatalf("%d calls while held back until %v (now %v)", n-calls, held, r.now())
		}
		if d := r.s.Snapshot(tn).Demand; d != demand {
			t.Fatalf("tick %d: demand moved from %v to %v: the round planned a held-back tenant", quietTicks, demand, d)
		}
	}
	if quietTicks < 2 {
		t.Fatalf("held back for %d ticks only: the test shows nothing", quietTicks)
	}
	for i := 0; i < 4 && len(r.store.calls()) == calls; i++ {
		tn.NoteMiss(perTick)
		tick()
	}
	if n := len(r.store.calls()); n == calls {
		t.Fatal("no call once the hold ended")
	}
	// Had the misses of the hold been lost, the demand would have decayed
	// toward the last tick's alone (under half of 80/s after 500 ms).
	if d := r.s.Snapshot(tn).Demand; d < 0.75*perTick*float64(time.Second/(25*time.Millisecond)) {
		t.Fatalf("demand %.1f/s after the hold, want about 80/s: the misses in between were lost", d)
	}
	t.Logf("held back %d ticks, demand %.1f/s before and %.1f/s after", quietTicks, demand, r.s.Snapshot(tn).Demand)
}
