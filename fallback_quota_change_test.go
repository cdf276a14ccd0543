package leasequota_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestFallbackFollowsLoweredBurst: a quota lowered during an outage
// (the configured one, WithQuotaFunc and Invalidate) bounds what the
// FailLocal bucket admits from then on: it holds at most the new
// Burst/n (docs/failure-modes.md), not what it had filled to under the
// old one.
func TestFallbackFollowsLoweredBurst(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var q atomic.Pointer[leasequota.Quota]
		q.Store(&leasequota.Quota{Rate: 100, Burst: 1000})
		store := faultstore.New(memstore.New())
		l := newLimiter(t, store,
			leasequota.WithRefreshInterval(100*time.Millisecond),
			leasequota.WithQuotaFunc(func(string) leasequota.Quota { return *q.Load() }))
		ctx := context.Background()
		for range 100 {
			l.AllowN(ctx, "t", 1)
			time.Sleep(10 * time.Millisecond)
		}
		store.SetDown(nil)
		deadline := time.Now().Add(10 * time.Second)
		for d := l.AllowN(ctx, "t", 1); d.Mode != leasequota.FailLocal; d = l.AllowN(ctx, "t", 1) {
			if time.Now().After(deadline) {
				t.Fatal("the tenant's failure mode did not decide within 10 s of the outage")
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The local bucket fills (1000 at 100/s) while no request comes.
		time.Sleep(20 * time.Second)
		const lowered = 10
		q.Store(&leasequota.Quota{Rate: 1, Burst: lowered})
		l.Invalidate("t")
		for d := l.AllowN(ctx, "t", 1); d.Quota.Burst != lowered; d = l.AllowN(ctx, "t", 1) {
			if time.Now().After(deadline.Add(30 * time.Second)) {
				t.Fatal("the lowered quota did not apply")
			}
			time.Sleep(time.Millisecond)
		}
		time.Sleep(time.Second) // the local bucket refills a second at the lowered rate, up to the lowered capacity
		admitted := 0
		for range 500 {
			if d := l.AllowN(ctx, "t", 1); d.Allowed {
				admitted++
			}
		}
		t.Logf("admitted %d of 500 at once, FailLocal, after Burst went from 1000 to %d in the outage", admitted, lowered)
		if admitted > lowered {
			t.Errorf("the FailLocal bucket admitted %d at once after the Burst was lowered to %d (one instance: it holds at most Burst)", admitted, lowered)
		}
	})
}
