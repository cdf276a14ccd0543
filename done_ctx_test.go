package leasequota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestDoneCtxNeverWaitsForALease: a WaitN (and a cold AllowN) whose ctx
// was done before the call returns ctx's error (a denial) and is never
// admitted by the lease it would have waited for. The wait selected
// between the refill and the done ctx, and when the refill of the
// in-process store had answered by then, select picked either at random:
// before, 8 of 9 runs of this test failed (go test -race -cpu 1,2,4
// -count 3: WaitN admitted 0 to 5 of the 2,000, AllowN 0 to 9), and
// TestWaitErrorsNameTheWait failed so in make test on a loaded machine.
func TestDoneCtxNeverWaitsForALease(t *testing.T) {
	l := newLimiter(t, memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 10}))
	expired, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	waited, allowed := 0, 0
	const n = 2000
	for i := range n {
		if _, err := l.WaitN(expired, fmt.Sprint("w", i), 5); err == nil {
			waited++
		}
		if l.AllowN(expired, fmt.Sprint("a", i), 5).Allowed {
			allowed++
		}
	}
	if waited > 0 || allowed > 0 {
		t.Errorf("with a ctx done before the call: WaitN admitted %d of %d new tenants, AllowN %d of %d; want none", waited, n, allowed, n)
	}
}
