package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
)

// TestSparseTenantKeepsMaxWait: a tenant whose requests come further
// apart than its lease lifetime holds no lease when each comes (its last
// one lapsed), a cold tenant (syncer.Tenant.Cold). With WithMaxWait, such
// a miss waited up to the max wait for a fresh lease, as any miss does,
// and was admitted. Since cold tenants wait for WithColdStartWait instead,
// it waited only that long, whatever the max wait: with
// WithColdStartWait(0) every request of the tenant was denied at once with
// its bucket full, and with the default 100 ms and lease calls taking
// 150 ms (a slow Redis, a max wait of 1 s) every request after the first
// was denied after 100 ms. The max wait a user set still applies to a
// tenant whose lease lapsed: the cold wait only adds to it.
func TestSparseTenantKeepsMaxWait(t *testing.T) {
	for _, tc := range []struct {
		name      string
		coldWait  time.Duration
		maxWait   time.Duration
		callDelay time.Duration
	}{
		{"cold wait 0, max wait 50ms", 0, 50 * time.Millisecond, 0},
		{"slow Redis, max wait 1s", 100 * time.Millisecond, time.Second, 150 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				l := newLimiter(t, slowAcquires(tc.callDelay),
					leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}),
					leasequota.WithColdStartWait(tc.coldWait), leasequota.WithMaxWait(tc.maxWait), leasequota.WithRedisTimeout(time.Second))
				ctx := context.Background()
				// The first request: its wait is WithColdStartWait's.
				// Wait for its lease to come, and to lapse.
				l.AllowN(ctx, "sparse", 1)
				gap := 3 * leasequota.DefaultLeaseTTL
				time.Sleep(gap)
				for i := range 4 {
					if !leasequota.TenantCold(l, "sparse") {
						t.Fatalf("request %d: the tenant holds a lease %v after the last request (lease lifetime %v)", i, gap, leasequota.DefaultLeaseTTL)
					}
					if d := l.AllowN(ctx, "sparse", 1); !d.Allowed {
						t.Errorf("request %d, %v after the one before, of a tenant with its bucket full, WithMaxWait(%v): denied, %v", i, gap, tc.maxWait, d.Reason)
					}
					time.Sleep(gap)
				}
			})
		})
	}
}
