package leasequota_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestColdStartRetryAfter: a new tenant's request denied before its first
// lease (WithColdStartWait(0)) is told to retry within the refresh
// interval, and AllowNWithin waits for that lease. Nothing is known of the
// global bucket then, and a bucket Redis does not hold is full; counted
// as an empty one's n/Rate, a daily quota of 1,000 said 86.4 s, and
// AllowNWithin(1 s) refused at once what the next round admitted.
func TestColdStartRetryAfter(t *testing.T) {
	l, err := leasequota.NewWithStore(memstore.New(), leasequota.WithLogger(testLogger(t)), leasequota.WithDefaultQuota(leasequota.Per(1000, 24*time.Hour)),
		leasequota.WithColdStartWait(0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	d := l.AllowN(ctx, "new", 1)
	if d.Allowed || d.Reason != leasequota.ReasonColdStart || d.RetryAfter <= 0 || d.RetryAfter > leasequota.DefaultRefreshInterval {
		t.Errorf("a cold request: %v, %v, RetryAfter %v; want a cold start denied with RetryAfter in (0, %v]",
			d.Allowed, d.Reason, d.RetryAfter, leasequota.DefaultRefreshInterval)
	}
	if w := l.AllowNWithin(ctx, "other", 1, time.Second); !w.Allowed {
		t.Errorf("AllowNWithin(1 s) of a new tenant: %v, RetryAfter %v; want it admitted once its lease came", w.Reason, w.RetryAfter)
	}
}

// TestColdWaitAfterABusyFirstCall: a WaitN of a new tenant whose first
// lease call timed out (Redis busy, not down) tries again within a refresh
// interval, not after an empty bucket's n/Rate: for a daily quota of 1,000
// it slept 86 s beside a full bucket.
func TestColdWaitAfterABusyFirstCall(t *testing.T) {
	// The store times out the first lease call that names the tenant
	// "cold" (a busy Redis: the deadline passes), and passes every other.
	var done atomic.Bool
	store := faultstore.New(memstore.New())
	store.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op == faultstore.OpAcquire && slices.Contains(c.Tenants, "cold") && done.CompareAndSwap(false, true) {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	})
	l, err := leasequota.NewWithStore(store, leasequota.WithDefaultQuota(leasequota.Per(1000, 24*time.Hour)),
		leasequota.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	if _, err := l.WaitN(ctx, "warm", 1); err != nil { // Redis answered: a timeout now is congestion
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if d, err := l.WaitN(wctx, "cold", 1); err != nil || !d.Allowed {
		t.Errorf("WaitN of a new tenant whose first call timed out: %v, %v, want admitted within 10 s", d.Reason, err)
	}
	if !done.Load() {
		t.Errorf("the first call of the new tenant was not the one timed out: the test did not test")
	}
}
