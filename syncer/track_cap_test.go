package syncer

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestTrackHoldsTheCap: Track refuses a new tenant while the syncer
// tracks twice Options.MaxTenants, and that cap must hold when new
// tenants come at once. Track read the count and then added the tenant,
// without a lock across the two: tenants tracked together each found room
// for one more and all were added. Here, 20,000 times (or for 3 s), a syncer of
// MaxTenants 5 tracks 9 tenants, one short of its cap of 10, and then 64
// goroutines track a new tenant each at once: it must end with 10.
func TestTrackHoldsTheCap(t *testing.T) {
	const maxTenants, racers = 5, 64
	q := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second}
	worst := 0
	over := 0
	end := time.Now().Add(3 * time.Second)
	round := 0
	for ; round < 20_000 && time.Now().Before(end); round++ {
		now, _, _, mine, _ := MemstorePair(t)
		s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, MaxTenants: maxTenants})
		for i := range 2*maxTenants - 1 {
			if _, err := s.Track(fmt.Sprint("old", i), q); err != nil {
				t.Fatal(err)
			}
		}
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range racers {
			wg.Go(func() {
				<-start
				s.Track(fmt.Sprint("new", round, "-", i), q)
			})
		}
		close(start)
		wg.Wait()
		n := s.Len()
		worst = max(worst, n)
		if n > 2*maxTenants {
			over++
		}
		s.Close()
	}
	t.Logf("%d rounds: %d ended over the cap of %d, the most tenants tracked %d", round, over, 2*maxTenants, worst)
	if worst > 2*maxTenants {
		t.Errorf("%d tenants tracked after new ones came at once, want at most twice MaxTenants (%d)", worst, 2*maxTenants)
	}
}
