package integration

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// heapInuse returns HeapInuse after a full collection.
func heapInuse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// TestManyTenantsBoundedMemory sends one request for each of 1,000,000
// distinct tenants through AllowN, on real Redis, with
// WithMaxTenants(100,000): the limiter must keep at most 2 x 100,000
// tenants at any time, evict down to 100,000, and its heap must stay
// bounded by what 200,000 tenants cost, not grow with the million.
func TestManyTenantsBoundedMemory(t *testing.T) {
	leakCheck(t)
	srv := redistest.Shared(t)
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()

	const (
		maxTenants = 100_000
		total      = 1_000_000
	)
	before := heapInuse()
	// WithRedisTimeout(1s): with the default (50ms, per pipeline of up to
	// 1,000 tenants) the first leases of this many tenants time out on a
	// healthy Redis and the breaker flaps (TestManyTenantsColdStartOnHealthyRedis);
	// this test is about memory, so it gives the calls the time they need.
	// It takes 15-50s under -race on a shared two-core machine, 6s without.
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}),
		leasequota.WithMaxTenants(maxTenants), leasequota.WithColdStartWait(0), leasequota.WithRedisTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)

	start := time.Now()
	var reasons [16][2]int64
	var peakTenants int
	var peakHeap uint64
	buf := make([]byte, 0, 32)
	for i := 0; i < total; i++ {
		buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
		d := l.AllowN(ctx, string(buf), 1)
		a := 0
		if d.Allowed {
			a = 1
		}
		reasons[d.Reason%16][a]++
		if (i+1)%(total/10) == 0 {
			n, h := l.Tenants(), heapInuse()
			peakTenants, peakHeap = max(peakTenants, n), max(peakHeap, h)
			if n > 2*maxTenants {
				t.Errorf("%d tenants tracked after %d requests, want <= 2 x %d", n, i+1, maxTenants)
			}
			t.Logf("%8d requests, %v: %6d tenants tracked, heap in use %+.1f MiB", i+1,
				time.Since(start).Round(time.Millisecond), n, float64(int64(h)-int64(before))/(1<<20))
		}
	}
	t.Logf("%d requests in %v; decisions: cold_start %d/%d, too_many_tenants %d/%d, leased %d/%d (allowed/denied); stats %+v",
		total, time.Since(start).Round(time.Millisecond),
		reasons[leasequota.ReasonColdStart][1], reasons[leasequota.ReasonColdStart][0],
		reasons[leasequota.ReasonTooManyTenants][1], reasons[leasequota.ReasonTooManyTenants][0],
		reasons[leasequota.ReasonLeased][1], reasons[leasequota.ReasonLeased][0], l.Stats())
	after := heapInuse()
	if n := l.Tenants(); n > 2*maxTenants {
		t.Errorf("Tenants() = %d after %d tenants, want <= 2 x %d", n, total, maxTenants)
	}
	took := faultWait(t, 30*time.Second, "eviction down to WithMaxTenants", func() bool { return l.Tenants() <= maxTenants })
	settled := heapInuse()
	t.Logf("evicted down to %d tenants %v after the last request; heap in use: %+.1f MiB at the end of the requests, peak %+.1f MiB, %+.1f MiB after eviction",
		l.Tenants(), took.Round(time.Millisecond), heapMiB(after, before), heapMiB(peakHeap, before), heapMiB(settled, before))

	// The bound: at most 2 x 100,000 tenants are tracked; each costs its
	// entry (~600 B, BenchmarkTenantMemory), its name, and its share of
	// the registry's maps, which the registry copies on growth and on
	// eviction (old and new map alive together: about 2 x 100 B per
	// entry), plus the syncer's LRU slice (16 B): about 900 B. 1.5 KiB per
	// tracked tenant leaves room for garbage the GC has not returned:
	// 300 MiB at the peak. A limiter that kept every tenant would need
	// about 1,000,000 x 900 B = 860 MiB.
	const perTenant = 3 << 9 // 1.5 KiB
	bound := uint64(2*maxTenants*perTenant) + 16<<20
	if peak := max(peakHeap, after); peak > before+bound {
		t.Errorf("heap in use grew by %.1f MiB over %d tenants, want <= %.1f MiB (2 x %d tenants x %d B + 16 MiB)",
			heapMiB(peak, before), total, float64(bound)/(1<<20), maxTenants, perTenant)
	}
	if settled > before+uint64(maxTenants*perTenant)+16<<20 {
		t.Errorf("heap in use %.1f MiB above the start after eviction to %d tenants, want <= %d x %d B + 16 MiB",
			heapMiB(settled, before), l.Tenants(), maxTenants, perTenant)
	}
	// Evicted, old tenants make room for new ones again.
	if d := l.AllowN(ctx, "one more tenant", 1); d.Reason != leasequota.ReasonColdStart {
		t.Errorf("a new tenant after eviction: %+v, want a cold start", d)
	}
	t.Logf("at most %d tenants tracked at a checkpoint", peakTenants)
}

