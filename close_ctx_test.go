package leasequota_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestCloseWithAShortCtxReturnsTokens: Close's returns get a lease call's
// deadline when its ctx gives less (Close's doc: "The returns get the time
// ctx gives, or a lease call's deadline ... when ctx has no deadline or a
// shorter one"). With a ctx already done, the returns to a store that is
// up failed at once (the call's ctx derives from Close's), Close returned
// "context deadline exceeded" and the leased tokens were forfeited.
// Found by TestExtremeInputs (a Close with a deadline of 0).
func TestCloseWithAShortCtxReturnsTokens(t *testing.T) {
	for _, name := range []string{"expired", "canceled"} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, setup(t), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 100}),
				leasequota.WithColdStartWait(10*time.Second))
			// The request's tokens, refunded, are held here to return.
			d := l.AllowN(context.Background(), "a", 10)
			if !d.Allowed {
				t.Fatalf("the first request: %+v", d)
			}
			if err := l.Refund(&d); err != nil {
				t.Fatal(err)
			}
			held := l.Stats().Granted
			ctx, cancel := context.WithDeadline(context.Background(), time.Now())
			if name == "canceled" {
				ctx, cancel = context.WithCancel(context.Background())
			}
			cancel()
			if err := l.Close(ctx); err != nil {
				t.Errorf("Close with a ctx %s, the store up: %v", name, err)
			}
			// Credited as an aged return: what the bucket, refilled
			// meanwhile, would hold had they never been leased (9).
			if st := l.Stats(); st.Returned == 0 || st.Returned+st.Forfeited != held {
				t.Errorf("Close with a ctx %s: returned %d, forfeited %d; want the %d held returned", name, st.Returned, st.Forfeited, held)
			}
		})
	}
}
