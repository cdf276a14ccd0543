package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestWaitingRequestsCountOnceInDemand: a request that waits for its
// tokens counts once in its tenant's demand estimate, not as a miss and
// again as a spend. One goroutine calls WaitN(1) in a closed loop on a
// tenant of Rate 20 and Burst 1, so that nearly every request waits for
// a refill: the estimate must follow what the loop asks for, the rate it
// is admitted at. (Counted twice, it read 35 a second at 18.)
func TestWaitingRequestsCountOnceInDemand(t *testing.T) {
	closedLoopDemand(t, func(ctx context.Context, l *leasequota.Limiter) error {
		_, err := l.WaitN(ctx, "w", 1)
		return err
	}, "w")
}

// TestWaitAllCountsOnceInDemand is TestWaitingRequestsCountOnceInDemand
// for WaitAll over two tenants: a turn that waited for the first tenant's
// tokens gives them back while the second is short and spends them again
// once it is not, and each tenant's estimate must still follow the rate
// the loop is admitted at. (Without Action.Unobserved the first tenant's
// read 36 a second at 18.)
func TestWaitAllCountsOnceInDemand(t *testing.T) {
	closedLoopDemand(t, func(ctx context.Context, l *leasequota.Limiter) error {
		_, err := l.WaitAll(ctx, 1, "a", "b")
		return err
	}, "a", "b")
}

// closedLoopDemand runs admit in a closed loop for 6 s on a limiter whose
// tenants have Rate 20 and Burst 1, in a synctest bubble (the syncer's
// clock and the store's are fake), and checks that each of tenants'
// demand estimates is within 30 % of the rate the loop was admitted at
// over its last 3 s.
func closedLoopDemand(t *testing.T, admit func(context.Context, *leasequota.Limiter) error, tenants ...string) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 20, Burst: 1}))
		const run, tail = 6 * time.Second, 3 * time.Second
		start := time.Now()
		var inTail int64
		for time.Since(start) < run {
			if err := admit(ctx, l); err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > run-tail {
				inTail++
			}
		}
		rate := float64(inTail) / tail.Seconds()
		for _, name := range tenants {
			info, _ := l.Tenant(name)
			t.Logf("%s: admitted %.1f a second over the last %v; demand estimate %.1f a second", name, rate, tail, info.Demand)
			if info.Demand < 0.7*rate || info.Demand > 1.3*rate {
				t.Errorf("%s: demand estimate %.1f a second for a loop admitted %.1f a second: want within 30%%", name, info.Demand, rate)
			}
		}
	})
}

// TestColdWaitAllCountsOnceInDemand: a WaitAll that is the first request
// of its tenants counts once in each one's demand, as a WaitN that is its
// tenant's first does: the first leases it asks for at once are no miss
// of its own. Driven by hand (WithManualSync) in a synctest bubble, so
// that the three tenants are planned at the same instants: the first
// leases in one refill step, then one tick after the requests spent.
// (Counted as a miss too, each tenant's estimate was twice what it is
// now: 5.97 and 6.81 a second against 2.99 and 3.41, the lone WaitN's
// tenant's 3.79.)
func TestColdWaitAllCountsOnceInDemand(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 20, Burst: 10}), leasequota.WithManualSync())
		done := make(chan error, 2)
		go func() {
			_, err := l.WaitN(ctx, "alone", 1)
			done <- err
		}()
		go func() {
			_, err := l.WaitAll(ctx, 1, "a", "b")
			done <- err
		}()
		// Drive the syncer as its loop would, every 25 ms for 300 ms: the
		// refills the requests ask for, then the ticks that observe their
		// spends.
		pending := 2
		for range 12 {
			synctest.Wait()
			leasequota.SyncRefills(l, ctx)
			synctest.Wait()
			leasequota.SyncDeliver(l)
			synctest.Wait()
			for drained := false; !drained; {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
					pending--
				default:
					drained = true
				}
			}
			time.Sleep(25 * time.Millisecond)
			leasequota.SyncTick(l, ctx)
		}
		if pending > 0 {
			t.Fatalf("%d requests not admitted after 300 ms", pending)
		}
		alone, _ := l.Tenant("alone")
		for _, name := range []string{"a", "b"} {
			info, _ := l.Tenant(name)
			t.Logf("%s: demand estimate %.2f a second; the lone WaitN's tenant %.2f", name, info.Demand, alone.Demand)
			if info.Demand > 1.4*alone.Demand || info.Demand < alone.Demand/1.4 {
				t.Errorf("%s: demand estimate %.2f a second after one WaitAll, the lone WaitN's tenant %.2f: want within a factor of 1.4", name, info.Demand, alone.Demand)
			}
		}
	})
}
