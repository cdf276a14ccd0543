package leasequota

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// plans is a QuotaFunc's database: each tenant's plan, and the calls.
type plans struct {
	mu    sync.Mutex
	q     map[string]Quota
	calls map[string]int
}

func (p *plans) set(tenant string, q Quota) {
	p.mu.Lock()
	p.q[tenant] = q
	p.mu.Unlock()
}

func (p *plans) quota(tenant string) Quota {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls[tenant]++
	if q, ok := p.q[tenant]; ok {
		return q
	}
	return Quota{Rate: 1, Burst: 1}
}

func (p *plans) count(tenant string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.calls[tenant]
}

// TestQuotaRefresh drives the refresher and the syncer by hand on a
// clock of the test's: with WithQuotaRefresh(d), every tracked tenant's
// quota is resolved again exactly once per d, the tenants at different
// times, and a changed plan is in force after that; tokens leased at the
// old quota stay held, and the next lease call passes the new bucket.
// Invalidate applies a change at the next pass, only for tracked tenants;
// an invalid new quota is not applied.
func TestQuotaRefresh(t *testing.T) {
	ctx := context.Background()
	clock := &manualClock{now: time.Unix(1_800_000_000, 0)}
	store := memstore.New(memstore.WithClock(clock.Now))
	p := &plans{q: map[string]Quota{}, calls: map[string]int{}}
	const d = 10 * time.Second
	l, err := NewWithStore(store, WithQuotaFunc(p.quota), WithQuotaRefresh(d), withManualClock(clock.Now),
		WithColdStartWait(0), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		func(c *config) { c.manualSync = true })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)

	old := Quota{Rate: 10, Burst: 10}
	tenants := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	for _, tn := range tenants {
		p.set(tn, old)
		l.AllowN(ctx, tn, 1) // tracked; leased by the round
	}
	l.sync.Round(ctx, l.sync.Tenants())
	for _, tn := range tenants {
		if d := l.AllowN(ctx, tn, 1); !d.Allowed || d.Quota.Rate != old.Rate {
			t.Fatalf("%s before the change: %+v", tn, d)
		}
	}
	held := l.sync.Tenant("a").Held()

	// The plan changes in the database: nothing changes before a refresh.
	plan := Quota{Rate: 50, Burst: 100}
	for _, tn := range tenants {
		p.set(tn, plan)
	}
	if info, _ := l.Tenant("a"); info.Quota.Rate != old.Rate {
		t.Fatalf("quota changed before any refresh: %+v", info.Quota)
	}
	// Over one d, in steps of the refresh interval, each tenant is
	// resolved again exactly once, and not all in the same pass.
	steps := map[int]bool{}
	for step := 1; step <= int(d/DefaultRefreshInterval); step++ {
		clock.Advance(DefaultRefreshInterval)
		before := 0
		for _, tn := range tenants {
			before += p.count(tn)
		}
		l.refreshQuotas(ctx)
		after := 0
		for _, tn := range tenants {
			after += p.count(tn)
		}
		if after > before {
			steps[step] = true
		}
	}
	for _, tn := range tenants {
		if n := p.count(tn); n != 2 {
			t.Errorf("%s: the quota function was called %d times, want 2 (track, one refresh)", tn, n)
		}
		info, _ := l.Tenant(tn)
		if info.Quota.Rate != plan.Rate || info.Quota.Burst != plan.Burst {
			t.Errorf("%s: quota %+v after a refresh period, want the new plan %+v", tn, info.Quota, plan)
		}
	}
	if len(steps) < 2 {
		t.Errorf("the refreshes all came in %d pass(es): want them spread over d", len(steps))
	}
	// Leased tokens are held across the change; the next lease call
	// passes the new burst to the bucket.
	if h := l.sync.Tenant("a").Held(); h != held {
		t.Errorf("held %d tokens after the change, %d before: the change must leave the lease alone", h, held)
	}
	if d := l.AllowN(ctx, "a", 1); d.Quota.Burst != plan.Burst {
		t.Errorf("decision after the refresh applies %+v, want %+v", d.Quota, plan)
	}
	clock.Advance(time.Second)
	l.sync.Round(ctx, l.sync.Tenants())
	if b := store.Tenant("a").Bucket; b == nil || b.Burst != plan.Burst {
		t.Errorf("the bucket after the next lease call: %+v, want burst %d", b, plan.Burst)
	}

	// Invalidate: applied at the next pass, without waiting for d.
	next := Quota{Rate: 7, Burst: 7}
	p.set("a", next)
	l.Invalidate("a")
	l.Invalidate("untracked")
	if info, _ := l.Tenant("a"); info.Quota.Rate != plan.Rate {
		t.Fatalf("Invalidate applied the quota itself: %+v", info.Quota)
	}
	l.refreshQuotas(ctx)
	if info, _ := l.Tenant("a"); info.Quota.Rate != next.Rate || info.Quota.Burst != next.Burst {
		t.Errorf("after Invalidate and a pass: %+v, want %+v", info.Quota, next)
	}
	if n := p.count("untracked"); n != 0 {
		t.Errorf("Invalidate of an untracked tenant called the quota function %d times", n)
	}
	// An invalid new quota is not applied.
	p.set("a", Quota{Rate: -1, Burst: 7})
	l.Invalidate("a")
	l.refreshQuotas(ctx)
	if info, _ := l.Tenant("a"); info.Quota.Rate != next.Rate {
		t.Errorf("an invalid quota was applied: %+v", info.Quota)
	}
}

