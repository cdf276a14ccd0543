package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestRoundPassesDormantTenantBy: a tenant that goes dormant publishes
// when its idle check is due (the time it was last active plus the idle
// timeout), and rounds pass it by without its lock until then
// (passBy); a request's miss makes the next scheduled tick plan it
// (no urgent round needed), which clears that time before the lease state
// comes back; and a dormant tenant is still evicted at the first tick at
// or after its idle timeout, not before. The first step fails without the
// pass-by, the others with a pass-by that outlives a wake or the idle
// timeout. BenchmarkTickColdCache measures what it saves.
func TestRoundPassesDormantTenantBy(t *testing.T) {
	const idle = 20 * time.Second
	s, all, clock := tracking(t, 1, quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: time.Second},
		drivenMode, func(o *Options) { o.IdleTimeout = idle })
	tn := all[0]
	tick := ticker(s, clock)
	leaseFirst(t, tn, tick)
	for i := 0; !tn.Dormant(); i++ {
		if i == 1000 {
			t.Fatal("not dormant after 25 s idle")
		}
		tick()
	}
	due := quietAt(tn.idleSince+int64(idle), 0) // a miss ends it
	if got := tn.quietUntil.Load(); got != due {
		t.Fatalf("dormant tenant's quiet time %d, want its idle check's %d", got, due)
	}

	tick()
	if !tn.Dormant() || tn.quietUntil.Load() != due {
		t.Fatal("a round changed a dormant tenant it should have passed by")
	}
	if pass, dormant := s.passBy(tn, clock.Load()); !pass || !dormant {
		t.Fatal("passBy false for a dormant tenant before its idle check")
	}

	// A miss: the next tick plans it (it is not passed by), and the
	// revived tenant's quiet time is not the dormant one's.
	s.NoteWait(tn, 1)             // a request that waits for its own refill
	tn.setFlag(flagUrgent, false) // no urgent round: the scheduled tick must see it
	if pass, _ := s.passBy(tn, clock.Load()); pass {
		t.Fatal("passBy true for a dormant tenant a request missed on")
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
