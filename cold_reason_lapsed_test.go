package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
)

// TestLapsedColdDenialIsAColdStart: a request of a tenant whose lease
// lapsed (syncer.Tenant.Cold) waits for a lease as a first request does,
// and when its wait ends before the lease comes (lease calls taking
// 150 ms, WithColdStartWait's 100 ms) it is denied as a first request
// is: ReasonColdStart, its bucket full, retry within a refresh interval.
// The refill's plan cleared the tenant's idle flag before its call went
// out, so the denial read the tenant as warm: ReasonExhausted (the
// tenant's quota spent, as the decisions metric counted it), for a
// tenant that had spent nothing of it.
func TestLapsedColdDenialIsAColdStart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, slowAcquires(150*time.Millisecond),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}), leasequota.WithRedisTimeout(time.Second))
		ctx := context.Background()
		gap := 3 * leasequota.DefaultLeaseTTL
		for i := range 4 {
			d := l.AllowN(ctx, "sparse", 1)
			if d.Allowed {
				t.Fatalf("request %d: admitted (%v) before its 150 ms lease call answered", i, d.Reason)
			}
			if d.RetryAfter <= 0 || d.RetryAfter > leasequota.DefaultRefreshInterval {
				t.Errorf("request %d: RetryAfter %v, want it in (0, %v]", i, d.RetryAfter, leasequota.DefaultRefreshInterval)
			}
			if d.Reason != leasequota.ReasonColdStart {
				t.Errorf("request %d, %v after the one before, its wait ended before its lease came: denied %v, want %v", i, gap, d.Reason, leasequota.ReasonColdStart)
			}
			time.Sleep(gap)
		}
		if got := l.Stats().Decisions[leasequota.ReasonExhausted]; got.Denied != 0 {
			t.Errorf("Stats: %d denials counted exhausted, of a tenant that spent nothing", got.Denied)
		}
	})
}
