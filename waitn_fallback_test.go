package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestWaitNEndingInAnOutageAdmitsWithoutError: a WaitN whose ctx ends
// while it waits through an outage for its tenant's next lease call
// returns a denial and ctx's error, or an admission and no error, never
// both. Its last look at the failure mode (FailLocal's fallback bucket,
// refilled by then) admitted the request, spending the fallback's
// tokens, and WaitN returned that admission with ErrUnavailable: the
// caller, told to give up, dropped a request that the fallback had
// counted. Found by TestExtremeInputs.
func TestWaitNEndingInAnOutageAdmitsWithoutError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		// Driven by hand (WithManualSync): the WaitN's refill is queued
		// and never run, so its ctx ends while it waits for it.
		l := newLimiter(t, store, leasequota.WithManualSync(), leasequota.WithColdStartWait(0),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 2, FailureMode: leasequota.FailLocal}))
		ctx := context.Background()
		l.AllowN(ctx, "a", 2) // cold: denied, the tenant queued for a lease
		leasequota.SyncUrgent(l, ctx)
		leasequota.SyncDeliver(l)
		if d := l.AllowN(ctx, "a", 2); !d.Allowed || d.Reason != leasequota.ReasonLeased {
			t.Fatalf("a request with the lease here: %+v", d)
		}
		// Redis down: the lease call that the next request asks for
		// fails, and the tenant's requests go to the fallback bucket.
		store.SetDown(nil)
		if d := l.AllowN(ctx, "a", 2); d.Allowed {
			t.Fatalf("a request with the lease spent: %+v", d)
		}
		leasequota.SyncUrgent(l, ctx)
		leasequota.SyncDeliver(l)
		if d := l.AllowN(ctx, "a", 2); d.Reason != leasequota.ReasonFallback {
			t.Fatalf("a request in the outage: %+v, want the fallback's decision", d)
		}
		// The fallback bucket holds 2 tokens again well within a second
		// (its rate decays from the little this instance was granted
		// towards Rate); the WaitN's ctx ends at 1 s, waiting for the
		// tenant's lease call.
		wctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		d, err := l.WaitN(wctx, "a", 2)
		if d.Allowed == (err != nil) {
			t.Errorf("WaitN: %+v with error %v: want an admission without error or a denial with one", d, err)
		}
		store.SetUp()
	})
}
