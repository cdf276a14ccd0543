package leasequota_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// phasedStore is an in-process store that is down (an outage: every call
// fails at once, not by its deadline) until SetUp, and then answers every
// call but the acquires naming the tenant "slow", which run out of their
// deadline (a busy Redis: it answers the limiter's other calls in time).
func phasedStore() *faultstore.Store {
	s := faultstore.New(memstore.New())
	s.SetDown(nil)
	s.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op == faultstore.OpAcquire && slices.Contains(c.Tenants, "slow") {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	return s
}

// TestBusyAfterOutageEndsFailureMode: a tenant put in its failure mode by
// an outage leaves it once Redis answers again, when its own calls then
// time out on a Redis that answers the limiter's other calls in time (a
// busy Redis, not a down one). Before, a lease call that timed out on a
// busy Redis left the tenant's failing state as it was: a FailOpen
// tenant whose calls kept timing out after the outage was admitted
// without a lease (fail_open), outside the bound, with Redis up, the
// breaker closed and Degraded false.
func TestBusyAfterOutageEndsFailureMode(t *testing.T) {
	store := phasedStore()
	l, err := leasequota.NewWithStore(store,
		leasequota.WithLogger(testLogger(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}),
		leasequota.WithFailureMode(leasequota.FailOpen),
		leasequota.WithRedisTimeout(20*time.Millisecond),
		leasequota.WithRefreshInterval(40*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Close(ctx)
	}()
	ctx := context.Background()
	// The outage: both tenants' calls fail, and their mode decides.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		a, b := l.AllowN(ctx, "slow", 1), l.AllowN(ctx, "other", 1)
		if a.Reason == leasequota.ReasonFailOpen && b.Reason == leasequota.ReasonFailOpen && l.Degraded() {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	if !l.Degraded() {
		t.Fatal("the outage did not open the breaker: the test did not test")
	}
	// Redis is back: "other" leases again; "slow"'s calls time out while
	// Redis answers the others in time.
	store.SetUp()
	deadline = time.Now().Add(2 * time.Second)
	for l.Degraded() || l.AllowN(ctx, "other", 1).Reason != leasequota.ReasonLeased {
		if time.Now().After(deadline) {
			t.Fatal("the breaker did not close within 2 s of Redis answering")
		}
		time.Sleep(5 * time.Millisecond)
	}
	// Give "slow" time for a call or two on the busy Redis.
	time.Sleep(200 * time.Millisecond)
	open := 0
	for range 50 {
		if d := l.AllowN(ctx, "slow", 1); d.Reason == leasequota.ReasonFailOpen {
			open++
		}
		l.AllowN(ctx, "other", 1)
		time.Sleep(4 * time.Millisecond)
	}
	if open > 0 {
		t.Errorf("after the outage, with Redis answering and busy for the tenant: %d of 50 requests admitted fail_open (Degraded %v), want 0",
			open, l.Degraded())
	}
}

// TestBusyProbeClosesBreaker: after an outage, the breaker's probe call
// that times out on a Redis answering the limiter's other reads in time
// (busy, not down) closes the breaker: Redis answers. Before, the busy
// probe was excluded from the breaker's counts, which kept it half-open:
// with only such calls to make, Degraded stayed true for good with Redis
// up, and every call but the probe in flight was refused, its tenant put
// in its failure mode (recovery took 68 ms to over 2 s at R = 40 ms
// beside a tenant whose calls succeeded).
func TestBusyProbeClosesBreaker(t *testing.T) {
	store := phasedStore()
	l, err := leasequota.NewWithStore(store,
		leasequota.WithLogger(testLogger(t)),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}),
		leasequota.WithFailureMode(leasequota.FailClosed),
		leasequota.WithRedisTimeout(20*time.Millisecond),
		leasequota.WithRefreshInterval(40*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Close(ctx)
	}()
	ctx := context.Background()
	deadline := time.Now().Add(2 * time.Second)
	for !l.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("the outage did not open the breaker: the test did not test")
		}
		l.AllowN(ctx, "slow", 1)
		time.Sleep(5 * time.Millisecond)
	}
	store.SetUp()
	back := time.Now()
	for l.Degraded() && time.Since(back) < time.Second {
		l.AllowN(ctx, "slow", 1)
		time.Sleep(5 * time.Millisecond)
	}
	if l.Degraded() {
		t.Errorf("Degraded 1 s after Redis answered again (its only lease calls timing out on a busy Redis), want the breaker closed within about 2R (80 ms)")
	} else {
		t.Logf("breaker closed %v after Redis answered", time.Since(back))
	}
}
