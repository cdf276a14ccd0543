package leasequota_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// readOnlyReply is Redis's reply to a write on a replica, as go-redis
// returns it (a redis.Error).
type readOnlyReply struct{}

func (readOnlyReply) Error() string { return "READONLY You can't write against a read only replica." }
func (readOnlyReply) RedisError()   {}

// TestReadOnlyProbeKeepsTheBreakerOpen: while Redis answers READONLY to
// every write (a replica serves reads) and the limiter makes no request,
// the breaker stays open. Its probe by the read of the quota version
// (idleBreaker) was answered by the replica and closed it, every failed
// tenant's call then going again at once to fail: Degraded flapped.
// Once writes run again, the probe closes it with no traffic.
func TestReadOnlyProbeKeepsTheBreakerOpen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		var readOnly atomic.Bool
		store.SetHook(func(ctx context.Context, c faultstore.Call) error {
			if readOnly.Load() && (c.Op == faultstore.OpAcquire || c.Op == faultstore.OpRelease || c.Op == faultstore.OpProbe) {
				return readOnlyReply{}
			}
			return nil
		})
		l, err := leasequota.NewWithStore(store,
			leasequota.WithLogger(testLogger(t)),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}),
			leasequota.WithRefreshInterval(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		for i := range 100 {
			l.AllowN(ctx, []string{"a", "b", "c"}[i%3], 1)
			time.Sleep(10 * time.Millisecond)
		}
		readOnly.Store(true)
		for i := 0; !l.Degraded(); i++ {
			if i > 1000 {
				t.Fatal("the breaker did not open on READONLY replies")
			}
			l.AllowN(ctx, "a", 1)
			time.Sleep(10 * time.Millisecond)
		}
		// No request from now on.
		samples, up := 0, 0
		for range 10000 { // 10 s, a sample a millisecond
			time.Sleep(time.Millisecond)
			samples++
			if !l.Degraded() {
				up++
			}
		}
		t.Logf("READONLY for 10 s: Degraded false in %d of %d samples", up, samples)
		if up > 0 {
			t.Errorf("Degraded false in %d of %d samples while Redis answered READONLY", up, samples)
		}
		readOnly.Store(false)
		back := time.Now()
		for l.Degraded() && time.Since(back) < 10*time.Second {
			time.Sleep(time.Millisecond)
		}
		if l.Degraded() {
			t.Errorf("Degraded still true %v after Redis ran writes again, no request made", time.Since(back))
		}
	})
}
