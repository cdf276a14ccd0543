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

// TestClusterSparseTenantAfterOutageLeasesAgain is
// TestSparseTenantAfterOutageLeasesAgain on a Redis Cluster: a sparse
// tenant whose lease call failed while its master answered nothing is
// decided by a lease again once that master answers, not by its failure
// mode at its next request; and the limiter is no longer Degraded (on a
// Redis Cluster, while any tenant fails) meanwhile.
func TestClusterSparseTenantAfterOutageLeasesAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := faultstore.New(memstore.New())
		paused := twoMasters(store, "paused-")
		l, stop := clusterSparseRig(t, store, "paused-")
		defer l.Close(context.Background())
		ctx := context.Background()
		gap := 3 * DefaultLeaseTTL
		store.SetHook(paused)
		time.Sleep(2 * time.Second) // the master silent for more than the outage window
		if d := l.AllowN(ctx, "paused-sparse", 1); d.Mode != FailClosed {
			t.Fatalf("request with its master silent: %v, mode %v; want decided by its mode", d.Reason, d.Mode)
		}
		time.Sleep(gap)
		store.SetHook(nil)
		time.Sleep(gap)
		if l.Degraded() {
			t.Errorf("Degraded %v after the master answered again, no tenant's call failing since", gap)
		}
		d := l.AllowN(ctx, "paused-sparse", 1)
		stop()
		if !d.Allowed || d.Mode != FailDefault {
			t.Errorf("request %v after its master answered again: allowed %v, %v, mode %v; want admitted from a lease", gap, d.Allowed, d.Reason, d.Mode)
		}
	})
}

// clusterSparseRig returns a FailClosed limiter in Cluster mode on store
// (timeout 50 ms, refresh 100 ms) with two tenants of prefix: prefix+"busy",
// which a goroutine asks every 20 ms until stop is called, keeping its
// master called, and prefix+"sparse", made sparse (three requests three
// lease lifetimes apart, each admitted). In a synctest bubble.
func clusterSparseRig(t *testing.T, store *faultstore.Store, prefix string) (l *Limiter, stop func()) {
	t.Helper()
	cfg, err := newConfig([]Option{testLogOption(t), WithDefaultQuota(Quota{Rate: 100, Burst: 100}),
		WithRedisTimeout(50 * time.Millisecond), WithRefreshInterval(100 * time.Millisecond),
		WithFailureMode(FailClosed), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil)))})
	if err != nil {
		t.Fatal(err)
	}
	if l, err = newLimiter(cfg, store, true); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-time.After(20 * time.Millisecond):
				l.AllowN(ctx, prefix+"busy", 1)
			}
		}
	}()
	for i := range 3 {
		if d := l.AllowN(ctx, prefix+"sparse", 1); !d.Allowed {
			close(quit)
			<-done
			l.Close(ctx)
			t.Fatalf("request %d with the master up: denied, %v", i, d.Reason)
		}
		time.Sleep(3 * DefaultLeaseTTL)
	}
	return l, func() { close(quit); <-done }
}
