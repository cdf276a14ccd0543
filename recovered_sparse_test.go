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

// TestSparseTenantAfterOutageLeasesAgain: a tenant whose requests come
// further apart than its lease lifetime (sparse: the syncer keeps no
// lease for it) and whose last lease call failed in an outage is decided
// by a lease again once Redis is back, not by its failure mode.
func TestSparseTenantAfterOutageLeasesAgain(t *testing.T) {
	for _, mode := range []leasequota.FailureMode{leasequota.FailOpen, leasequota.FailClosed, leasequota.FailLocal} {
		t.Run(mode.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := faultstore.New(memstore.New())
				l := newLimiter(t, store,
					leasequota.WithRefreshInterval(100*time.Millisecond),
					leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100, FailureMode: mode}))
				ctx := context.Background()
				gap := 3 * leasequota.DefaultLeaseTTL
				for i := range 3 {
					if d := l.AllowN(ctx, "sparse", 1); !d.Allowed {
						t.Fatalf("request %d with Redis up: denied, %v", i, d.Reason)
					}
					time.Sleep(gap)
				}
				store.SetDown(nil)
				d := l.AllowN(ctx, "sparse", 1)
				if d.Mode != mode {
					t.Fatalf("request during the outage: %v, mode %v; want decided by %v", d.Reason, d.Mode, mode)
				}
				time.Sleep(gap)
				store.SetUp()
				up := time.Now()
				for l.Degraded() {
					if time.Since(up) > 10*time.Second {
						t.Fatal("still Degraded 10 s after Redis came back")
					}
					time.Sleep(10 * time.Millisecond)
				}
				time.Sleep(gap)
				for i := range 3 {
					d := l.AllowN(ctx, "sparse", 1)
					if !d.Allowed || d.Mode != leasequota.FailDefault {
						t.Errorf("request %d, %v after Redis came back (Degraded false): allowed %v, %v, mode %v; want admitted from a lease (%v)",
							i, time.Since(up), d.Allowed, d.Reason, d.Mode, leasequota.ReasonColdStart)
					}
					time.Sleep(gap)
				}
			})
		})
	}
}
