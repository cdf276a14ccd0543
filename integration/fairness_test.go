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

// newLimiters returns n limiters, each with its own client, closed when the
// test ends.
func newLimiters(t *testing.T, n int, opts ...leasequota.Option) []*leasequota.Limiter {
	t.Helper()
	return newLimitersAt(t, redistest.Prefix(t), n, opts...)
}

// newLimitersAt is newLimiters with the key prefix given.
func newLimitersAt(t *testing.T, prefix string, n int, opts ...leasequota.Option) []*leasequota.Limiter {
	t.Helper()
	srv := redistest.Shared(t)
	ls := make([]*leasequota.Limiter, n)
	for i := range ls {
		c := srv.Client()
		l, err := leasequota.New(c, append([]leasequota.Option{leasequota.WithKeyPrefix(prefix),
			leasequota.WithLogger(redistest.Logger(t).With("limiter", i))}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
		t.Cleanup(func() {
			if err := l.Close(context.Background()); err != nil {
				t.Error(err)
			}
			c.Close()
		})
	}
	return ls
}

// paced calls f(k) for requests k = 0, 1, ... due at rate(t) requests per
// second (t seconds since the start), until stop is set. It is a load
// generator: the sleep paces the load, it does not wait for a condition.
func paced(stop *atomic.Bool, rate func(el float64) float64, f func()) {
	began := time.Now()
	last := began
	var due float64
	var sent int64
	for !stop.Load() {
		now := time.Now()
		due += rate(now.Sub(began).Seconds()) * now.Sub(last).Seconds()
		last = now
		for ; float64(sent) < due; sent++ {
			f()
		}
		time.Sleep(time.Millisecond)
	}
}

// TestLowDemandFewCalls: 8 instances serve one tenant at a tenth of its
// rate. Leases must cover the demand between refreshes and cost at most 2
// script calls per 1,000 decisions. A lease holds about two refresh
// intervals of demand, so a denial means a refresh came that much late:
// each must follow a stall of this process (the syncer's goroutine late
// by a tick or more, as a loaded machine makes it; on a quiet one there
// are none), or it fails the test. A clean clone's make test on
// 2026-12-02 saw 19 denials within one half-second, under the race
// detector; eight reruns, three of them beside two busy loops, none.
// A cold start (a request before its instance's first lease) denied
// after a lease call of its limiter failed is explained too: its first
// lease did not come because Redis, sharing the machine, did not answer
// in time. Beside two busy loops on 2026-12-07 the limiters' first calls
// timed out together, and 774 cold starts were denied in the first
// half-second with this process on time. Every other denial is checked:
// later that day, in a make test that ran the library's tests beside
// these (two lanes, tried and not kept) with two busy loops beside it,
// this process ran 0.34 cores in 7.9 s (its 4 s of load stretched by
// its stalls, the worst 249 ms), and 5,227 such denials came: the first
// 1,000, all that were checked then, each after a stall, and the test
// failed for the rest, unchecked.
func TestLowDemandFewCalls(t *testing.T) {
	leakCheck(t)
	const (
		instances   = 8
		perInstance = 8000.0 // requests/s
	)
	// Burst one second of rate: the first lease of each instance, sized
	// before any demand is measured, is one interval of the whole rate.
	q := leasequota.Quota{Rate: 10 * instances * perInstance, Burst: 10 * instances * perInstance}
	ls := newLimiters(t, instances, leasequota.WithDefaultQuota(q))
	admin := redistest.Client(t)
	before := scriptCalls(t, admin)
	var stop atomic.Bool
	var decisions, denied atomic.Int64
	var coldAfterFailure atomic.Int64 // denied cold starts after a failed lease call
	var byReason [16]atomic.Int64
	var bySecond [8]atomic.Int64
	var deniedMu sync.Mutex
	var deniedAt []time.Time // every denial but a cold start's after a failed lease call
	probe := startStallProbe()
	defer probe.Stop()
	began := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < instances*2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[i%instances]
			paced(&stop, func(float64) float64 { return perInstance / 2 }, func() {
				decisions.Add(1)
				if d := l.AllowN(context.Background(), "low", 1); !d.Allowed {
					denied.Add(1)
					byReason[d.Reason%16].Add(1)
					bySecond[min(int(time.Since(began)/(500*time.Millisecond)), 7)].Add(1)
					if d.Reason == leasequota.ReasonColdStart && l.Stats().Errors > 0 {
						// A cold start's denial after a lease call of
						// this limiter failed: its first lease did not
						// come because Redis, on this machine, did not
						// answer in time, not because a refresh was late.
						coldAfterFailure.Add(1)
						return
					}
					deniedMu.Lock()
					deniedAt = append(deniedAt, time.Now())
					deniedMu.Unlock()
				}
			})
		}()
	}
	defer func() {
		if denied.Load() == 0 {
			return
		}
		for r := range byReason {
			if n := byReason[r].Load(); n > 0 {
				t.Logf("denied %d: %v", n, leasequota.Reason(r))
			}
		}
		for s := range bySecond {
			t.Logf("half-second %d: %d denied", s, bySecond[s].Load())
		}
	}()
	time.Sleep(4 * time.Second) // the load runs (pacing)
	stop.Store(true)
	wg.Wait()
	probe.Stop()
	calls := scriptCalls(t, admin) - before
	perK := float64(calls) / float64(decisions.Load()) * 1000
	info, _ := ls[0].Tenant("low")
	t.Logf("%d decisions, %d denied, %d script calls: %.2f per 1,000; lease %d, demand %.0f/s", decisions.Load(), denied.Load(), calls, perK, info.Lease, info.Demand)
	// A denial is explained by a stall (stallProbe.unexplained): the
	// refresh that would have covered it was due then.
	unexplained, worst := probe.unexplained(deniedAt)
	if denied.Load() != 0 {
		t.Logf("%s; %d of %d denials followed no stall of %v or more within %v (the longest stall before a denial: %v); %d were cold starts after a failed lease call",
			probe, unexplained, len(deniedAt), stallExplainsLeast, stallExplainsWindow, worst, coldAfterFailure.Load())
	}
	if unexplained > 0 {
		t.Errorf("%d of %d requests denied at a tenth of the rate, %d of them with this process running on time", denied.Load(), decisions.Load(), unexplained)
	}
	if perK > 2 {
		t.Errorf("%.2f script calls per 1,000 decisions, want <= 2", perK)
	}
}

