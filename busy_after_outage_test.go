package leasequota_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// phasedStore is an in-process store that is down (an outage: every call
// fails at once, not by its deadline) until SetUp, and then answers every
// call but the acquires naming a tenant whose name begins with "slow",
// which run out of their deadline (a busy Redis: it answers the limiter's
// other calls in time).
func phasedStore() *faultstore.Store {
	s := faultstore.New(memstore.New())
	s.SetDown(nil)
	s.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op == faultstore.OpAcquire && slices.ContainsFunc(c.Tenants, isSlow) {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	return s
}

// isSlow reports whether phasedStore's acquires for tenant time out.
func isSlow(tenant string) bool { return strings.HasPrefix(tenant, "slow") }

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
// probe was excluded from the breaker's counts, which kept it half-open,
// its next call the next probe. The quota-version read probes the breaker
// too, but only when no lease call has tried it for an interval
// (Syncer.idleBreaker); a limiter whose busy tenants' calls tried it at
// least that often stayed Degraded for good with Redis up, and their
// requests were decided by the failure mode (FailClosed: denied
// unavailable). Four such tenants, each asking every 5 ms, at R = 40 ms
// in a synctest bubble: the breaker closes 70-80 ms after Redis answers
// with the probe's timeout counted, and was still open 1 s after (2 s in
// a longer run) without it. One busy tenant alone leaves the breaker idle
// between its calls' backoffs, and the quota read closed it then
// (80-480 ms): that test passed without the fix.
func TestBusyProbeClosesBreaker(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const iv = 40 * time.Millisecond
		store := phasedStore()
		l := newLimiter(t, store,
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}),
			leasequota.WithFailureMode(leasequota.FailClosed),
			leasequota.WithRedisTimeout(20*time.Millisecond),
			leasequota.WithRefreshInterval(iv))
		ctx := context.Background()
		tenants := []string{"slow0", "slow1", "slow2", "slow3"}
		round := func() (unavailable int) {
			for _, name := range tenants {
				if d := l.AllowN(ctx, name, 1); d.Reason == leasequota.ReasonUnavailable {
					unavailable++
				}
			}
			time.Sleep(5 * time.Millisecond)
			return unavailable
		}
		deadline := time.Now().Add(2 * time.Second)
		for !l.Degraded() {
			if time.Now().After(deadline) {
				t.Fatal("the outage did not open the breaker: the test did not test")
			}
			round()
		}
		if d := l.AllowN(ctx, "slow0", 1); d.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("in the outage: %v, want %v: the test did not test", d.Reason, leasequota.ReasonUnavailable)
		}
		store.SetUp()
		back := time.Now()
		for l.Degraded() && time.Since(back) < time.Second {
			round()
		}
		if l.Degraded() {
			t.Fatalf("still Degraded %v after Redis answered again (its lease calls timing out on a busy Redis, at least one an interval)", time.Since(back))
		}
		// The breaker's timeout is an interval, then a probe: it closes
		// within about 2 intervals (a round of requests may wait for
		// cold starts and end later); 4 allowed.
		if took := time.Since(back); took > 4*iv {
			t.Fatalf("breaker closed %v after Redis answered, want within %v", took, 4*iv)
		}
		t.Logf("breaker closed %v after Redis answered", time.Since(back))
		// Redis answers: the busy tenants' requests are decided by their
		// leases, not by the failure mode, once the calls they had out
		// when the breaker closed have ended (a call's timeout, 20 ms: a
		// tenant's failing state is its own calls' to end).
		for closed := time.Now(); time.Since(closed) < iv; {
			round()
		}
		unavailable, total := 0, 0
		for range 100 {
			unavailable += round()
			total += len(tenants)
		}
		if unavailable > 0 || l.Degraded() {
			t.Errorf("after the breaker closed, Redis answering and busy for the tenants: %d of %d requests denied %v (Degraded %v), want none",
				unavailable, total, leasequota.ReasonUnavailable, l.Degraded())
		}
	})
}
