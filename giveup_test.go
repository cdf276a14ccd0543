package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestWaitEndingAsItsLeaseLands runs AllowN with WithMaxWait whose wait
// ends just after the lease it waited for landed here, before the syncer
// woke its waiters: driven by hand (WithManualSync) in a synctest bubble,
// the refill runs 40 ms into a 50 ms wait and its waiters are woken only
// after the wait's end. The request must find the tokens then, not be
// denied with the Retry-After of the state that lease left.
func TestWaitEndingAsItsLeaseLands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}), leasequota.WithMaxWait(50*time.Millisecond), leasequota.WithManualSync())
		// The first lease: a cold request, answered by a refill step.
		done := make(chan leasequota.Decision, 1)
		ask := func() { done <- l.AllowN(ctx, "a", 1) }
		go ask()
		synctest.Wait()
		leasequota.SyncRefills(l, ctx)
		leasequota.SyncDeliver(l)
		if d := <-done; !d.Allowed {
			t.Fatalf("first request: %+v", d)
		}
		// Spend the lease.
		for l.AllowN(ctx, "a", 1).Allowed {
		}
		// The next request waits for a refill, which lands 40 ms into its
		// 50 ms wait; its waiters are woken only at 60 ms.
		go ask()
		landAfterWait(t, l, "a", done, leasequota.ReasonRefilled)
	})
}

// landAfterWait drives l (WithManualSync, in a synctest bubble) for a
// request on tenant that has just started a wait of 50 ms and sends its
// decision on done: the refill it queued runs 40 ms in, and its waiters
// are woken only at 60 ms. The request must be admitted with reason.
func landAfterWait(t *testing.T, l *leasequota.Limiter, tenant string, done <-chan leasequota.Decision, reason leasequota.Reason) {
	t.Helper()
	ctx := context.Background()
	synctest.Wait()
	time.Sleep(40 * time.Millisecond)
	if !leasequota.SyncRefills(l, ctx) {
		t.Fatal("no refill queued by the waiting request")
	}
	if info, _ := l.Tenant(tenant); info.Tokens < 1 {
		t.Fatalf("the refill left %d tokens here", info.Tokens)
	}
	time.Sleep(20 * time.Millisecond)
	synctest.Wait()
	leasequota.SyncDeliver(l)
	d := <-done
	if !d.Allowed {
		t.Fatalf("request whose wait ended with its lease here: %+v, want admitted", d)
	}
	if d.Reason != reason {
		t.Errorf("reason %v, want %v", d.Reason, reason)
	}
}

// TestColdWaitEndingAsItsLeaseLands is TestWaitEndingAsItsLeaseLands for
// a tenant's first request here: its first lease lands 40 ms into its
// 50 ms cold-start wait, and its waiters are woken only after the wait's
// end. It must be admitted (a cold start), not denied with the tokens
// here.
func TestColdWaitEndingAsItsLeaseLands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000}), leasequota.WithColdStartWait(50*time.Millisecond), leasequota.WithManualSync())
		done := make(chan leasequota.Decision, 1)
		go func() { done <- l.AllowN(ctx, "a", 1) }()
		landAfterWait(t, l, "a", done, leasequota.ReasonColdStart)
	})
}
