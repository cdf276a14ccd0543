package leasequota

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// pausableNodeBackend is a memstore on two Redis Cluster masters: tenants
// named "paused-..." live on a master whose calls hang until their
// deadline while paused is set (a master paused, or stopped and started
// again at the same address), every other on a live one.
type pausableNodeBackend struct {
	mem    *memstore.Store
	paused *atomic.Bool
}

func (b pausableNodeBackend) Instance(id string, window time.Duration) (lease.Store, error) {
	s, err := b.mem.Instance(id, window)
	return pausableNodeStore{s, b.paused}, err
}

type pausableNodeStore struct {
	lease.Store
	paused *atomic.Bool
}

func onPausedNode(tenant string) bool { return strings.HasPrefix(tenant, "paused-") }

func (s pausableNodeStore) NodeOf(_ context.Context, tenant string) (string, bool) {
	if onPausedNode(tenant) {
		return "paused:6379", true
	}
	return "live:6379", true
}

func (s pausableNodeStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if len(reqs) > 0 && onPausedNode(reqs[0].Tenant) && s.paused.Load() {
		<-ctx.Done()
		res := make([]lease.Result, len(reqs))
		for i := range res {
			res[i].Err = ctx.Err()
		}
		return res, ctx.Err()
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

func (s pausableNodeStore) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	if len(reqs) > 0 && onPausedNode(reqs[0].Tenant) && s.paused.Load() {
		<-ctx.Done()
		res := make([]lease.ReleaseResult, len(reqs))
		for i := range res {
			res[i].Err = ctx.Err()
		}
		return res
	}
	return s.Store.ReleaseMany(ctx, reqs)
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
		var paused atomic.Bool
		cfg, err := newConfig([]Option{WithDefaultQuota(Quota{Rate: 1000, Burst: 1000}),
			WithRedisTimeout(50 * time.Millisecond), WithRefreshInterval(100 * time.Millisecond),
			WithExpectedInstances(16), WithFailureMode(FailClosed)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLimiter(cfg, pausableNodeBackend{memstore.New(), &paused}, true)
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
		paused.Store(true)
		traffic(2 * time.Second)
		during := l.Stats()
		paused.Store(false)
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
