package leasequota_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestPausingBusyTenantDeniedAtOnce: a busy tenant (a request a
// millisecond on each of 3 instances, against a Rate of 10 and a Burst
// of 10: its bucket dry) pauses 2 s, longer than a lease's usable
// lifetime, then is as busy again, 8 times. Without WithMaxWait, a
// request that finds the lease spent by requests is denied at once:
// its quota is spent. The first plan after a pause may see a single
// request after the gap and find the tenant sparse (Planner.sparse),
// keeping no lease for it, so that its next miss is cold and waits
// for a lease; that lease call, urgent, finds the tenant busy and the
// bucket dry. The request then waited out WithColdStartWait (100 ms)
// for tokens its quota did not have, and was denied (exhausted).
func TestPausingBusyTenantDeniedAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		store.SetHook(faultstore.Delay(2 * time.Millisecond)) // a lease call takes time
		var lims []*leasequota.Limiter
		for i := range 3 {
			l := newLimiter(t, store,
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}),
				leasequota.WithInstanceID(fmt.Sprint("i", i)))
			lims = append(lims, l)
		}
		ctx := context.Background()
		var mu sync.Mutex
		waited := map[string]int{}
		var wg sync.WaitGroup
		for _, l := range lims {
			wg.Go(func() {
				for round := range 9 {
					end := time.Now().Add(3 * time.Second)
					for time.Now().Before(end) {
						start := time.Now()
						d := l.AllowN(ctx, "busy", 1)
						if el := time.Since(start); round > 0 && el > 10*time.Millisecond && !d.Allowed {
							mu.Lock()
							waited[fmt.Sprintf("after pause %d: waited %v, %v", round, el, d.Reason)]++
							mu.Unlock()
						}
						time.Sleep(time.Millisecond)
					}
					time.Sleep(2 * time.Second)
				}
			})
		}
		wg.Wait()
		for k, n := range waited {
			t.Errorf("a request of a busy tenant whose bucket is dry, no WithMaxWait: %s (%d times); want a denial at once", k, n)
		}
	})
}
