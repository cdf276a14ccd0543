package integration

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/integration/redistest"
)

// TestClusterSparseTenantAfterFailover kills the master of two tenants,
// one busy (requests every 10 ms) and one sparse (it has never held a
// lease here), and lets the master's replica take over its slots under
// its own address. The sparse tenant's request while the master is dead
// is decided by its failure mode (fail-closed: denied as unavailable).
// Once the replica serves the slots and has answered the busy tenant's
// calls, the limiter must no longer be Degraded and the sparse tenant's
// next request must be admitted from a lease: the old master never
// answers again, so an outage judged by it alone never ends.
func TestClusterSparseTenantAfterFailover(t *testing.T) {
	// A failover slower than the outage window (the lease TTL): the sparse
	// tenant's request must find its master dead for longer than that,
	// and not yet replaced.
	const leaseTTL = 500 * time.Millisecond
	// Beside TestConformance, after the package's other tests: 18 s of
	// wall time, 3 s of CPU, most of it waiting out the node timeout
	// and the failover, on a cluster of its own.
	t.Parallel()
	c := redistest.StartClusterWith(t, redistest.ClusterConfig{PartialCoverage: true, NodeTimeout: 5 * time.Second})
	ctx := context.Background()
	prefix := redistest.Prefix(t)
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := masters[1]
	var onVictim []string
	names := tenantNames(200)
	for _, i := range tenantsByMaster(t, masters, prefix, names)[victim.Addr] {
		onVictim = append(onVictim, names[i])
	}
	if len(onVictim) < 2 {
		t.Fatalf("%d tenants of %d on the victim master", len(onVictim), len(names))
	}
	busy, sparse := onVictim[0], onVictim[1]

	cl := clusterClient(c)
	defer cl.Close()
	l, err := leasequota.New(cl,
		leasequota.WithLogger(redistest.Logger(t)),
		leasequota.WithKeyPrefix(prefix),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}),
		leasequota.WithFailureMode(leasequota.FailClosed),
		leasequota.WithRedisTimeout(failoverTimeout),
		leasequota.WithLeaseTTL(leaseTTL),
		// The sparse tenant's first request waits for its lease call to
		// fail (it runs out of its deadline, failoverTimeout).
		leasequota.WithColdStartWait(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				l.AllowN(ctx, busy, 1)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	// The busy tenant leases from the master before the kill, and the
	// sparse one is seen to be sparse: a request every three lease TTLs,
	// too few for the syncer to keep a lease for it.
	for i := range 3 {
		if d := l.AllowN(ctx, sparse, 1); !d.Allowed {
			t.Fatalf("sparse tenant's request %d with the master up: denied, %v", i, d.Reason)
		}
		time.Sleep(3 * leaseTTL) // the gap between its requests, not a wait for a condition
	}
	pollFor(t, 10*time.Second, "the busy tenant admitted from a lease", func() bool {
		d := l.AllowN(ctx, busy, 1)
		return d.Allowed && d.Mode == leasequota.FailDefault
	})

	if err := c.KillNode(victim.Addr); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// The busy tenant's calls fail for good once the master has been
	// silent for the outage window: then the sparse tenant's first
	// request, its one request until the failover, waits for its lease
	// call, which fails too.
	pollFor(t, 10*time.Second, "Degraded with the master dead", l.Degraded)
	if d := l.AllowN(ctx, sparse, 1); d.Mode != leasequota.FailClosed {
		t.Fatalf("sparse tenant's request with its master dead %v: %v, mode %v; want decided by its failure mode",
			time.Since(killed).Round(time.Millisecond), d.Reason, d.Mode)
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err = c.WaitHealthy(wctx)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	healed := time.Now()
	t.Logf("replica took over %v after the kill", healed.Sub(killed).Round(time.Millisecond))
	pollFor(t, 10*time.Second, "the busy tenant admitted from a lease after the failover", func() bool {
		d := l.AllowN(ctx, busy, 1)
		return d.Allowed && d.Mode == leasequota.FailDefault
	})
	// The sparse tenant is not asked meanwhile: its request would make
	// the lease call that ends its failure.
	pollFor(t, 10*time.Second, "the limiter no longer Degraded after the failover", func() bool { return !l.Degraded() })
	t.Logf("not Degraded %v after the failover", time.Since(healed).Round(time.Millisecond))
	if d := l.AllowN(ctx, sparse, 1); !d.Allowed || d.Mode != leasequota.FailDefault {
		t.Errorf("sparse tenant after the failover: allowed %v, %v, mode %v; want admitted from a lease", d.Allowed, d.Reason, d.Mode)
	}
}

// pollFor checks cond every 20 ms until it holds, and fails the test
// naming what when it does not within d.
func pollFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // the polling interval
	}
}
