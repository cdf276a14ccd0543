package syncer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestCallFloorFollowsTheRoster: the floor of the call window is the
// fleet's share of 256 commands by the roster's count, once two counts
// in a row agree; until then (no count, or a count that rose) it is one
// command. During a rollout, when instances of an earlier release lease
// without counting themselves, it goes by a tenant's registry when that
// reports more. A store that cannot count leaves it to the registries.
func TestCallFloorFollowsTheRoster(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	mem := memstore.New(memstore.WithClock(now))
	const window, interval = 10 * time.Second, 100 * time.Millisecond
	// driven is a driven-mode Syncer on st, closed when the test ends.
	driven := func(st lease.Store) *syncer.Syncer {
		s := syncer.New(st, syncer.Options{
			Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
			Now:     now,
			Driven:  true,
		})
		t.Cleanup(s.Close)
		return s
	}
	view := mustInstance(t, mem, "me", window)
	s := driven(view)
	ctx := context.Background()
	tick := func() {
		clock.Add(int64(interval))
		s.Tick(ctx)
	}
	if got := s.CallFloor(); got != 1 {
		t.Fatalf("before the first count: floor %d, want 1", got)
	}
	tick()
	if got, n := s.CallFloor(), s.Stats().Instances; got != 1 || n != 1 {
		t.Fatalf("after the first count: floor %d with %d counted, want 1 (a count that rose from none) with 1", got, n)
	}
	tick()
	if got := s.CallFloor(); got != 256 {
		t.Fatalf("after a second count of 1: floor %d, want 256", got)
	}
	// Three more instances count themselves: the next count, a lease TTL
	// on, rises to 4 (floor 1 again), and the one after agrees (256/4).
	for _, id := range []string{"a", "b", "c"} {
		if _, err := mustInstance(t, mem, id, window).(lease.InstanceCounter).CountInstances(ctx); err != nil {
			t.Fatal(err)
		}
	}
	for s.Stats().Instances != 4 {
		if now().After(time.Date(2027, 1, 1, 0, 1, 0, 0, time.UTC)) {
			t.Fatalf("no recount of the roster within a minute: %d counted", s.Stats().Instances)
		}
		tick()
	}
	if got := s.CallFloor(); got != 1 {
		t.Fatalf("after a count that rose to 4: floor %d, want 1", got)
	}
	tick()
	if got := s.CallFloor(); got != 64 {
		t.Fatalf("after a second count of 4: floor %d, want 64", got)
	}

	// During a rollout: instances of an earlier release (stores that
	// cannot count) lease a tenant with this one. They are not in the
	// roster (4), so the floor goes by the larger of the two counts:
	// 256/4 while the tenant's registry reports 2, 256/10 once it
	// reports 10.
	old := driven(struct{ lease.Store }{mustInstance(t, mem, "old", window)})
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: time.Second}
	for _, x := range []*syncer.Syncer{old, s} {
		tn, err := x.Track("t", lim)
		if err != nil {
			t.Fatal(err)
		}
		x.Refill(ctx, tn, 1)
		x.Refills(ctx)
		x.Deliver()
	}
	if got := s.CallFloor(); got != 64 {
		t.Fatalf("with an uncounted instance on a tenant (2 in its registry, 4 in the roster): floor %d, want 64", got)
	}
	for i := range 8 {
		v := mustInstance(t, mem, fmt.Sprintf("old%d", i), window)
		if _, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lease.Limits{Rate: 100, Burst: 100}, Want: 1}}, nil); err != nil {
			t.Fatal(err)
		}
	}
	tn, _ := s.Track("t", lim)
	s.Refill(ctx, tn, tn.Held()+1)
	s.Refills(ctx)
	s.Deliver()
	if got := s.CallFloor(); got != 256/10 {
		t.Fatalf("with 10 instances in the tenant's registry, 4 in the roster: floor %d, want %d", got, 256/10)
	}

	// A store that cannot keep the roster (here, a view without an
	// instance id, which CountInstances refuses): counting stops after
	// the first refusal, and the floor goes by the registries, as without
	// a roster.
	noID := driven(mustInstance(t, mem, "", 0))
	for range 3 {
		clock.Add(int64(interval))
		noID.Tick(ctx)
	}
	if got, n := noID.CallFloor(), noID.Stats().Instances; got != 256 || n != 0 {
		t.Fatalf("a store that refuses the roster: floor %d, %d counted; want 256 and none", got, n)
	}

	// A store that cannot count: the floor goes by the registries, which
	// have reported nothing yet (256 for a lone instance), and no count
	// is made.
	plain := driven(struct{ lease.Store }{view})
	plain.Tick(ctx)
	if got, n := plain.CallFloor(), plain.Stats().Instances; got != 256 || n != 0 {
		t.Fatalf("a store that cannot count: floor %d, %d counted; want 256 and none", got, n)
	}
}

