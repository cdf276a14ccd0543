package bucket_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/leasequota/leasequota/bucket"
)

// TestRestripeNeverEmpties: a counter that holds far more tokens than
// its spenders can spend never refuses a spend of one while the syncer
// joins it and splits it again (the probe of percpu.go) or splits it
// into another number of slots (GOMAXPROCS changed), spreading it after
// each, as Tenant.restripe does.
func TestRestripeNeverEmpties(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	var c bucket.Counter
	c.Add(1 << 40)
	c.Stripe(2)
	c.Spread()
	var stop atomic.Bool
	var refused, spent atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for !stop.Load() {
				if ok, _ := c.TrySpend(1); ok {
					spent.Add(1)
				} else {
					refused.Add(1)
				}
			}
		})
	}
	for i := range 20000 {
		c.Stripe([]int{2, 4, 1, 8, 64, 1}[i%6])
		c.Spread()
	}
	stop.Store(true)
	wg.Wait()
	if n := refused.Load(); n > 0 {
		t.Fatalf("%d spends of one refused (%d spent) while the counter held %d", n, spent.Load(), c.Load())
	}
}
