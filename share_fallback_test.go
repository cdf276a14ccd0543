package leasequota_test

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// outageAdmits runs 4 limiters on one store inside a synctest bubble,
// each offered 3/4 of the rate of one FailLocal tenant (Rate 100, Burst
// 100: 3x the rate in all), for 25 s of warm-up and then seconds of an
// outage (every call fails at once), and returns what the fleet admitted
// in each second of the outage; opts are the limiters' options.
func outageAdmits(t *testing.T, seconds int, opts ...leasequota.Option) []int64 {
	const (
		instances = 4
		rate      = 100.0
		tick      = 10 * time.Millisecond
		warmup    = 25 * time.Second
	)
	perSecond := make([]int64, seconds)
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		lims := make([]*leasequota.Limiter, instances)
		for i := range lims {
			lims[i] = newLimiter(t, store, append([]leasequota.Option{
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: rate, Burst: int64(rate), FailureMode: leasequota.FailLocal}),
				leasequota.WithInstanceID(fmt.Sprintf("i%d", i)),
				leasequota.WithSeed(uint64(i + 1)),
			}, opts...)...)
		}
		start := time.Now()
		end := warmup + time.Duration(seconds)*time.Second
		counts := make([][]int64, instances)
		done := make(chan struct{}, instances)
		for i, l := range lims {
			counts[i] = make([]int64, seconds)
			go func() {
				defer func() { done <- struct{}{} }()
				acc := 0.0
				for time.Since(start) < end {
					time.Sleep(tick) // the load's pace, on the fake clock
					acc += 0.75 * rate * tick.Seconds()
					for ; acc >= 1; acc-- {
						allowed := l.AllowN(context.Background(), "t", 1).Allowed
						if since := time.Since(start); allowed && since >= warmup && since < end {
							counts[i][(since-warmup)/time.Second]++
						}
					}
				}
			}()
		}
		time.Sleep(warmup) // the run's schedule
		store.SetDown(nil)
		for range lims {
			<-done
		}
		for _, c := range counts {
			for s, n := range c {
				perSecond[s] += n
			}
		}
	})
	return perSecond
}

// TestShareHolderFallbackStartsAtItsShare: in an outage, a FailLocal
// instance's fallback bucket starts at its recent granted share of the
// rate (docs/failure-modes.md), and a rate share is granted share. The
// grant rate alone counted, which for a share holder is what the bucket
// gave its renewals beside the share: little. With shares of a 2 s period,
// once they had ended the fleet admitted 180 in the outage's seconds 1 to
// 4 (34 to 58 a second, climbing toward the fair rates), where the same
// fleet holding leases admitted 399 (its fallback at its share at once);
// now 403.
func TestShareHolderFallbackStartsAtItsShare(t *testing.T) {
	const seconds = 8
	leases := outageAdmits(t, seconds)
	shares := outageAdmits(t, seconds, leasequota.WithRateShares(2*time.Second, 0.05))
	t.Logf("admitted a second in the outage, leases: %v; rate shares: %v", leases, shares)
	var l, s int64
	for i := 1; i <= 4; i++ { // the shares end within the first second
		l += leases[i]
		s += shares[i]
	}
	if float64(s) < 0.9*float64(l) {
		t.Errorf("share holders' fallback admitted %d in the outage's seconds 1-4, lease holders' %d: want at least 90%%", s, l)
	}
	for i, n := range shares[1:] {
		if n > 110 {
			t.Errorf("share holders admitted %d in the outage's second %d: over their fair rates (25 a second each, 100 in all) by more than 10%%", n, i+1)
		}
	}
}
