package leasequota_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestInvalidateSlowQuotaFunc: while the quota function blocks in a
// refresh of one tenant, requests of that tenant and of others are
// decided without waiting for it, Invalidate returns at once, and the
// syncer's loop goes on leasing (a new tenant gets its first lease); once
// the function returns, the new quota is in force.
func TestInvalidateSlowQuotaFunc(t *testing.T) {
	store := setup(t)
	ctx := context.Background()
	old := leasequota.Quota{Rate: 1000, Burst: 1000}
	plan := leasequota.Quota{Rate: 2000, Burst: 3000}
	var (
		mu      sync.Mutex
		slow    bool // the next call for "slow" blocks
		current = old
		entered = make(chan struct{})
		release = make(chan struct{})
	)
	f := func(tenant string) leasequota.Quota {
		mu.Lock()
		block := slow && tenant == "slow"
		slow = slow && !block
		mu.Unlock()
		if block {
			close(entered)
			<-release
		}
		mu.Lock()
		defer mu.Unlock()
		return current
	}
	l := newLimiter(t, store, leasequota.WithQuotaFunc(f), leasequota.WithQuotaRefresh(time.Hour),
		leasequota.WithColdStartWait(5*time.Second))
	if d := l.AllowN(ctx, "slow", 1); !d.Allowed {
		t.Fatalf("first request: %+v", d)
	}
	released := false
	defer func() {
		if !released {
			close(release)
		}
	}()
	mu.Lock()
	slow, current = true, plan // the plan changes in the database
	mu.Unlock()
	l.Invalidate("slow")
	select {
	case <-entered:
	case <-time.After(10 * time.Second):
		t.Fatal("the quota function was not called again within 10s of Invalidate")
	}

	// The function is blocked now. Nothing else waits for it.
	done := make(chan []leasequota.Decision, 1)
	go func() {
		l.Invalidate("slow")
		l.Invalidate("other")
		done <- []leasequota.Decision{l.AllowN(ctx, "slow", 1), l.AllowN(ctx, "fresh", 1)}
	}()
	select {
	case ds := <-done:
		if !ds[0].Allowed || ds[0].Quota.Rate != old.Rate || ds[1].Quota.Rate != plan.Rate {
			t.Errorf("the tenant being refreshed: %+v, want admitted at the old quota; the new tenant at the new one: %+v", ds[0], ds[1].Quota)
		}
		if !ds[1].Allowed || ds[1].Reason != leasequota.ReasonColdStart && ds[1].Reason != leasequota.ReasonLeased {
			t.Errorf("a new tenant while the function blocks: %+v, want its first lease from the syncer", ds[1])
		}
	case <-time.After(10 * time.Second):
		t.Fatal("requests or Invalidate waited for the blocked quota function")
	}

	close(release)
	released = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := l.Tenant("slow")
		if info.Quota.Rate == plan.Rate && info.Quota.Burst == plan.Burst {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("quota %+v 10s after the function returned %+v", info.Quota, plan)
		}
		time.Sleep(time.Millisecond) // polling pace
	}
	if d := l.AllowN(ctx, "slow", 1); d.Quota.Rate != plan.Rate {
		t.Errorf("decision after the refresh: %+v, want the new quota", d.Quota)
	}
}

func TestQuotaRefreshRejectsBadOptions(t *testing.T) {
	f := func(string) leasequota.Quota { return leasequota.Quota{Rate: 1, Burst: 1} }
	for _, c := range []struct {
		name string
		opts []leasequota.Option
	}{
		{"zero", []leasequota.Option{leasequota.WithQuotaFunc(f), leasequota.WithQuotaRefresh(0)}},
		{"negative", []leasequota.Option{leasequota.WithQuotaFunc(f), leasequota.WithQuotaRefresh(-time.Second)}},
		{"below the refresh interval", []leasequota.Option{leasequota.WithQuotaFunc(f), leasequota.WithQuotaRefresh(99 * time.Millisecond)}},
		{"without a quota function", []leasequota.Option{leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}), leasequota.WithQuotaRefresh(time.Minute)}},
	} {
		if _, err := leasequota.NewWithStore(setup(t), c.opts...); !errors.Is(err, leasequota.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", c.name, err)
		}
	}
	l := newLimiter(t, setup(t), leasequota.WithQuotaFunc(f), leasequota.WithQuotaRefresh(leasequota.DefaultRefreshInterval))
	// Invalidate never fails: not tracked, after Close.
	l.Invalidate("never seen")
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	l.Invalidate("never seen")
}
