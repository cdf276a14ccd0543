package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// hangingCluster is a memstore behind a Redis Cluster that answers
// nothing: the slot map cannot be loaded (NodeOf waits for its ctx, as
// go-redis's MasterForKey does while it dials), and lease calls hang until
// their deadline.
func hangingCluster() *faultstore.Store {
	store := faultstore.New(memstore.New())
	store.SetNodes(func(ctx context.Context, _ string) (string, bool) {
		<-ctx.Done()
		return "", false
	})
	store.SetHook(faultstore.Hang(faultstore.OpAcquire)) // answers nothing: a call ends at its deadline
	return store
}

// TestClusterColdWaitBoundedByColdStartWait: a cold AllowN waits at most
// WithColdStartWait in Cluster mode too. RefillOutlasts looks the tenant's
// master up (NodeOf, up to the wait) before the request's wait budget
// starts, so a request on an unreachable cluster waited the look-up and
// then its whole cold wait again.
func TestClusterColdWaitBoundedByColdStartWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const wait = 200 * time.Millisecond
		cfg, err := newConfig([]Option{testLogOption(t), WithDefaultQuota(Quota{Rate: 100, Burst: 100}),
			WithRedisTimeout(wait), WithFailureMode(FailClosed), WithColdStartWait(wait),
			WithLogger(slog.New(slog.DiscardHandler))})
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLimiter(cfg, hangingCluster(), true)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		start := time.Now()
		d := l.AllowN(context.Background(), "a", 1)
		took := time.Since(start)
		t.Logf("cold request on an unreachable cluster: allowed %v, reason %v, after %v", d.Allowed, d.Reason, took)
		if took > wait {
			t.Fatalf("cold AllowN took %v, WithColdStartWait is %v", took, wait)
		}
	})
}
