package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestLearntShareEndsWhenGrantedUnderAHigherRate: a rate share that a
// reply reports without this call having asked for it (the instance
// forgot it: the tenant was evicted and is tracked anew, or the process
// restarted under the same instance id) was granted under a rate this
// instance cannot know. Redis keeps it in force through a quota change,
// so if the rate fell since, its tokens are the old rate's: it must not
// accrue here. It was recorded as granted under the rate the reply
// brought, so a share of 950 a second granted under a rate of 1,000 went
// on coming due after the rate went to 10 until its end.
func TestLearntShareEndsWhenGrantedUnderAHigherRate(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return clock }))
	b, err := store.Instance("B", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	old := lease.Limits{Rate: 1000, Burst: 100}
	ctx := context.Background()
	acq := func(r lease.Request) lease.Grant {
		t.Helper()
		res, err := b.AcquireMany(ctx, []lease.Request{r}, nil)
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		return res[0].Grant
	}
	acq(lease.Request{Tenant: "t", Limits: old, Want: 100, Demand: 2000})
	clock = clock.Add(10 * time.Millisecond)
	terms := lease.ShareTerms{Period: 10 * time.Second, Hold: time.Second, Headroom: 0.05}
	if g := acq(lease.Request{Tenant: "t", Limits: old, Want: 1, Demand: 2000, Share: lease.ShareAsk, ShareTerms: terms}); !g.RateShare.Held() {
		t.Fatal("no share granted")
	}
	// This instance does not know the share (its tenant tracked anew).
	qOld := quota.Quota{Rate: 1000, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second, ShareHeadroom: 0.05}, 1)
	s := scarceState(p, clock, 2000)

	// The operator lowers the rate to 10 a second; the next reply brings
	// the override and the share.
	clock = clock.Add(10 * time.Millisecond)
	if _, err := b.SetOverride(ctx, "t", old, lease.Override{Rate: 10, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	qNew := quota.Quota{Rate: 10, Burst: 10, LeaseTTL: time.Second, MaxLease: 10}
	changed := clock
	clock = clock.Add(10 * time.Millisecond)
	r := acq(lease.Request{Tenant: "t", Limits: old, Want: 1, Demand: 2000})
	if !r.RateShare.Held() {
		t.Fatal("the reply reports no share")
	}
	p.Shared(s, qNew, lease.ShareKeep, clock, clock, r)

	var dripped int64
	ended := false
	for at := clock; at.Before(changed.Add(5 * time.Second)); at = at.Add(100 * time.Millisecond) {
		a := p.Plan(s, qNew, at, Input{Level: 0, Need: 1, Missed: 100})
		dripped += a.Drip
		s.ledger.Sync(0)
		ended = ended || a.Share == lease.ShareEnd
		if a.Calls() {
			p.Skipped(s, qNew, at, 0, a.cut)
		}
	}
	allowed := float64(qNew.Burst) + qNew.Rate*5 + 2*float64(qOld.MaxLease)
	t.Logf("a share of %g a second learnt after the rate went to 10: %d of its tokens came due in 5 s (the bound after a change allows %.0f); ended: %v",
		r.RateShare.Rate, dripped, allowed, ended)
	if float64(dripped) > allowed {
		t.Errorf("%d share tokens came due in the 5 s after the rate went to 10 a second; the bound after a change allows %.0f", dripped, allowed)
	}
	if !ended {
		t.Errorf("no plan ended the share granted under the old rate")
	}
}
