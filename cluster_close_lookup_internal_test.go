package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
)

// TestClusterCloseWaitsOneDeadlineForARefill: on a Redis Cluster that
// answers nothing (the slot map cannot be loaded, lease calls hang), Close
// waits at most one WithRedisTimeout for the calls in flight, as
// docs/design.md says. A cold request's refill waited for the tenant's
// lock behind a round's acquire; Close began during that call, and then
// waited for the call, the look-up after its failure (busy), the
// refill's look-up, its call and the look-up after that, each bounded by
// WithRedisTimeout: 975 ms with a 200 ms deadline.
func TestClusterCloseWaitsOneDeadlineForARefill(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const timeout = 200 * time.Millisecond
		cfg, err := newConfig([]Option{testLogOption(t), WithDefaultQuota(Quota{Rate: 100, Burst: 100}),
			WithRedisTimeout(timeout), WithFailureMode(FailClosed), WithColdStartWait(5 * time.Second),
			WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil)))})
		if err != nil {
			t.Fatal(err)
		}
		store := hangingCluster()
		var acquires []time.Time
		store.SetHook(func(ctx context.Context, c faultstore.Call) error {
			if c.Op != faultstore.OpAcquire {
				return nil // the quota version's poll and the roster answer
			}
			acquires = append(acquires, time.Now()) // one at a time: the tenant's lock
			<-ctx.Done()
			return ctx.Err()
		})
		l, err := newLimiter(cfg, store, true)
		if err != nil {
			t.Fatal(err)
		}
		allowed := make(chan Decision, 1)
		go func() { allowed <- l.AllowN(context.Background(), "a", 1) }()
		// The request's look-up (RefillOutlasts) runs out at 200 ms;
		// meanwhile a round has looked the cold tenant up too and sent
		// its acquire at 225 ms, which holds the tenant's lock, and the
		// request's refill waits for it.
		time.Sleep(250 * time.Millisecond)
		synctest.Wait()
		if len(acquires) != 1 {
			t.Fatalf("%d acquires sent by 250 ms, want the round's one", len(acquires))
		}
		start := time.Now()
		l.Close(context.Background())
		took := time.Since(start)
		if d := <-allowed; d.Reason != ReasonClosed {
			t.Errorf("the waiting request: %v, want ReasonClosed", d.Reason)
		}
		t.Logf("Close took %v with WithRedisTimeout %v; acquires sent at %v", took, timeout, acquires)
		if took > timeout {
			t.Fatalf("Close took %v, more than one WithRedisTimeout (%v)", took, timeout)
		}
	})
}
