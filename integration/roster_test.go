package integration

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
	"github.com/leasequota/leasequota/lease"
)

// TestLimitersCountTheirFleet: limiters sharing a prefix on redis-server
// count each other in the fleet's roster (lease.RosterKey) without a
// request, each itself included, which sizes their call windows' floors.
func TestLimitersCountTheirFleet(t *testing.T) {
	leakCheck(t)
	ls := newLimiters(t, 3, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
	deadline := time.Now().Add(15 * time.Second)
	for {
		done := true
		for _, l := range ls {
			n := l.Stats().Instances
			if n > 3 {
				t.Fatalf("a limiter counted %d instances of 3", n)
			}
			done = done && n == 3
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 15 s the limiters counted %d, %d and %d instances, want 3 each",
				ls[0].Stats().Instances, ls[1].Stats().Instances, ls[2].Stats().Instances)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestClosedLimiterLeavesTheRoster: a limiter that closes takes its entry
// out of the fleet's roster at once (lease.RosterLeaver), where it would
// have stayed counted for its registry window (12.1 s by default), so a
// fleet restarted under new instance ids is not counted twice.
func TestClosedLimiterLeavesTheRoster(t *testing.T) {
	leakCheck(t)
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	rdb := redistest.Client(t)
	ls := newLimitersAt(t, prefix, 3, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
	key := lease.RosterKey(prefix)
	deadline := time.Now().Add(15 * time.Second)
	for n, err := rdb.ZCard(ctx, key).Result(); n != 3; n, err = rdb.ZCard(ctx, key).Result() {
		if err != nil || n > 3 || time.Now().After(deadline) {
			t.Fatalf("the roster holds %d entries (%v); want 3 within 15 s", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for i, l := range ls {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
		if n, err := rdb.ZCard(ctx, key).Result(); err != nil || n != int64(2-i) {
			t.Fatalf("after %d of 3 limiters closed the roster holds %d entries (%v); want %d", i+1, n, err, 2-i)
		}
	}
}
