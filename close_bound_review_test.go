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
		leasequota.WithRedisTimeout(rt), leasequota.WithColdStartWait(10*time.Second), leasequota.WithLeaseTTL(time.Minute),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 100, MinLease: 2}))
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
	// The store answers no release from now on. It notes when each
	// release call of Close's returns (its ctx has Close's values) began,
	// and its deadline. A round in progress when Close began may make
	// release calls of its own, each with its deadline, which Close
	// waits for before its returns: they are not counted.
	type call struct{ began, deadline time.Time }
	type closeKey struct{}
	var (
		mu    sync.Mutex
		calls []call
	)
	store.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op != faultstore.OpRelease {
			return nil
		}
		began := time.Now()
		dl, ok := ctx.Deadline()
		if !ok {
			t.Error("a release call without a deadline")
		}
		if ctx.Value(closeKey{}) != nil {
			mu.Lock()
			calls = append(calls, call{began, dl})
			mu.Unlock()
		}
		<-ctx.Done()
		return ctx.Err()
	})
	done, cancel := context.WithCancel(context.WithValue(ctx, closeKey{}, true))
	cancel()
	start := time.Now()
	l.Close(done)
	took := time.Since(start)
	bound := rt + tenants*300*time.Microsecond
	// The returns' calls together get one deadline, from when the first
	// of them began at the latest. Not Close's whole time: before its
	// returns it stops the syncer and waits for its goroutines and calls
	// in flight (a round's release of 74 tenants' tokens made 116 ms after
	// Close began, which ran out its own deadline), and drains 2,500
	// tenants: that took 559 ms of a Close of 2.31 s under -race beside
	// two busy loops, and 3.4 s of 5.17 s, over the 500 ms of slack this
	// test allowed Close beyond bound.
	mu.Lock()
	defer mu.Unlock()
	if len(calls) < 2 {
		t.Fatalf("%d release calls of Close's returns, want a pipeline of 1,000 and more: the test shows nothing", len(calls))
	}
	first, last := calls[0].began, calls[0].deadline
	for _, c := range calls[1:] {
		if c.began.Before(first) {
			first = c.began
		}
		if c.deadline.After(last) {
			last = c.deadline
		}
	}
	t.Logf("Close with a done ctx took %v; its %d release calls began %v in and had until %v after the first began (one call deadline: %v)",
		took, len(calls), first.Sub(start), last.Sub(first), bound)
	// The deadline counts 300 µs for each return queued besides the
	// tenants' (an urgent refill's, say): 250 ms more is 833 of them.
	// Pipelines given a deadline each would end 2.3 s or more after the
	// first began (1.3 s for one of 1,000, and the next's at least 1 s).
	if last.Sub(first) > bound+250*time.Millisecond {
		t.Errorf("Close's %d release calls had until %v after the first began, beyond one lease call's deadline (%v)", len(calls), last.Sub(first), bound)
	}
}
