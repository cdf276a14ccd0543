package integration

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// tightQuotas are the tenants of issue #16's tight shape: bursts of a
// tenth of a second of their rate, which a bucket refills in 100 to 167
// ms, so that a lease call that comes later than that on a drained
// bucket loses refill for good.
var tightQuotas = []leasequota.Quota{
	{Rate: 3000, Burst: 300},
	{Rate: 800, Burst: 100},
	{Rate: 300, Burst: 50},
}

// TestTightBurstsOnBusyCores is issue #16's tight shape on a real Redis:
// three limiters share the tenants of tightQuotas, each offered three
// times its rate, a third on each instance, while instance 2 serves in
// 700 ms phases, on then off (its share of the demand stops, and what it
// leased waits in its lease), and two goroutines of this process spin
// for the whole run, as request handlers that keep both cores busy. For
// every tenant the admitted count must stay within Burst + Rate*elapsed
// (Redis clock) and reach tightFloor of it; the log says what each
// tenant got. (The
// simulator's -scenario tight -busy 2 is the same shape with low-rate
// tenants beside it, and an account of every token; issue #16 asks 95 %
// of Burst + Rate*T there.)
func TestTightBurstsOnBusyCores(t *testing.T) {
	srv := redistest.Shared(t) // before the leak check: the harness lives for the package
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	const (
		instances  = 3
		overDemand = 3.0
		phase      = 700 * time.Millisecond
		spinners   = 2
	)
	duration := 6 * time.Second
	admin := redistest.Client(t)
	prefix := redistest.Prefix(t)
	names := tenantNames(len(tightQuotas))
	index := map[string]int{}
	for i, n := range names {
		index[n] = i
	}
	limiters := make([]*leasequota.Limiter, instances)
	for i := range limiters {
		c := srv.Client()
		defer c.Close()
		// FailClosed: every admission comes from a lease, so the bound is
		// exact even when a lease call misses its deadline.
		l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t).With("limiter", i)), leasequota.WithKeyPrefix(prefix),
			leasequota.WithFailureMode(leasequota.FailClosed),
			leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return tightQuotas[index[tenant]] }))
		if err != nil {
			t.Fatal(err)
		}
		limiters[i] = l
	}

	// The spinners: pure CPU, preempted by the scheduler like any
	// request handler that computes.
	var stop atomic.Bool
	var spun sync.WaitGroup
	var sink atomic.Int64
	for range spinners {
		spun.Go(func() {
			var x int64
			for !stop.Load() {
				for i := range int64(1 << 12) {
					x += i ^ x>>3
				}
			}
			sink.Add(x)
		})
	}
	defer func() { stop.Store(true); spun.Wait() }()

	start, err := admin.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	admitted := make([]atomic.Int64, len(names))
	probe := startStallProbe()
	defer probe.Stop()
	began := time.Now()
	deadline := began.Add(duration)
	var wg sync.WaitGroup
	for inst, l := range limiters {
		wg.Go(func() {
			// Request k of tenant i on this instance is due at
			// k / (overDemand * rate / instances) seconds; instance 2's
			// requests due in an off phase are not sent.
			sent := make([]int64, len(names))
			for now := time.Now(); now.Before(deadline); now = time.Now() {
				el := now.Sub(began)
				on := inst != 2 || (el/phase)%2 == 0
				for i := range names {
					due := int64(el.Seconds() * overDemand * tightQuotas[i].Rate / instances)
					if !on {
						sent[i] = due
						continue
					}
					for ; sent[i] < due; sent[i]++ {
						if l.Allow(names[i]) {
							admitted[i].Add(1)
						}
					}
				}
				time.Sleep(time.Millisecond) // pacing the load, not waiting for a condition
			}
		})
	}
	wg.Wait()
	probe.Stop()
	stop.Store(true)
	spun.Wait()
	t.Log(probe)
	floor := tightFloor(probe.cores())
	end, err := admin.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	elapsed := end.Sub(start).Seconds()
	for i, q := range tightQuotas {
		bound := float64(q.Burst) + q.Rate*elapsed
		got := float64(admitted[i].Load())
		if got > bound+1e-9*bound {
			t.Errorf("%s: admitted %.0f > bound %.1f (burst %d + rate %.0f * %.3fs)", names[i], got, bound, q.Burst, q.Rate, elapsed)
		}
		if got < floor*bound {
			t.Errorf("%s (rate %.0f, burst %d): admitted %.0f < %.0f%% of bound %.1f (tightFloor: on the %.2f cores this process used)",
				names[i], q.Rate, q.Burst, got, 100*floor, bound, probe.cores())
		}
		t.Logf("%s (rate %.0f, burst %d): admitted %.0f of bound %.1f (%.1f%%)", names[i], q.Rate, q.Burst, got, bound, 100*got/bound)
	}
	for _, l := range limiters {
		if err := l.Close(context.Background()); err != nil {
			t.Error(err)
		}
	}
}

// tightFloor is the least share of Burst + Rate*elapsed that
// TestTightBurstsOnBusyCores wants each tenant admitted, given the cores
// the test's process used over the run (its spinners want both): 0.8
// when it had at least 0.35 of a core, less in proportion below. The
// stall probe cannot say what the machine delivered here, since the
// test's own spinners delay every one of its wake-ups. Measured on the
// 2-core machine (2026-12-02): 97.5-98.9 % of the bound with the process
// using 1.01-1.96 cores, 92.4-97.7 % with -race (0.92-1.00 cores), and
// 89.0-97.1 % with -race beside two busy loops and other work (0.39-0.66
// cores); issue #16 reported 0.61 for the 3,000/s tenant of this shape.
func tightFloor(cores float64) float64 {
	return 0.8 * min(1, cores/0.35)
}