// TestLeaseFollowsDemandJump: a tenant's demand on one instance jumps 10x;
// within 2 refresh intervals its lease must be sized for the new demand
// (at least 70% of the lease the new demand sizes: demand × R × headroom 2).
func TestLeaseFollowsDemandJump(t *testing.T) {
	leakCheck(t)
	const (
		low      = 1000.0
		high     = 10 * low
		interval = leasequota.DefaultRefreshInterval
	)
	q := leasequota.Quota{Rate: 100 * high, Burst: 100 * high}
	ls := newLimiters(t, 1, leasequota.WithDefaultQuota(q))
	l := ls[0]
	var stop atomic.Bool
	var jumped atomic.Int64 // unix ns of the jump
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		paced(&stop, func(el float64) float64 {
			if el < 2 {
				return low
			}
			if jumped.Load() == 0 {
				jumped.CompareAndSwap(0, time.Now().UnixNano())
			}
			return high
		}, func() { l.Allow("jump") })
	}()
	defer func() { stop.Store(true); wg.Wait() }()
	for jumped.Load() == 0 {
		time.Sleep(time.Millisecond) // polling pace
	}
	info, _ := l.Tenant("jump")
	t.Logf("before the jump: lease %d, demand %.0f/s", info.Lease, info.Demand)
	want := int64(math.Ceil(0.7 * high * interval.Seconds() * 2))
	at := time.Unix(0, jumped.Load())
	deadline := at.Add(5 * time.Second)
	for {
		info, _ = l.Tenant("jump")
		if info.Lease >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("lease %d 5s after the jump, want >= %d", info.Lease, want)
		}
		time.Sleep(time.Millisecond) // polling pace
	}
	took := time.Since(at)
	t.Logf("lease %d >= %d after %v (demand %.0f/s)", info.Lease, want, took, info.Demand)
	if took > 2*interval {
		t.Errorf("lease took %v to follow a 10x demand jump, want <= %v", took, 2*interval)
	}
}
