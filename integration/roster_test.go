package integration

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota"
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
