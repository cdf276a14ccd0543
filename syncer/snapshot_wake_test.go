package syncer

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestSnapshotWakesRefills: a refill that finds its tenant locked waits
// for the next release of locks (Syncer.lock), so whatever releases a
// tenant's lock must wake it (Syncer.unlock). Snapshot, which
// Limiter.Tenant calls (dashboards, polling), took the lock and released
// it without the wake: a refill that tried the lock while a Snapshot held
// it waited for the next round's release, up to a quarter interval in
// Run, and in driven mode (here, with no rounds) for ever. Here one
// goroutine takes snapshots in a loop while another takes the lock as a
// refill does, for a second: each take must be quick.
func TestSnapshotWakesRefills(t *testing.T) {
	s, tn, _, _ := drivenTenant(t, Config{Interval: 100 * time.Millisecond}, "a",
		quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second})
	var stop atomic.Bool
	var snaps atomic.Int64
	go func() {
		for !stop.Load() {
			s.Snapshot(tn)
			snaps.Add(1)
		}
	}()
	for snaps.Load() < 1000 {
		time.Sleep(time.Millisecond) // the loop is under way
	}
	type result struct {
		takes int
		worst time.Duration
	}
	done := make(chan result, 1)
	go func() {
		var r result
		end := time.Now().Add(time.Second)
		for ; time.Now().Before(end); r.takes++ {
			start := time.Now()
			if !s.lock(tn) {
				break
			}
			r.worst = max(r.worst, time.Since(start))
			s.unlock(tn)
		}
		done <- r
	}()
	var r result
	stuck := false
	select {
	case r = <-done:
	case <-time.After(5 * time.Second):
		stuck = true
	}
	stop.Store(true)
	if stuck {
		// Nothing else wakes the refill: do it, so it ends.
		for {
			s.unlocked.Broadcast()
			select {
			case r = <-done:
			case <-time.After(10 * time.Millisecond):
				continue
			}
			break
		}
		t.Fatalf("a refill's lock waited more than 5 s (%d takes, %d snapshots): a Snapshot released the tenant's lock without waking it", r.takes, snaps.Load())
	}
	t.Logf("%d takes of the lock beside %d snapshots; the longest took %v", r.takes, snaps.Load(), r.worst)
	if r.worst > 500*time.Millisecond {
		t.Errorf("a refill's lock took %v beside a Snapshot loop", r.worst)
	}
}
