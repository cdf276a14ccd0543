package leasequota

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// deadNodeStore is a memstore on two Redis Cluster masters: tenants
// named "dead-..." live on a master that answers nothing (their lease
// calls hang until their deadline), every other on a live one.
func deadNodeStore() *faultstore.Store {
	store := faultstore.New(memstore.New())
	store.SetHook(twoMasters(store, "dead-"))
	return store
}

// TestClusterDeadNodeRefillKeepsLiveColdWait: on a Redis Cluster a dead
// master delays its own tenants only. A new tenant's first request on a
// live master waits for its first lease (WithColdStartWait) and is
// admitted, its bucket full, though a refill of a tenant on the dead
// master failed just before. The delay of the last urgent refill was one
// for the whole syncer: the dead master's failed refill made every cold
// request of every master denied at once (cold_start) for a second.
func TestClusterDeadNodeRefillKeepsLiveColdWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := newConfig([]Option{testLogOption(t), WithDefaultQuota(Quota{Rate: 100, Burst: 100}),
			WithRedisTimeout(50 * time.Millisecond), WithFailureMode(FailClosed), WithColdStartWait(200 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLimiter(cfg, deadNodeStore(), true)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		if d := l.AllowN(ctx, "dead-a", 1); d.Allowed {
			t.Fatalf("a tenant on the dead master admitted without a lease: %+v", d)
		}
		d := l.AllowN(ctx, "live-b", 1)
		t.Logf("live tenant's first request after the dead master's failed refill: allowed %v, reason %v", d.Allowed, d.Reason)
		if !d.Allowed {
			t.Fatalf("a new tenant on a live master was denied (%v) because a refill on the dead master failed", d.Reason)
		}
		// The dead master's own new tenants are still denied at once: its
		// refills would not come in time.
		start := time.Now()
		if d := l.AllowN(ctx, "dead-c", 1); d.Allowed || time.Since(start) != 0 {
			t.Fatalf("a new tenant on the dead master: %+v after %v, want a denial at once", d, time.Since(start))
		}
	})
}

// TestClusterDeadNodeNewTenantByItsMode: on a Redis Cluster, where Down
// is always false, a new tenant on a dead master is decided by its
// failure mode once a refill there has failed as an outage, as on one
// server while the breaker is open (TestColdRequestInAnOutageByItsMode):
// FailOpen admits it. Each new tenant after the first was denied at once
// (cold_start) for a second after every failed refill on the master.
func TestClusterDeadNodeNewTenantByItsMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		cfg, err := newConfig([]Option{testLogOption(t), WithDefaultQuota(Quota{Rate: 100, Burst: 100}),
			WithRedisTimeout(50 * time.Millisecond), WithFailureMode(FailOpen), WithColdStartWait(200 * time.Millisecond)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := newLimiter(cfg, deadNodeStore(), true)
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		ctx := context.Background()
		for _, name := range []string{"dead-a", "dead-b", "dead-c"} {
			start := time.Now()
			d := l.AllowN(ctx, name, 1)
			t.Logf("%s: allowed %v, reason %v, after %v", name, d.Allowed, d.Reason, time.Since(start))
			if !d.Allowed || d.Reason != ReasonFailOpen {
				t.Fatalf("new tenant %s on the dead master: allowed %v, reason %v; want fail_open", name, d.Allowed, d.Reason)
			}
		}
		// A new tenant on the live master still gets its lease.
		if d := l.AllowN(ctx, "live-b", 1); !d.Allowed || d.Reason != ReasonColdStart {
			t.Fatalf("new tenant on the live master: %+v", d)
		}
	})
}
