package syncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestRoundPassesDormantTenantBy: a tenant that goes dormant publishes
// when its idle check is due (the time it was last active plus the idle
// timeout), and rounds pass it by without its lock until then
// (dormantQuiet); a request's miss makes the next scheduled tick plan it
// (no urgent round needed), which clears that time before the lease state
// comes back; and a dormant tenant is still evicted at the first tick at
// or after its idle timeout, not before. The first step fails without the
// pass-by, the others with a pass-by that outlives a wake or the idle
// timeout. BenchmarkTickDormant measures what it saves.
func TestRoundPassesDormantTenantBy(t *testing.T) {
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	const idle = 20 * time.Second
	s := New(view, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, IdleTimeout: idle})
	ctx := context.Background()
	tn, err := s.Track("a", quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	tick := func() {
		clock.Add(int64(25 * time.Millisecond))
		s.Tick(ctx)
	}
	tn.NoteMiss(1)
	for i := 0; !tn.Leased(); i++ {
		if i == 100 {
			t.Fatal("no lease after 100 ticks")
		}
		tick()
	}
	for i := 0; !tn.Dormant(); i++ {
		if i == 1000 {
			t.Fatal("not dormant after 25 s idle")
		}
		tick()
	}
	due := tn.idleSince + int64(idle)
	if got := tn.quietUntil.Load(); got != due {
		t.Fatalf("dormant tenant's quiet time %d, want its idle check's %d", got, due)
	}

	tick()
	if !tn.Dormant() || tn.quietUntil.Load() != due {
		t.Fatal("a round changed a dormant tenant it should have passed by")
	}
	if !s.dormantQuiet(tn, clock.Load()) {
		t.Fatal("dormantQuiet false for a dormant tenant before its idle check")
	}

	// A miss: the next tick plans it (it is not passed by), and the
	// revived tenant's quiet time is not the dormant one's.
	tn.NoteMiss(1)
	tn.setFlag(flagUrgent, false) // no urgent round: the scheduled tick must see it
	if s.dormantQuiet(tn, clock.Load()) {
		t.Fatal("dormantQuiet true for a dormant tenant a request missed on")
	}
	tick()
	if tn.Dormant() {
		t.Fatal("still dormant after a tick that followed a miss")
	}
	if got := tn.quietUntil.Load(); got == due {
		t.Fatal("revived tenant kept its dormant quiet time")
	}

	// Dormant again, then evicted at the first tick at or after the idle
	// timeout since it was last active.
	for i := 0; !tn.Dormant(); i++ {
		if i == 1000 {
			t.Fatal("not dormant again after 25 s idle")
		}
		tick()
	}
	due = tn.idleSince + int64(idle)
	for clock.Load()+int64(25*time.Millisecond) < due {
		tick()
		if tn.Evicted() {
			t.Fatalf("evicted %v before its idle timeout", time.Duration(due-clock.Load()))
		}
	}
	tick()
	tick()
	if !tn.Evicted() {
		t.Fatalf("not evicted %v after its idle timeout", time.Duration(clock.Load()-due))
	}
}
