package syncer_test

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// failoverStore is a lease.Store on one Redis Cluster master and a
// syncer.NodeLocator that names it: "old:6379" until failedOver, then
// "new:6379" (its replica, promoted under another address). Replies of
// the old master come late by lateOld on the test's clock.
type failoverStore struct {
	lease.Store
	clock      *fakeClock
	lateOld    time.Duration
	failedOver atomic.Bool
}

func (s *failoverStore) NodeOf(_ context.Context, _ string) (string, bool) {
	if s.failedOver.Load() {
		return "new:6379", true
	}
	return "old:6379", true
}

func (s *failoverStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	if !s.failedOver.Load() {
		s.clock.Add(s.lateOld)
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

// cutOldMaster makes a Cluster syncer on a failoverStore, with idle as
// its IdleTimeout, and 6 tenants whose refills the old master answers
// late, one cut of its window each (to its floor of 8: 32 instances). The
// caller closes s.
func cutOldMaster(t *testing.T, idle time.Duration) (s *syncer.Syncer, st *failoverStore, clock *fakeClock, tenants []*syncer.Tenant) {
	t.Helper()
	clock, view := clockedView(t)
	st = &failoverStore{Store: view, clock: clock, lateOld: 60 * time.Millisecond}
	s = syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		Cluster:     true,
		CallTimeout: 10 * time.Second, // the delays that count are the test clock's
		Instances:   32,               // a window's floor of 8
		IdleTimeout: idle,
	})
	track := tracker(t, s, quota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second})
	for i := range 6 {
		tn := track(fmt.Sprintf("t-%d", i))
		clock.Add(time.Millisecond) // one cut per round trip
		<-s.Refill(context.Background(), tn, 1)
		tenants = append(tenants, tn)
	}
	return s, st, clock, tenants
}

// TestClusterFailoverForgetsOldMaster: after a failover (the master's
// replica promoted under a new address, which NodeOf names from then on),
// the syncer forgets the old address's redisNode once no tenant has been
// called on it for a while. Before, the nodes were kept for the Syncer's
// life: the old address's window, cut by the busy or dying master's late
// replies and never answered again, stayed at its floor, and
// Stats.CallWindow (the smallest window of the masters) said for good
// that Redis could not run the tenants' calls while every live master's
// window was whole; and the map grew by an entry per failover (per pod
// restart, where masters get new addresses).
func TestClusterFailoverForgetsOldMaster(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, st, clock, tenants := cutOldMaster(t, 0)
	defer s.Close()
	ctx := context.Background()
	if got := s.Stats(); got.CallWindow != 8 || s.Nodes() != 1 {
		t.Fatalf("after 6 late replies of the old master: window %d, %d nodes; want the floor, 8, and 1 node", got.CallWindow, s.Nodes())
	}

	st.failedOver.Store(true)
	for range 60 { // ten minutes of calls, all on the new master, answered at once
		clock.Add(10 * time.Second)
		for _, tn := range tenants {
			<-s.Refill(ctx, tn, 1)
		}
	}
	got := s.Stats()
	t.Logf("10 minutes after the failover: CallWindow %d, %d nodes kept", got.CallWindow, s.Nodes())
	if got.CallWindow <= 8 {
		t.Errorf("10 minutes after the failover, with the new master answering every call in time, CallWindow is %d: the dead old address's", got.CallWindow)
	}
	if got.WindowCuts != 6 {
		t.Errorf("WindowCuts %d after the old master was forgotten; want its 6 (the count only grows)", got.WindowCuts)
	}
	if n := s.Nodes(); n != 1 {
		t.Errorf("%d masters kept 10 minutes after the failover; want 1, the new one", n)
	}
}

// TestClusterNodesKeptWithEndlessIdleTimeout: with an IdleTimeout of
// "never" (math.MaxInt64), the masters' state is kept. nodeForget doubled
// it and wrapped negative, so that every lookup forgot every master: a
// dying master's late replies cut a window no later call saw (the window
// of a fresh node each time).
func TestClusterNodesKeptWithEndlessIdleTimeout(t *testing.T) {
	defer goleak.VerifyNone(t)
	s, _, _, _ := cutOldMaster(t, math.MaxInt64)
	defer s.Close()
	if got := s.Stats(); got.CallWindow != 8 || s.Nodes() != 1 {
		t.Errorf("after 6 late replies of the master, IdleTimeout never: window %d, %d nodes; want the floor, 8, and 1 node", got.CallWindow, s.Nodes())
	}
}
