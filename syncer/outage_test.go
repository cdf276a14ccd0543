package syncer_test

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// switchStore answers as its mode says: in time, late (the test's clock
// moves on by late before the reply), or refusing at once (a Redis
// restarting: connection refused).
type switchStore struct {
	lease.Store
	clock  *fakeClock
	mu     sync.Mutex
	late   time.Duration // guarded by mu
	refuse bool          // guarded by mu
}

func (s *switchStore) set(late time.Duration, refuse bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.late, s.refuse = late, refuse
}

func (s *switchStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	s.mu.Lock()
	late, refuse := s.late, s.refuse
	s.mu.Unlock()
	if refuse {
		err := fmt.Errorf("dial tcp: %w", syscall.ECONNREFUSED)
		res := make([]lease.Result, len(reqs))
		for i := range res {
			res[i].Err = err
		}
		return res, err
	}
	s.clock.Add(late)
	return s.Store.AcquireMany(ctx, reqs, results)
}

// TestRefusedCallsKeepTheWindowToRestore: calls that Redis refused at
// once say nothing of how many it runs. When an outage's late calls had
// cut the call window and refusals followed (a Redis restarting), the
// refusals recorded the cut window as the one to restore when the breaker
// closed, so the outage's cuts stayed after it. Now the window restored is
// the one of the last call answered in time.
func TestRefusedCallsKeepTheWindowToRestore(t *testing.T) {
	clock, view := clockedView(t)
	st := &switchStore{Store: view, clock: clock}
	s := syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		CallTimeout: 50 * time.Millisecond,
		Driven:      true,
		Instances:   64, // a floor of 4 commands, below the window's 256
	})
	defer s.Close()
	ctx := context.Background()
	lim := quota.Quota{Rate: 1e6, Burst: 1e6, MinLease: 1, MaxLease: 10, LeaseTTL: time.Second}
	i := 0
	call := func() {
		i++
		tn, err := s.Track(fmt.Sprintf("t%d", i), lim)
		if err != nil {
			t.Fatal(err)
		}
		s.Refill(ctx, tn, 1)
		s.Refills(ctx)
		s.Deliver()
		clock.Add(time.Millisecond)
	}
	for range 5 {
		call()
	}
	before := s.Stats().CallWindow
	st.set(40*time.Millisecond, false) // late: past congestedAfter, within the deadline
	for range 3 {
		call()
		clock.Add(100 * time.Millisecond) // a round trip apart: each cuts
	}
	if cut := s.Stats().CallWindow; cut >= before {
		t.Fatalf("late calls left the window at %d, want it cut from %d", cut, before)
	}
	st.set(0, true)
	for range 5 {
		call()
	}
	if !s.Degraded() {
		t.Fatalf("after refused calls the breaker is not open")
	}
	st.set(0, false)
	// The breaker lets a probe through an interval (of the wall clock)
	// after it opened.
	for deadline := time.Now().Add(10 * time.Second); s.Degraded(); {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not close within 10 s of Redis answering")
		}
		time.Sleep(10 * time.Millisecond)
		call()
	}
	if w := s.Stats().CallWindow; w < before {
		t.Errorf("after the outage: window %d, want the %d of the last call answered in time before it", w, before)
	}
}
