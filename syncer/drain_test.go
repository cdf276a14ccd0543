package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// unnamed is a Store whose grants carry no ServerTime: their GrantID is
// unknown (zero), as a rate share's drips are in the ledger.
type unnamed struct{ lease.Store }

func (s unnamed) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	res, err := s.Store.AcquireMany(ctx, reqs, results)
	for i := range res {
		res[i].Grant.ServerTime = time.Time{}
	}
	return res, err
}

// TestDrainForfeitsWhatTheLedgerDoesNotHold: tokens given back by a
// multi-tenant decision (UnspendWaited) after a round accounted for their
// spend are in the counter but not in the ledger; a drain (Close's
// ReleaseAll, an eviction) forfeits them. It sent their release with the
// zero time's age, which overflowed into a negative Age: Redis refused
// it, and Close reported the error.
func TestDrainForfeitsWhatTheLedgerDoesNotHold(t *testing.T) {
	now, _, _, mine, _ := MemstorePair(t)
	s := New(unnamed{mine}, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
	q := quota.Quota{Rate: 0.001, Burst: 5, MinLease: 5, MaxLease: 5, LeaseTTL: time.Second}
	tn, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	refillNow(t, s, tn, 5)
	if ok, _ := tn.SpendWaited(5); !ok {
		t.Fatal("the spend of the lease's 5 tokens failed")
	}
	s.Tick(context.Background()) // accounts for the spend: the ledger is empty
	tn.UnspendWaited(5)          // the decision gives them back
	s.Close()
	if err := s.ReleaseAll(context.Background()); err != nil {
		t.Errorf("ReleaseAll: %v", err)
	}
	if st := s.Stats(); st.Errors != 0 || st.Forfeited != 5 {
		t.Errorf("after the drain: %d errors, %d forfeited; want 0 and the 5 tokens the ledger did not hold", st.Errors, st.Forfeited)
	}
}

// TestGiveBackOfAnUnknownGrant: batch A (5 tokens) and, half a lease
// later, batch B (5), their grants' IDs unknown (as a rate share's
// tokens are). Past A's lease, a multi-tenant decision spends 5 and a
// round plans the tenant before the decision gives them back: the plan
// counted them spent from A, which then left the ledger. Given back at
// once (UnspendWaited, which the Limiter did while the oldest grant was
// unknown), they lived on as B's: requests spent 10 before the next plan
// where only B's 5 were alive. Unspend now refuses after a plan, and the
// refund forfeits them (no grant to name); with no plan in between it
// gives them back.
func TestGiveBackOfAnUnknownGrant(t *testing.T) {
	now, advance, _, mine, _ := MemstorePair(t)
	s := New(unnamed{mine}, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: time.Hour})
	defer s.Close()
	q := quota.Quota{Rate: 0.001, Burst: 20, MinLease: 5, MaxLease: 5, LeaseTTL: time.Second}
	tn, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	refillNow(t, s, tn, 5) // A
	advance(500 * time.Millisecond)
	refillNow(t, s, tn, 10) // B
	if got := tn.Held(); got != 10 {
		t.Fatalf("held %d, want two batches of 5", got)
	}
	// Before A's lease is over, nothing planned between the spend and
	// the give-back: the tokens go back.
	plans := s.Plans()
	if ok, _ := tn.SpendWaited(5); !ok {
		t.Fatal("the spend of 5 failed")
	}
	if !s.Unspend(tn, 5, plans) || tn.Held() != 10 {
		t.Fatalf("with no plan since the spend: given back %v, held %d; want true and 10", false, tn.Held())
	}
	advance(550 * time.Millisecond) // A's lease is over, B's is not
	front, clock, plans := tn.Front(), s.Clock(), s.Plans()
	if front != 0 {
		t.Fatalf("the oldest grant's ID is %d, want unknown", front)
	}
	if ok, _ := tn.SpendWaited(5); !ok {
		t.Fatal("the spend of 5 failed")
	}
	s.Tick(context.Background()) // plans the tenant: A leaves
	if s.Unspend(tn, 5, plans) {
		t.Fatalf("Unspend gave back tokens spent before a plan")
	}
	s.Refund(tn, 5, front, clock)
	spent := 0
	for {
		if ok, _ := tn.Spend(1); !ok {
			break
		}
		spent++
	}
	if spent > 5 {
		t.Errorf("%d tokens spent after A's lease ended; only B's 5 were alive", spent)
	}
}
