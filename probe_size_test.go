package leasequota_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestProbeCarriesFewTenants: while Redis answers READONLY to every
// write (a replica serves) and a limiter's tenants keep making requests,
// each call that the circuit breaker lets through as its probe reaches
// Redis with the scripts of a bounded number of tenants, not one for
// every failed tenant: on a replica each acquire script runs until its
// first write, so a probe of all of them costs Redis work in proportion
// to the tenants, each interval and instance. Every failed tenant's next
// call is aligned to the probe (Planner.AwaitProbe), so the round at the
// probe's time planned a call for each, in pipelines of up to 1,000.
// Once Redis runs writes again, a WaitN is still admitted within about an
// interval, and every tenant leases again.
func TestProbeCarriesFewTenants(t *testing.T) {
	const tenants = 300
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		var (
			readOnly atomic.Bool
			mu       sync.Mutex
			probes   []int // tenants of each acquire or release that reached the store while READONLY
		)
		store.SetHook(func(ctx context.Context, c faultstore.Call) error {
			if !readOnly.Load() {
				return nil
			}
			if c.Op == faultstore.OpAcquire || c.Op == faultstore.OpRelease {
				mu.Lock()
				probes = append(probes, len(c.Tenants))
				mu.Unlock()
			}
			if c.Op == faultstore.OpAcquire || c.Op == faultstore.OpRelease || c.Op == faultstore.OpProbe {
				return readOnlyReply{}
			}
			return nil
		})
		const r = 100 * time.Millisecond
		l := newLimiter(t, store,
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100, FailureMode: leasequota.FailOpen}),
			leasequota.WithRefreshInterval(r))
		ctx := context.Background()
		names := make([]string, tenants)
		for i := range names {
			names[i] = fmt.Sprintf("t%d", i)
		}
		traffic := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				for _, n := range names {
					l.AllowN(ctx, n, 1)
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		traffic(time.Second)
		readOnly.Store(true)
		for i := 0; !l.Degraded(); i++ {
			if i > 1000 {
				t.Fatal("the breaker did not open on READONLY replies")
			}
			traffic(10 * time.Millisecond)
		}
		mu.Lock()
		probes = probes[:0] // the calls that opened it
		mu.Unlock()
		traffic(3 * time.Second)
		mu.Lock()
		seen := append([]int(nil), probes...)
		mu.Unlock()
		largest, sum := 0, 0
		for _, n := range seen {
			largest = max(largest, n)
			sum += n
		}
		t.Logf("READONLY for 3 s (%d tenants): %d calls reached the store, %d tenant scripts, the largest call %d", tenants, len(seen), sum, largest)
		if len(seen) == 0 {
			t.Fatal("no probe reached the store in 3 s of outage")
		}
		if largest > 8 {
			t.Errorf("a probe carried %d tenants' scripts to a READONLY Redis, want at most 8", largest)
		}
		// Writes run again: the breaker closes within two intervals (a probe
		// every interval, at the tick after), and every tenant leases again.
		leased := map[string]bool{}
		store.SetHook(func(ctx context.Context, c faultstore.Call) error {
			if c.Op == faultstore.OpAcquire {
				mu.Lock()
				for _, n := range c.Tenants {
					leased[n] = true
				}
				mu.Unlock()
			}
			return nil
		})
		readOnly.Store(false)
		healed := time.Now()
		for l.Degraded() && time.Since(healed) < 10*r {
			traffic(time.Millisecond)
		}
		closed := time.Since(healed)
		t.Logf("breaker closed %v after Redis ran writes again", closed)
		if closed > 2*r {
			t.Errorf("breaker closed %v after Redis ran writes again, want within %v", closed, 2*r)
		}
		traffic(2*r - closed)
		mu.Lock()
		defer mu.Unlock()
		if len(leased) != tenants {
			t.Errorf("%d of %d tenants made a lease call within %v of Redis running writes again", len(leased), tenants, 2*r)
		}
	})
}
