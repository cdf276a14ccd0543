package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestPausedTenantAdmittedAfterItsPause: a tenant of 50 requests a
// second on an instance, its bucket (Rate 100, Burst 100) full, pauses
// longer than a lease's usable lifetime and resumes at the same pace.
// The first request after the pause finds the tenant sparse
// (syncer.Planner.sparse) and waits for a lease of its own size, one
// token. The next, 20 ms later, finds that token spent: the syncer still
// keeps no lease for the tenant (its plan's target is 0), so it is cold
// and waits for one. Taken for warm once the waiting request's token
// came, it was denied at once (exhausted) with its bucket full, after
// one pause in two or more.
func TestPausedTenantAdmittedAfterItsPause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}))
		ctx := context.Background()
		const pace = 20 * time.Millisecond
		run := func(after time.Duration, k int) {
			for i := range k {
				if d := l.AllowN(ctx, "paused", 1); !d.Allowed {
					t.Errorf("after a pause of %v, request %d (%v after the one before, FleetRemaining %d): denied, %v", after, i, pace, d.FleetRemaining, d.Reason)
				}
				time.Sleep(pace)
			}
		}
		run(0, 50)
		for _, p := range []time.Duration{2500 * time.Millisecond, 4 * time.Second, 6 * time.Second, 10 * time.Second, 30 * time.Second} {
			time.Sleep(p)
			run(p, 50)
		}
	})
}
