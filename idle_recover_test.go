package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestDegradedEndsWithoutTraffic: after an outage, a limiter that makes
// no request once Redis is back finds Redis healthy by itself: Degraded
// turns false within a few refresh intervals, and Close takes the
// instance out of the fleet's roster. Before, only a lease call probed
// the circuit breaker: once the tenants had gone quiet (an outage of 5 s
// or more at R = 100 ms), Degraded stayed true 10 s after Redis came back
// (and with it leasequota.degraded), and Close left the instance in the
// roster, where the others counted it for another registry window.
func TestDegradedEndsWithoutTraffic(t *testing.T) {
	for _, outage := range []time.Duration{0, time.Second, 5 * time.Second, 2 * time.Minute} {
		t.Run(outage.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { degradedEndsWithoutTraffic(t, outage) })
		})
	}
}

func degradedEndsWithoutTraffic(t *testing.T, outage time.Duration) {
	// The in-process store keeps the fleet's roster, and so does the
	// faultstore around it, refusing the roster's calls too while down.
	mem := memstore.New()
	store := faultstore.New(mem)
	l, err := leasequota.NewWithStore(store,
		leasequota.WithLogger(testLogger(t)),
		leasequota.WithInstanceID("i1"),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}),
		leasequota.WithRefreshInterval(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for range 100 {
		l.AllowN(ctx, "a", 1)
		time.Sleep(10 * time.Millisecond)
	}
	if n := l.Stats().Instances; n != 1 {
		t.Fatalf("the limiter counted %d instances in the roster, want 1: the test would not test", n)
	}
	store.SetDown(nil)
	requestUntilDegraded(t, l, "the breaker did not open")
	// No request from now on; Redis stays down a while.
	time.Sleep(outage)
	store.SetUp()
	up := time.Now()
	for l.Degraded() && time.Since(up) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
	}
	if l.Degraded() {
		t.Errorf("Degraded still true %v after Redis came back, no request made meanwhile", time.Since(up))
	} else {
		t.Logf("Degraded false %v after Redis came back", time.Since(up))
	}
	if err := l.Close(ctx); err != nil {
		t.Error(err)
	}
	probe, err := mem.Instance("probe", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := probe.(lease.InstanceCounter).CountInstances(ctx); err != nil || n != 1 {
		t.Errorf("after Close, the roster counts %d instances (%v), want 1 (the probe's own): the closed limiter did not leave it", n, err)
	}
}
