package leasequota_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestInvalidateDuringFirstTrack: an Invalidate made while the tenant's
// first request is resolving its quota (the function slow, a database
// read) was lost: the request tracked the tenant at the quota it read
// before the change, and Invalidate, finding the tenant not tracked yet,
// did nothing; without WithQuotaRefresh the old quota stayed until the
// tenant was evicted.
func TestInvalidateDuringFirstTrack(t *testing.T) {
	store := setup(t)
	old := leasequota.Quota{Rate: 1000, Burst: 1000}
	plan := leasequota.Quota{Rate: 2000, Burst: 3000}
	var (
		mu      sync.Mutex
		current = old
		first   = true
		entered = make(chan struct{})
		release = make(chan struct{})
	)
	f := func(tenant string) leasequota.Quota {
		mu.Lock()
		q, block := current, first
		first = false
		mu.Unlock()
		if block {
			close(entered)
			<-release // the read's latency
		}
		return q
	}
	l := newLimiter(t, store, leasequota.WithQuotaFunc(f), leasequota.WithManualSync(),
		leasequota.WithColdStartWait(time.Millisecond))
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.AllowN(context.Background(), "t", 1)
	}()
	<-entered
	mu.Lock()
	current = plan // the plan changes in the database
	mu.Unlock()
	l.Invalidate("t")
	close(release)
	<-done
	leasequota.SyncQuotas(l)
	if q, ok := l.TrackedQuota("t"); !ok || q.Rate != plan.Rate || q.Burst != plan.Burst {
		t.Errorf("after Invalidate and a refresh pass: quota %v/%v (tracked %v), want the new plan's %v/%v", q.Rate, q.Burst, ok, plan.Rate, plan.Burst)
	}
}
