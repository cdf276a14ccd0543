package leasequota

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// twoMasters makes store a memstore on two Redis Cluster masters: the
// tenants whose names begin with prefix live on one of them, failing,
// every other on a live one. It returns the failing master's hook:
// while it is set, the master's lease calls (acquires and releases) hang
// until their deadline.
func twoMasters(store *faultstore.Store, prefix string) faultstore.Hook {
	onFailing := func(tenant string) bool { return strings.HasPrefix(tenant, prefix) }
	store.SetNodes(func(_ context.Context, tenant string) (string, bool) {
		if onFailing(tenant) {
			return "failing:6379", true
		}
		return "live:6379", true
	})
	return func(ctx context.Context, c faultstore.Call) error {
		if (c.Op == faultstore.OpAcquire || c.Op == faultstore.OpRelease) && slices.ContainsFunc(c.Tenants, onFailing) {
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}
}

// TestClusterPausedMasterGetsItsWindowBack: on a Redis Cluster, a master
// silent for longer than the outage window D (2 s here, D = 1 s) and
// then back at the same address gets back the call window it had before
// the outage, as one Redis does when its circuit breaker closes
// (budget.recovered). Before, the cuts its timeouts made all through the
// outage (a timed-out call is a slow one) stayed: with 50 tenants on it,
// its window went from 256 to its floor, 16 (19-24 cuts), and was 29 a
// second after it answered again.
func TestClusterPausedMasterGetsItsWindowBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Tenants named "paused-..." live on a master that hangs while
		// paused (a master paused, or stopped and started again at the
		// same address), every other on a live one.
		store := faultstore.New(memstore.New())
		paused := twoMasters(store, "paused-")
		cfg, err := newConfig([]Option{testLogOption(t), WithDefaultQuota(Quota{Rate: 1000, Burst: 1000}),
			WithRedisTimeout(50 * time.Millisecond), WithRefreshInterval(100 * time.Millisecond),
			WithExpectedInstances(16), WithFailureMode(FailClosed)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLimiter(cfg, store, true)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		traffic := func(d time.Duration) {
			for end := time.Now().Add(d); time.Now().Before(end); {
				for i := range 50 {
					l.AllowN(ctx, fmt.Sprint("paused-", i), 1)
					l.AllowN(ctx, fmt.Sprint("live-", i), 1)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
		traffic(time.Second)
		before := l.Stats()
		store.SetHook(paused)
		traffic(2 * time.Second)
		during := l.Stats()
		store.SetHook(nil)
		traffic(time.Second)
		after := l.Stats()
		t.Logf("call window: %d before the pause, %d at its end (%d cuts), %d a second after it; lease calls held back for want of room in that second: %d",
			before.CallWindow, during.CallWindow, during.WindowCuts-before.WindowCuts, after.CallWindow, after.HeldBack-during.HeldBack)
		if during.CallWindow >= before.CallWindow {
			t.Fatalf("the pause did not cut the paused master's window (%d, then %d): the test did not test", before.CallWindow, during.CallWindow)
		}
		if after.CallWindow < before.CallWindow {
			t.Errorf("a second after the paused master answered again, its call window is %d, want its %d of before the outage", after.CallWindow, before.CallWindow)
		}
	})
}
