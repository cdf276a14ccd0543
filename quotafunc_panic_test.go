package leasequota_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestQuotaFuncPanicInRefresh: the quota function is called again, for
// Invalidate and WithQuotaRefresh, from the limiter's own goroutine,
// where no caller can recover a panic: one panicking call there (a plan
// deleted from the user's database, a nil map) took the whole process
// down. The refresh must treat it as it treats an invalid quota: log it
// and keep the tenant's quota. (Driven by hand here, SyncQuotas runs the
// pass in the test's goroutine: without the fix the panic reaches it.)
func TestQuotaFuncPanicInRefresh(t *testing.T) {
	q := leasequota.Quota{Rate: 100, Burst: 10}
	var boom atomic.Bool
	f := func(string) leasequota.Quota {
		if boom.Load() {
			panic("plan not found")
		}
		return q
	}
	l := newLimiter(t, setup(t), leasequota.WithManualSync(), leasequota.WithQuotaFunc(f),
		leasequota.WithColdStartWait(0))
	l.AllowN(context.Background(), "acme", 1) // tracks the tenant
	if _, ok := l.Tenant("acme"); !ok {
		t.Fatal("acme is not tracked after its first request")
	}
	boom.Store(true)
	l.Invalidate("acme")
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Errorf("the quota refresh panicked with the quota function's panic (%v): in the limiter's goroutine that ends the process", r)
			}
		}()
		leasequota.SyncQuotas(l)
	}()
	if info, ok := l.Tenant("acme"); !ok || info.Quota.Rate != q.Rate || info.Quota.Burst != q.Burst {
		t.Errorf("after a panicking refresh: tracked %v, quota %+v, want %+v kept", ok, info.Quota, q)
	}
}
