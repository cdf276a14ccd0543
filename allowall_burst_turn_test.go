package leasequota_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestAllowAllChecksEveryBurstAtEachPass: a quota lowered below n while
// an AllowAll waits for another tenant's lease makes the call invalid
// for that tenant (ReasonInvalidN, as AllowN says at once), though its
// lease still holds n tokens leased under the old quota. The pass after
// the wait spent them: AllowAll admitted n above the tenant's Burst.
// Driven by hand (WithManualSync) in a synctest bubble: the wait is for
// b's first lease, and a's quota is lowered while it lasts.
func TestAllowAllChecksEveryBurstAtEachPass(t *testing.T) {
	for _, wait := range []bool{false, true} {
		name := "AllowAll"
		if wait {
			name = "WaitAll"
		}
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				var lowered atomic.Bool
				l := newLimiter(t, memstore.New(), leasequota.WithManualSync(), leasequota.WithColdStartWait(10*time.Second),
					leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
						if tenant == "a" && lowered.Load() {
							return leasequota.Quota{Rate: 0.001, Burst: 10, MinLease: 10, MaxLease: 10}
						}
						return leasequota.Quota{Rate: 0.001, Burst: 100, MinLease: 100, MaxLease: 100}
					}))
				step := func() {
					synctest.Wait()
					leasequota.SyncRefills(l, ctx)
					synctest.Wait()
					leasequota.SyncDeliver(l)
					synctest.Wait()
				}
				first := make(chan leasequota.Decision, 1)
				go func() { first <- l.AllowN(ctx, "a", 1) }()
				step()
				if d := <-first; !d.Allowed || d.Remaining != 99 {
					t.Fatalf("a's first request: %+v, want admitted with 99 left", d)
				}
				all := make(chan leasequota.Decision, 1)
				go func() {
					if wait {
						d, err := l.WaitAll(ctx, 50, "b", "a")
						if !d.Allowed && !errors.Is(err, leasequota.ErrExceedsBurst) {
							t.Errorf("WaitAll's error: %v, want ErrExceedsBurst", err)
						}
						all <- d
						return
					}
					all <- l.AllowAll(ctx, 50, "b", "a")
				}()
				synctest.Wait() // b's turn waits for its first lease
				lowered.Store(true)
				l.Invalidate("a")
				leasequota.SyncQuotas(l)
				if q, _ := l.TrackedQuota("a"); q.Burst != 10 {
					t.Fatalf("a's quota after the refresh: %+v, want Burst 10", q)
				}
				if d := l.AllowN(ctx, "a", 50); d.Reason != leasequota.ReasonInvalidN {
					t.Fatalf("AllowN(a, 50) under Burst 10: %+v, want ReasonInvalidN", d)
				}
				step() // b's lease lands
				d := <-all
				if d.Allowed || d.Reason != leasequota.ReasonInvalidN || d.Tenant != "a" {
					t.Errorf("%s(50, b, a) with a's Burst lowered to 10 during the wait = %+v; want denied ReasonInvalidN by a", name, d)
				}
				if info, _ := l.Tenant("a"); info.Tokens != 99 {
					t.Errorf("a holds %d tokens after the call, want 99 (nothing spent)", info.Tokens)
				}
			})
		})
	}
}