// TestQuotaRefreshUnderOverride: a quota stored with SetQuota stays in
// force over a refreshed configured quota, which applies once it is
// deleted.
func TestQuotaRefreshUnderOverride(t *testing.T) {
	ctx := context.Background()
	clock := &manualClock{now: time.Unix(1_800_000_000, 0)}
	p := &plans{q: map[string]Quota{"a": {Rate: 10, Burst: 10}}, calls: map[string]int{}}
	l, err := NewWithStore(memstore.New(memstore.WithClock(clock.Now)), WithQuotaFunc(p.quota), withManualClock(clock.Now),
		WithColdStartWait(0), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		func(c *config) { c.manualSync = true })
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(ctx)
	l.AllowN(ctx, "a", 1)
	over := Quota{Rate: 1000, Burst: 1000}
	if err := l.SetQuota(ctx, "a", over); err != nil {
		t.Fatal(err)
	}
	l.sync.Round(ctx, l.sync.Tenants())
	if info, _ := l.Tenant("a"); info.Quota.Rate != over.Rate {
		t.Fatalf("override not in force: %+v", info.Quota)
	}
	plan := Quota{Rate: 20, Burst: 20}
	p.set("a", plan)
	l.Invalidate("a")
	l.refreshQuotas(ctx)
	if info, _ := l.Tenant("a"); info.Quota.Rate != over.Rate {
		t.Fatalf("the refreshed configured quota displaced the override: %+v", info.Quota)
	}
	if err := l.DeleteQuota(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	// The next lease call reads the override's absence: one comes due
	// once the lease has expired and the tenant asks again. Its request
	// comes a lease lifetime after the last, so the syncer keeps it no
	// lease (sparse): the request's miss (denied at once, with
	// WithColdStartWait(0)) makes the round call for its own.
	clock.Advance(DefaultLeaseTTL)
	for range 2 {
		l.AllowN(ctx, "a", 1)
		l.sync.Round(ctx, l.sync.Tenants())
	}
	if info, _ := l.Tenant("a"); info.Quota.Rate != plan.Rate || info.Quota.Burst != plan.Burst {
		t.Fatalf("after DeleteQuota: %+v, want the refreshed plan %+v", info.Quota, plan)
	}
}

// TestQuotaRefreshSpreadsOverLongPeriods: with WithQuotaRefresh of an
// hour, the tenants' re-resolutions spread over the hour: each quarter of
// it gets about a quarter of them. The phase was the hash mod the period,
// so for periods above 2^32 ns (4.29 s) every phase fell in the first
// 4.29 s: an hour's QuotaFunc calls, often database reads, came in a burst
// at its start, on every instance at once.
func TestQuotaRefreshSpreadsOverLongPeriods(t *testing.T) {
	clock := &manualClock{now: time.Unix(1_800_000_000, 0)}
	p := &plans{q: map[string]Quota{}, calls: map[string]int{}}
	l, err := NewWithStore(memstore.New(memstore.WithClock(clock.Now)), withManualClock(clock.Now), WithManualSync(),
		WithQuotaRefresh(time.Hour), WithQuotaFunc(p.quota), WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	const tenants = 1000
	for i := range tenants {
		if _, _, err := l.track(fmt.Sprintf("tenant-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	l.refreshQuotas(ctx)
	var quarters [4]int
	for q := range quarters {
		before := 0
		for i := range tenants {
			before += p.count(fmt.Sprintf("tenant-%d", i))
		}
		for range 15 {
			clock.Advance(time.Minute)
			l.refreshQuotas(ctx)
		}
		for i := range tenants {
			quarters[q] += p.count(fmt.Sprintf("tenant-%d", i))
		}
		quarters[q] -= before
	}
	t.Logf("re-resolutions by quarter of the hour: %v", quarters)
	for q, n := range quarters {
		if n < tenants/4*3/4 || n > tenants/4*5/4 {
			t.Errorf("quarter %d of the hour re-resolved %d of %d tenants, want about a quarter", q, n, tenants)
		}
	}
}
