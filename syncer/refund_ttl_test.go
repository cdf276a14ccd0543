package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// releasesSeen is a Store that records every release it is sent with its
// result.
type releasesSeen struct {
	lease.Store
	reqs []lease.ReleaseRequest
	res  []lease.ReleaseResult
}

func (r *releasesSeen) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	res := r.Store.ReleaseMany(ctx, reqs)
	r.reqs = append(r.reqs, reqs...)
	r.res = append(r.res, res...)
	return res
}

// TestRefundAfterTheLeaseTTLFell: a refund whose tokens were leased under
// a LeaseTTL of 55 minutes, refunded 25 minutes after their spend and 75
// after their grant, once the quota's LeaseTTL fell to a minute. Its age,
// reckoned with the LeaseTTL in force at the refund, was 29 minutes: the
// return named the grant with an age under 2^32 µs, and Redis took the
// grant for the time 2^32 µs (71.6 minutes) after it, leaving out of the
// peak the full bucket an acquire saw after the grant: it credited tokens
// the bucket would have lost to its cap.
func TestRefundAfterTheLeaseTTLFell(t *testing.T) {
	now, advance, _, mine, other := MemstorePair(t)
	rec := &releasesSeen{Store: mine}
	s := New(rec, Options{Planner: NewPlanner(Config{Interval: time.Minute}, 1), Now: now, Driven: true, IdleTimeout: 24 * time.Hour})
	defer s.Close()
	// The bucket refills from empty in 40 minutes.
	q := quota.Quota{Rate: 10.0 / 2400, Burst: 10, MinLease: 10, MaxLease: 10, LeaseTTL: 55 * time.Minute}
	tn, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	refillNow(t, s, tn, 10) // grant G: the bucket is empty
	grant := tn.Front()
	if grant == 0 || tn.Held() != 10 {
		t.Fatalf("front %d, held %d: want a known grant of 10", grant, tn.Held())
	}
	advance(50 * time.Minute) // the bucket is full again
	s.Tick(ctx)               // the plan before the spend
	front, clock := tn.Front(), s.Clock()
	if front != grant {
		t.Fatalf("front %d after the plan, want the grant %d", front, grant)
	}
	if ok, _ := tn.Spend(10); !ok {
		t.Fatal("the spend of 10 failed")
	}
	// Another instance's acquire finds the bucket full (10) after the
	// grant: a return of G's tokens is owed no credit from now on.
	if res, err := other.AcquireMany(ctx, []lease.Request{{Tenant: "x", Limits: quota.Bucket(q), Want: 10}}, nil); err != nil || res[0].Err != nil || res[0].Grant.Granted != 10 {
		t.Fatalf("the other instance's acquire: %v %+v", err, res)
	}
	short := q
	short.LeaseTTL = time.Minute
	if !s.Rebase(tn, short) {
		t.Fatal("Rebase changed nothing")
	}
	advance(time.Second)
	s.Tick(ctx) // counts the spend: G leaves the ledger
	if tn.Front() == grant {
		t.Fatal("the grant is still the ledger's front")
	}
	advance(25 * time.Minute)
	checkOldRefund(t, s, rec, tn, grant, clock)
}

// checkOldRefund refunds 10 tokens of tn spent from grant (tn's ledger
// holds it no longer) after a plan at clock, and fails t if a return of
// them was credited anything: the bucket was full after their grant.
func checkOldRefund(t *testing.T, s *Syncer, rec *releasesSeen, tn *Tenant, grant lease.GrantID, clock int64) {
	t.Helper()
	got := s.Refund(tn, 10, grant, clock)
	s.Tick(context.Background()) // makes the refund's return, if queued
	seen := false
	for i, r := range rec.reqs {
		if r.Grant != grant {
			continue
		}
		seen = true
		if c := rec.res[i].Return.Credited; c > 0 || rec.res[i].Err != nil {
			t.Errorf("the refund's return of %d tokens granted 75 minutes ago (Age %v) was credited %v (err %v); the bucket was full after their grant: want 0",
				r.Amount, r.Age, c, rec.res[i].Err)
		}
	}
	if got == RefundReturned && !seen {
		t.Errorf("the refund was queued as a return, and no return named its grant")
	}
	st := s.Stats()
	t.Logf("refund: %v; stats: refunded %d, returned %d, forfeited %d", got, st.Refunded, st.Returned, st.Forfeited)
}