// mustInstance is mem's view for instance id.
func mustInstance(t *testing.T, mem *memstore.Store, id string, window time.Duration) lease.Store {
	t.Helper()
	v, err := mem.Instance(id, window)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// leavingView is a memstore view that counts its LeaveRoster calls.
type leavingView struct {
	lease.Store
	leaves atomic.Int32
}

func (v *leavingView) CountInstances(ctx context.Context) (int, error) {
	return v.Store.(lease.InstanceCounter).CountInstances(ctx)
}

func (v *leavingView) LeaveRoster(ctx context.Context) error {
	v.leaves.Add(1)
	return v.Store.(lease.RosterLeaver).LeaveRoster(ctx)
}

// TestReleaseAllLeavesTheRoster: at Close (ReleaseAll) an instance that
// counted itself leaves the fleet's roster, so the others count it no
// more at once; one that never counted makes no call for it.
func TestReleaseAllLeavesTheRoster(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	mem := memstore.New(memstore.WithClock(now))
	const window, interval = 10 * time.Second, 100 * time.Millisecond
	ctx := context.Background()
	driven := func(st lease.Store) *syncer.Syncer {
		return syncer.New(st, syncer.Options{
			Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
			Now:     now,
			Driven:  true,
		})
	}
	other := mustInstance(t, mem, "other", window).(lease.InstanceCounter)
	if _, err := other.CountInstances(ctx); err != nil {
		t.Fatal(err)
	}

	counted := &leavingView{Store: mustInstance(t, mem, "me", window)}
	s := driven(counted)
	clock.Add(int64(interval))
	s.Tick(ctx)
	if n := s.Stats().Instances; n != 2 {
		t.Fatalf("after a tick: %d counted, want 2", n)
	}
	s.Close()
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := counted.leaves.Load(); got != 1 {
		t.Errorf("an instance that counted itself: %d LeaveRoster calls at ReleaseAll, want 1", got)
	}
	if n, err := other.CountInstances(ctx); err != nil || n != 1 {
		t.Errorf("after the other instance left: %d counted, %v; want 1", n, err)
	}

	silent := &leavingView{Store: mustInstance(t, mem, "silent", window)}
	s = driven(silent)
	s.Close()
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	if got := silent.leaves.Load(); got != 0 {
		t.Errorf("an instance that never counted: %d LeaveRoster calls at ReleaseAll, want 0", got)
	}
}

// TestReleaseAllWithADoneCtxLeavesTheRoster (review): ReleaseAll's calls
// get a lease call's deadline when its ctx is done already (Close's ctx
// spent by an HTTP server's shutdown), so that the returns are made; the
// roster's leave, one of its calls, used ctx as it was and failed at
// once: the other instances counted the closed one for a window more.
func TestReleaseAllWithADoneCtxLeavesTheRoster(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	mem := memstore.New(memstore.WithClock(now))
	const window, interval = 10 * time.Second, 100 * time.Millisecond
	ctx := context.Background()
	other := mustInstance(t, mem, "other", window).(lease.InstanceCounter)
	if _, err := other.CountInstances(ctx); err != nil {
		t.Fatal(err)
	}
	counted := &leavingView{Store: mustInstance(t, mem, "me", window)}
	s := syncer.New(counted, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
		Now:     now,
		Driven:  true,
	})
	clock.Add(int64(interval))
	s.Tick(ctx)
	if n := s.Stats().Instances; n != 2 {
		t.Fatalf("after a tick: %d counted, want 2", n)
	}
	s.Close()
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.ReleaseAll(done); err != nil {
		t.Fatal(err)
	}
	if n, err := other.CountInstances(ctx); err != nil || n != 1 {
		t.Errorf("after the other instance closed with a done ctx: %d counted, %v; want 1 (it left)", n, err)
	}
}
