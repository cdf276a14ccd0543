package leasequota_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestColdStartRetryAfter: a new tenant's request denied before its first
// lease (WithColdStartWait(0)) is told to retry within the refresh
// interval, and AllowNWithin waits for that lease. Nothing is known of the
// global bucket then, and a bucket Redis does not hold is full; counted
// as an empty one's n/Rate, a daily quota of 1,000 said 86.4 s, and
// AllowNWithin(1 s) refused at once what the next round admitted.
func TestColdStartRetryAfter(t *testing.T) {
	l, err := leasequota.NewWithStore(memstore.New(), leasequota.WithDefaultQuota(leasequota.Per(1000, 24*time.Hour)),
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
