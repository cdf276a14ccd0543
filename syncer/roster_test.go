package syncer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/syncer"
)

// TestCallFloorFollowsTheRoster: the floor of the call window is the
// fleet's share of 256 commands by the roster's count, once two counts
// in a row agree; until then (no count, or a count that rose) it is one
// command. A store that cannot count leaves it to the registries.
func TestCallFloorFollowsTheRoster(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	mem := memstore.New(memstore.WithClock(now))
	const window = 10 * time.Second
	view, err := mem.Instance("me", window)
	if err != nil {
		t.Fatal(err)
	}
	const interval = 100 * time.Millisecond
	s := syncer.New(view, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
		Now:     now,
		Driven:  true,
	})
	defer s.Close()
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
		v, err := mem.Instance(id, window)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := v.(lease.InstanceCounter).CountInstances(ctx); err != nil {
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

	// A store that cannot count: the floor goes by the registries, which
	// have reported nothing yet (256 for a lone instance), and no count
	// is made.
	plain := syncer.New(struct{ lease.Store }{view}, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: interval}, 1),
		Now:     now,
		Driven:  true,
	})
	defer plain.Close()
	plain.Tick(ctx)
	if got, n := plain.CallFloor(), plain.Stats().Instances; got != 256 || n != 0 {
		t.Fatalf("a store that cannot count: floor %d, %d counted; want 256 and none", got, n)
	}
}
