package leasequota_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestWaitErrorWrapsCtxErrorAndCause: a WaitN or WaitAll whose ctx ends
// returns ctx's error, wrapped, as their docs say, also when ctx was
// given a cause (WithTimeoutCause, WithCancelCause): callers tell a
// deadline from an outage with errors.Is(err, context.DeadlineExceeded),
// as ExampleLimiter_WaitN does. The wait for a refill returned the cause
// alone (context.Cause), so such a caller missed the deadline; the wait
// through an outage returned ctx.Err() alone, the cause lost. Both are
// wrapped now, on every path.
func TestWaitErrorWrapsCtxErrorAndCause(t *testing.T) {
	errBudget := errors.New("request budget spent")
	t.Run("dry bucket", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			l := newLimiter(t, memstore.New(), leasequota.WithColdStartWait(time.Second),
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2}))
			for _, tenant := range []string{"a", "b"} {
				if d := l.AllowN(ctx, tenant, 2); !d.Allowed {
					t.Fatalf("%s's first request: %+v", tenant, d)
				}
			}
			for _, c := range []struct {
				name string
				wait func(context.Context) error
			}{
				{"WaitN", func(ctx context.Context) error { _, err := l.WaitN(ctx, "a", 1); return err }},
				{"WaitAll", func(ctx context.Context) error { _, err := l.WaitAll(ctx, 1, "a", "b"); return err }},
			} {
				wctx, cancel := context.WithTimeoutCause(ctx, time.Second, errBudget)
				err := c.wait(wctx)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errBudget) {
					t.Errorf("%s on a dry bucket, ctx ending with a cause: error %v; want it to wrap context.DeadlineExceeded and the cause", c.name, err)
				}
			}
		})
	})
	// The wait through an outage (FailClosed: it admits from a lease only).
	t.Run("outage", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx := context.Background()
			store := faultstore.New(memstore.New())
			l := newLimiter(t, store, leasequota.WithColdStartWait(time.Second),
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2,
					FailureMode: leasequota.FailClosed}))
			t.Cleanup(store.SetUp) // before Close
			if d := l.AllowN(ctx, "a", 2); !d.Allowed {
				t.Fatalf("a's first request: %+v", d)
			}
			store.SetDown(nil)
			// The miss asks for a lease call, which fails: Redis is failing
			// for the tenant, whose mode decides from then on.
			for d := l.AllowN(ctx, "a", 1); d.Reason != leasequota.ReasonUnavailable; d = l.AllowN(ctx, "a", 1) {
				time.Sleep(10 * time.Millisecond) // the bubble's clock: the syncer's call fails meanwhile
			}
			wctx, cancel := context.WithTimeoutCause(ctx, time.Second, errBudget)
			defer cancel()
			d, err := l.WaitN(wctx, "a", 1)
			if d.Reason != leasequota.ReasonUnavailable || !errors.Is(err, leasequota.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, errBudget) {
				t.Errorf("WaitN through an outage, ctx ending with a cause: %+v, error %v; want ReasonUnavailable, an error wrapping ErrUnavailable, context.DeadlineExceeded and the cause", d, err)
			}
		})
	})
}
