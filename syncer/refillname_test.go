package syncer

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sync/singleflight"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestRefillJoinedAcrossEviction: Refill joins the call in flight for the
// tenant's name, so a request of a tenant made anew after an eviction may
// join a refill of the evicted one. That refill leased nothing (the
// tenant was evicted), and the new tenant's request got no lease: it was
// left to wait for a retry within a refresh interval. The refill of an
// evicted tenant now refills the tenant that has its name since.
//
// The refill of the old tenant waits for its lock, which the test holds
// as eviction does (Syncer.evict) while the registry removes and marks it.
func TestRefillJoinedAcrossEviction(t *testing.T) {
	defer goleak.VerifyNone(t)
	view, err := memstore.New().Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := New(view, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), CallTimeout: 10 * time.Second})
	defer s.Close()
	ctx := context.Background()
	q := quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	old, err := s.Track("a", q)
	if err != nil {
		t.Fatal(err)
	}
	old.mu.Lock()
	first := s.Refill(ctx, old, 1) // waits for old's lock
	s.reg.remove([]*Tenant{old})
	if !old.Evicted() || s.Tenant("a") != nil {
		t.Fatal("the old tenant is not removed and marked evicted")
	}
	tn, err := s.Track("a", q)
	if err != nil {
		t.Fatal(err)
	}
	joined := s.Refill(ctx, tn, 1) // joins first: the same name
	s.unlock(old)
	for i, ch := range []<-chan singleflight.Result{first, joined} {
		if r := <-ch; r.Err != nil {
			t.Errorf("refill %d: %v", i, r.Err)
		}
	}
	if tn.Held() < 1 || old.Held() != 0 {
		t.Errorf("after the refill the new tenant holds %d tokens, the evicted one %d; want a lease for the new one only", tn.Held(), old.Held())
	}
}
