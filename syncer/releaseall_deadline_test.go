package syncer_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestReleaseAllShortDeadlineGetsADoneCtxsTime: Close's doc says the
// returns get "a lease call's deadline (WithRedisTimeout, plus 300 µs a
// tenant) when ctx has no deadline or a shorter one, or is done already".
// ReleaseAll detached only when ctx gave less than one pipeline's
// deadline (callTimeout(batchSize)), while a done ctx then got
// callTimeout(all requests), so a ctx whose deadline fell between the two
// got less than a done one: with 2,500 tenants in three pipelines of
// 250 ms each, a done ctx returned them all, a ctx of 550 ms (more than
// one pipeline's 500 ms, less than the 950 ms promised) forfeited the
// third pipeline.
func TestReleaseAllShortDeadlineGetsADoneCtxsTime(t *testing.T) {
	const tenants = 2500
	const callTimeout = 200 * time.Millisecond
	promised := callTimeout + tenants*300*time.Microsecond // 950 ms
	for _, tc := range []struct {
		name     string
		deadline time.Duration // 0: a done ctx
	}{
		{"done ctx", 0},
		{"ctx of 550ms", 550 * time.Millisecond},
	} {
		// In a synctest bubble: the pipelines' delays and the deadlines
		// are on its clock, so a loaded machine moves neither.
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := faultstore.New(memstore.New())
				view, err := store.Instance("i", time.Second)
				if err != nil {
					t.Fatal(err)
				}
				s := syncer.New(view, syncer.Options{CallTimeout: callTimeout})
				var wg sync.WaitGroup
				for w := range 8 {
					wg.Go(func() {
						for i := w; i < tenants; i += 8 {
							tn, err := s.Track(fmt.Sprint("t", i), quota.Quota{Rate: 1, Burst: 1000, MinLease: 5, MaxLease: 10, LeaseTTL: time.Minute})
							if err != nil {
								t.Error(err)
								return
							}
							if r := <-s.Refill(context.Background(), tn, 1); r.Err != nil {
								t.Error(r.Err)
								return
							}
						}
					})
				}
				wg.Wait()
				s.Close()
				// From now on each release pipeline answers after
				// 250 ms, or fails when its ctx ends first: cut.
				var cut atomic.Int64
				slow := faultstore.Delay(250 * time.Millisecond)
				store.SetHook(func(ctx context.Context, c faultstore.Call) error {
					if c.Op != faultstore.OpRelease {
						return nil
					}
					err := slow(ctx, c)
					if err != nil {
						cut.Add(1)
					}
					return err
				})
				ctx, cancel := context.WithCancel(context.Background())
				if tc.deadline > 0 {
					ctx, cancel = context.WithTimeout(context.Background(), tc.deadline)
				} else {
					cancel()
				}
				defer cancel()
				start := time.Now()
				err = s.ReleaseAll(ctx)
				t.Logf("ReleaseAll took %v (promised for a ctx shorter than %v: %v), %d pipelines cut, err %v", time.Since(start), promised, promised, cut.Load(), err)
				if n := cut.Load(); n != 0 {
					t.Errorf("%d release pipelines cut by the deadline: a ctx shorter than a lease call's deadline plus 300 µs a tenant (%v) got less than that", n, promised)
				}
			})
		})
	}
}
