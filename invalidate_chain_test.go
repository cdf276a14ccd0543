package leasequota_test

import (
	"context"
	"sync"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestInvalidateDuringTrackDoesNotChain: a request that tracks a new
// tenant while Invalidate is called has the tenant's quota resolved
// again (TestInvalidateDuringFirstTrack), by calling Invalidate itself.
// That call counted as one of the user's: every new tenant whose first
// request overlapped it was resolved again too, and its own call then
// did the same to the next one, so that under a steady flow of new
// tenants (a slow quota function, first requests that overlap) one
// Invalidate made the function be called twice for every new tenant
// from then on. Here "b" resolves its quota across the user's
// Invalidate, and "c" starts resolving after that call and finishes
// after b's request tracked b: c's quota must be resolved once.
func TestInvalidateDuringTrackDoesNotChain(t *testing.T) {
	q := leasequota.Quota{Rate: 100, Burst: 10}
	var (
		mu       sync.Mutex
		calls    = map[string]int{}
		entered  = map[string]chan struct{}{"b": make(chan struct{}), "c": make(chan struct{})}
		released = map[string]chan struct{}{"b": make(chan struct{}), "c": make(chan struct{})}
	)
	f := func(tenant string) leasequota.Quota {
		mu.Lock()
		calls[tenant]++
		first := calls[tenant] == 1
		mu.Unlock()
		if e, ok := entered[tenant]; ok && first {
			close(e)
			<-released[tenant] // a slow read
		}
		return q
	}
	l := newLimiter(t, setup(t), leasequota.WithQuotaFunc(f), leasequota.WithManualSync(),
		leasequota.WithColdStartWait(0))
	ctx := context.Background()
	l.AllowN(ctx, "a", 1)
	first := func(tenant string) <-chan struct{} {
		done := make(chan struct{})
		go func() {
			defer close(done)
			l.AllowN(ctx, tenant, 1)
		}()
		<-entered[tenant]
		return done
	}
	bDone := first("b")
	l.Invalidate("a")   // the user's, while b's quota is read
	cDone := first("c") // starts after it
	close(released["b"])
	<-bDone // b tracked, and asked for again: the Invalidate came while its quota was read
	close(released["c"])
	<-cDone
	leasequota.SyncQuotas(l)
	mu.Lock()
	defer mu.Unlock()
	if calls["b"] != 2 {
		t.Errorf("the quota function was called %d times for b, want 2 (its first request, and again for the Invalidate made meanwhile)", calls["b"])
	}
	if calls["c"] != 1 {
		t.Errorf("the quota function was called %d times for c, want 1: no Invalidate was made while c's quota was read, only b's request's own", calls["c"])
	}
}
