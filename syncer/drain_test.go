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
