package syncer_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// lateStore is a store whose lease calls all time out, while the quota
// version is read at once: a Redis that answers, too busy to run the
// scripts in time.
type lateStore struct{ lease.Store }

func (s lateStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	results = results[:0]
	for range reqs {
		results = append(results, lease.Result{Err: context.DeadlineExceeded})
	}
	return results, context.DeadlineExceeded
}

// TestFirstTimeoutsWithRedisAnsweringAreBusy: lease calls that time out
// before any of them was answered count as congestion, not an outage,
// when the quota version was read in time: the tenant backs off but is
// not failing (its failure mode does not decide), and the call counts in
// Errors. Before, a limiter took every timeout before its first answered
// lease call for an outage, so a fleet started at once put tenants in
// their failure mode while Redis answered.
func TestFirstTimeoutsWithRedisAnsweringAreBusy(t *testing.T) {
	var clock time.Time = time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	now := func() time.Time { return clock }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := syncer.New(lateStore{view}, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
	defer s.Close()
	ctx := context.Background()
	tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 8; i++ {
		tn.NoteMiss(1)
		clock = clock.Add(25 * time.Millisecond)
		s.Tick(ctx)
		if tn.Failing() {
			t.Fatalf("tick %d: failing after a timeout, though the quota version was read in time", i)
		}
	}
	if st := s.Stats(); st.Errors == 0 {
		t.Fatal("no failed lease call counted: the test shows nothing")
	}
}