func heapMiB(a, b uint64) float64 { return float64(int64(a)-int64(b)) / (1 << 20) }

// TestManyTenantsColdStartOnHealthyRedis starts 100,000 tenants at once
// (one request each, WithColdStartWait(0)) on a healthy, idle Redis: the
// syncer must lease them all without a failed call and without declaring
// Redis unreachable.
//
// It uses WithRedisTimeout(5s) (2s was enough on a quiet machine, not with
// two busy loops beside it), the kind of setting docs/failure-modes.md gives
// for limiters that see floods of new tenants: with the default (half the
// refresh interval, 50ms, plus 300µs per pipelined command) the later of
// 8 concurrent pipelines of 1,000 acquires queue behind the others in
// single-threaded Redis, time out, and open the breaker while Redis is
// fine (measured under -race: 33,000 failed calls for 100,000 tenants).
func TestManyTenantsColdStartOnHealthyRedis(t *testing.T) {
	leakCheck(t)
	srv := redistest.Shared(t)
	c := srv.Client()
	defer c.Close()
	ctx := context.Background()
	const tenants = 100_000
	l, err := leasequota.New(c, leasequota.WithLogger(redistest.Logger(t)), leasequota.WithKeyPrefix(redistest.Prefix(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}), leasequota.WithColdStartWait(0),
		leasequota.WithRedisTimeout(5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	buf := make([]byte, 0, 32)
	start := time.Now()
	for i := 0; i < tenants; i++ {
		buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
		l.AllowN(ctx, string(buf), 1)
	}
	requests := time.Since(start)
	degraded := false
	// Before probing: the syncer alone, for one second.
	for quiet := time.Now(); time.Since(quiet) < time.Second; {
		degraded = degraded || l.Degraded()
		time.Sleep(time.Millisecond) // sampling Degraded(), for a bounded second
	}
	if st := l.Stats(); st.Errors != 0 || degraded {
		t.Fatalf("healthy Redis, WithRedisTimeout(5s), 1s after %d tenants' first requests (which took %v): %d lease calls failed, Degraded() seen: %v; "+
			"want 0 and false; stats %+v", tenants, requests.Round(time.Millisecond), st.Errors, degraded, st)
	}
	// A tenant's request is denied with ReasonColdStart until its first
	// lease came (after that: admitted, or exhausted once the lease went
	// back). Probe the tenants not yet seen leased until none is left.
	waiting := make([]int, tenants)
	for i := range waiting {
		waiting[i] = i
	}
	// 30 s on what the machine delivers to this process: longer when
	// other processes keep the cores busy (see stallProbe).
	probe := startStallProbe()
	defer probe.Stop()
	began := time.Now()
	for len(waiting) > 0 {
		left := waiting[:0]
		for _, i := range waiting {
			degraded = degraded || l.Degraded()
			buf = strconv.AppendInt(append(buf[:0], "tenant-"...), int64(i), 10)
			switch d := l.AllowN(ctx, string(buf), 1); d.Reason {
			case leasequota.ReasonLeased, leasequota.ReasonExhausted:
			default: // cold start, or a failure mode: not leased yet
				left = append(left, i)
			}
		}
		waiting = left
		if allowed := time.Duration(float64(30*time.Second) / probe.delivered()); len(waiting) > 0 && time.Since(began) > allowed {
			t.Fatalf("%d of %d tenants still without a lease %v after their first request (30s on what the machine delivered; %v)", len(waiting), tenants, allowed.Round(time.Second), probe)
		}
		time.Sleep(10 * time.Millisecond) // polling interval; the deadline bounds the wait
	}
	st := l.Stats()
	t.Logf("%d tenants leased %v after the first request (the requests took %v); stats %+v; Degraded() seen: %v",
		tenants, time.Since(start).Round(time.Millisecond), requests.Round(time.Millisecond), st, degraded)
	if st.Errors != 0 || degraded {
		t.Errorf("healthy Redis, WithRedisTimeout(5s): %d lease calls failed and Degraded() was %v while %d tenants got their first lease; want 0 and false",
			st.Errors, degraded, tenants)
	}
}