// TestRefundOfAnEvictedTenantTrackedWithAShorterTTL: as
// TestRefundAfterTheLeaseTTLFell, with the tenant evicted after the spend
// and tracked again under the shorter LeaseTTL (the limiter's Refund
// tracks an evicted tenant again, under its quota as now resolved).
func TestRefundOfAnEvictedTenantTrackedWithAShorterTTL(t *testing.T) {
	now, advance, _, mine, other := MemstorePair(t)
	rec := &releasesSeen{Store: mine}
	s := New(rec, Options{Planner: NewPlanner(Config{Interval: time.Minute}, 1), Now: now, Driven: true, IdleTimeout: 5 * time.Minute})
	defer s.Close()
	q := quota.Quota{Rate: 10.0 / 2400, Burst: 10, MinLease: 10, MaxLease: 10, LeaseTTL: 55 * time.Minute}
	tn, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	y, err := s.Track("y", q)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	start := now()
	refillNow(t, s, tn, 10)
	grant := tn.Front()
	advance(50 * time.Minute)
	refillNow(t, s, y, 1) // the plan before the spend (x's is not planned)
	clock := s.Clock()
	if tn.Front() != grant || clock != now().UnixNano() {
		t.Fatalf("front %d, clock %d: want the grant %d, and the clock now", tn.Front(), clock, grant)
	}
	if ok, _ := tn.Spend(10); !ok {
		t.Fatal("the spend of 10 failed")
	}
	if res, err := other.AcquireMany(ctx, []lease.Request{{Tenant: "x", Limits: quota.Bucket(q), Want: 10}}, nil); err != nil || res[0].Err != nil || res[0].Grant.Granted != 10 {
		t.Fatalf("the other instance's acquire: %v %+v", err, res)
	}
	for i := 0; !tn.Evicted(); i++ {
		if i == 20 {
			t.Fatalf("x was not evicted in %d ticks", i)
		}
		advance(time.Minute)
		s.Tick(ctx)
	}
	advance(start.Add(75 * time.Minute).Sub(now()))
	short := q
	short.LeaseTTL = time.Minute
	if tn, err = s.Track("x", short); err != nil {
		t.Fatal(err)
	}
	checkOldRefund(t, s, rec, tn, grant, clock)
}

// TestRefundAfterTheOverridesLeaseTTLEnded: as
// TestRefundAfterTheLeaseTTLFell, with the 55 minute LeaseTTL an
// override's, deleted after the spend: the lease call that counts the
// spend reports none, and the base quota's 1 minute applies. A guard
// with two lines of defence: the syncer counts the override's LeaseTTL
// in the refund's age (setOverride's ttlFalls), and Redis credits nothing
// for tokens granted before a change of the override (their bucket's
// level history starts again). It passes with either alone.
func TestRefundAfterTheOverridesLeaseTTLEnded(t *testing.T) {
	now, advance, _, mine, other := MemstorePair(t)
	rec := &releasesSeen{Store: mine}
	s := New(rec, Options{Planner: NewPlanner(Config{Interval: time.Minute}, 1), Now: now, Driven: true, IdleTimeout: 24 * time.Hour})
	defer s.Close()
	q := quota.Quota{Rate: 10.0 / 2400, Burst: 10, MinLease: 10, MaxLease: 10, LeaseTTL: time.Minute}
	ctx := context.Background()
	if _, err := other.SetOverride(ctx, "x", quota.Bucket(q), lease.Override{Rate: q.Rate, Burst: q.Burst, MinLease: 10, MaxLease: 10, LeaseTTL: 55 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	tn, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	refillNow(t, s, tn, 10)
	grant := tn.Front()
	if ttl := tn.Limits().LeaseTTL; ttl != 55*time.Minute || grant == 0 {
		t.Fatalf("LeaseTTL %v, front %d: want the override's 55m and a known grant", ttl, grant)
	}
	advance(50 * time.Minute)
	s.Tick(ctx)
	front, clock := tn.Front(), s.Clock()
	if front != grant {
		t.Fatalf("front %d after the plan, want the grant %d", front, grant)
	}
	if ok, _ := tn.Spend(10); !ok {
		t.Fatal("the spend of 10 failed")
	}
	if _, err := other.DeleteOverride(ctx, "x", quota.Bucket(q)); err != nil {
		t.Fatal(err)
	}
	advance(time.Second)
	s.Tick(ctx) // counts the spend, and its lease call finds the bucket full and no override
	if ttl := tn.Limits().LeaseTTL; ttl != time.Minute || tn.Front() == grant {
		t.Fatalf("LeaseTTL %v, front %d: want the base quota's 1m, and the grant gone", ttl, tn.Front())
	}
	advance(25 * time.Minute)
	// The round returns the lease that call brought, expired; then
	// another instance takes what the bucket holds.
	s.Tick(ctx)
	if res, err := other.AcquireMany(ctx, []lease.Request{{Tenant: "x", Limits: quota.Bucket(q), Want: 10}}, nil); err != nil || res[0].Err != nil {
		t.Fatalf("the other instance's acquire: %v %+v", err, res)
	}
	checkOldRefund(t, s, rec, tn, grant, clock)
}
