package leasequota_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
)

// TestCloseWithADoneCtxIsBoundedByOneCallDeadline (review): Close with a
// ctx done already gives its returns "a lease call's deadline
// (WithRedisTimeout, plus 300 µs a tenant)" (Close's doc). Against a
// store that answers nothing, with more tenants holding tokens than fit
// one pipeline (1,000), each pipeline got a deadline of its own, one
// after the other: Close outlived its ctx by two call deadlines.
func TestCloseWithADoneCtxIsBoundedByOneCallDeadline(t *testing.T) {
	store := faultySetup(t)
	const rt = time.Second
	const tenants = 2500
	l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
		leasequota.WithRedisTimeout(rt), leasequota.WithColdStartWait(10*time.Second),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 100}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < tenants; i += 16 {
				if _, err := l.WaitN(ctx, fmt.Sprint("t", i), 1); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	// The store answers no release from now on.
	store.SetHook(func(ctx context.Context, _ string, op faultstore.Op, _ int) error {
		if op != faultstore.OpRelease {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	})
	done, cancel := context.WithCancel(ctx)
	cancel()
	start := time.Now()
	l.Close(done)
	took := time.Since(start)
	bound := rt + tenants*300*time.Microsecond
	t.Logf("Close with a done ctx took %v (one call deadline: %v)", took, bound)
	if took > bound+500*time.Millisecond {
		t.Errorf("Close with a done ctx took %v, beyond one lease call's deadline (%v)", took, bound)
	}
}
