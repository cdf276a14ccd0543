package integration

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// maxMinShares returns the max-min fair shares of capacity among demands
// (water-filling): the smallest demands are met in full, the rest split
// what remains evenly.
func maxMinShares(capacity float64, demands []float64) []float64 {
	idx := make([]int, len(demands))
	for i := range idx {
		idx[i] = i
	}
	// sort indexes by demand (small n: insertion sort)
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && demands[idx[j]] < demands[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
	shares := make([]float64, len(demands))
	left := capacity
	for k, i := range idx {
		fair := left / float64(len(idx)-k)
		shares[i] = math.Min(demands[i], fair)
		left -= shares[i]
	}
	return shares
}

// jain is Jain's fairness index of xs: 1 when all equal, 1/n at worst.
func jain(xs []float64) float64 {
	var sum, sq float64
	for _, x := range xs {
		sum += x
		sq += x * x
	}
	return sum * sum / (float64(len(xs)) * sq)
}

// fairInterval and fairCallTimeout are the limiters' refresh interval and
// Redis call deadline in TestFairShares: the defaults.
const (
	fairInterval    = leasequota.DefaultRefreshInterval
	fairCallTimeout = fairInterval / 2
)

// TestFairShares: one tenant (rate 1000/s, burst 200) over 4 instances
// asking for 150, 300, 600 and 1200 tokens/s for 6 s. Together they admit
// at least 97% of Burst + Rate*elapsed (less what lease calls that failed
// on a busy machine may cost), and each instance's admissions
// over its max-min fair share (150, 283, 283, 283 per second) have a
// Jain's fairness index of at least 0.95.
func TestFairShares(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 1000, Burst: 200}
	// FailClosed: every admission comes from a lease (the bound is exact).
	ls := newLimiters(t, 4, leasequota.WithDefaultQuota(q), leasequota.WithFailureMode(leasequota.FailClosed))
	demands := []float64{150, 300, 600, 1200}
	srvc := redistest.Client(t)
	ctx := context.Background()
	start, err := srvc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	admitted := make([]atomic.Int64, len(ls))
	var wg sync.WaitGroup
	for i, l := range ls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			paced(&stop, func(float64) float64 { return demands[i] }, func() {
				if l.Allow("fair") {
					admitted[i].Add(1)
				}
			})
		}()
	}
	time.Sleep(6 * time.Second) // the length of the run, not a wait for a condition
	stop.Store(true)
	wg.Wait()
	end, err := srvc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	el := end.Sub(start).Seconds()
	bound := float64(q.Burst) + q.Rate*el
	var total float64
	ratios := make([]float64, len(ls))
	shares := maxMinShares(q.Rate, demands)
	for i := range ls {
		a := float64(admitted[i].Load())
		total += a
		// The fair share of the run: the share of the rate over the run,
		// plus the share of the initial burst.
		fair := shares[i]*el + float64(q.Burst)*shares[i]/q.Rate
		ratios[i] = a / fair
		t.Logf("instance %d: demand %4.0f/s, admitted %5.0f (%.0f/s), max-min share %.0f/s, ratio %.3f",
			i, demands[i], a, a/el, shares[i], ratios[i])
	}
	util := total / bound
	idx := jain(ratios)
	t.Logf("utilization %.1f%% of %.0f; Jain's index %.4f", 100*util, bound, idx)
	if total > bound+1e-9 {
		t.Errorf("admitted %.0f > bound %.1f", total, bound)
	}
	// A lease call that failed (a timeout on a machine too busy to run
	// Redis or read its reply in time) may cost its instance's share of
	// the rate for the call's deadline and the retry after it: what the
	// machine delivered, not the protocol. Without failures the floor is
	// 97%.
	var failed int64
	for _, l := range ls {
		failed += l.Stats().Errors
	}
	lost := float64(failed) * q.Rate / float64(len(ls)) * (fairCallTimeout + fairInterval).Seconds()
	if floor := 0.97 - lost/bound; util < floor {
		t.Errorf("utilization %.1f%%, want >= %.1f%% (97%% less %.0f tokens for %d failed lease calls)", 100*util, 100*floor, lost, failed)
	}
	if idx < 0.95 {
		t.Errorf("Jain's index %.4f, want >= 0.95", idx)
	}
}
