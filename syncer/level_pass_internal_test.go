package syncer

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestRoundPassesLeasedTenantBy: a tenant holding a lease it keeps
// (target above zero), quiet between its scheduled refreshes, publishes
// its quiet time with the level its counter holds (quietAt), and rounds
// pass it by without its lock while the counter stays there; a request's
// spend or miss, or tokens put back by a failed spend, end the pass-by
// at once, and the next tick plans the tenant. It was looked at under
// its lock at every tick (BenchmarkTickColdCache's leased state).
func TestRoundPassesLeasedTenantBy(t *testing.T) {
	s, all, clock := leasedFor(t, 3, 10*time.Second, drivenMode)
	tick := ticker(s, clock)
	// The plans after the grants settle their quiet times; the one at a
	// scheduled refresh may not be quiet (due again at once).
	for i := 0; ; i++ {
		if i == 8 {
			t.Fatal("the tenants published no quiet time within 8 ticks")
		}
		tick()
		if quietAll(all, clock.Load()) {
			break
		}
	}
	for _, tn := range all {
		tn.mu.Lock()
		target := tn.st().target
		tn.mu.Unlock()
		if target == 0 {
			t.Fatalf("%s keeps no lease: the test needs a tenant between its scheduled refreshes", tn.name)
		}
		q := tn.quietUntil.Load()
		if q <= clock.Load() || q&quietLevels != tn.Held()+1 {
			t.Fatalf("%s published quiet time %d (now %d), want a later one at level %d", tn.name, q, clock.Load(), tn.Held())
		}
		if pass, dormant := s.passBy(tn, clock.Load()); !pass || dormant {
			t.Fatalf("passBy = %v, %v for %s at its level, want true, false", pass, dormant, tn.name)
		}
	}
	spent, missed, quiet := all[0], all[1], all[2]
	if ok, _ := spent.Spend(1); !ok {
		t.Fatal("the spend failed")
	}
	missed.NoteMiss(1)
	for _, tn := range []*Tenant{spent, missed} {
		if pass, _ := s.passBy(tn, clock.Load()); pass {
			t.Fatalf("passBy true for %s after a request spent or missed", tn.name)
		}
	}
	// Passed by: its lock, held here, is not asked for; the others are
	// planned.
	quiet.mu.Lock()
	plans := s.plans.Load()
	tick()
	quiet.mu.Unlock()
	if n := s.plans.Load() - plans; n != 2 {
		t.Fatalf("%d plans at the tick after a spend and a miss, want 2", n)
	}
}

// quietAll reports whether every tenant of all has published a quiet time
// after ns.
func quietAll(all []*Tenant, ns int64) bool {
	for _, tn := range all {
		if tn.quietUntil.Load() <= ns {
			return false
		}
	}
	return true
}

// TestQuietAtKeepsItsContract: a published quiet time is no later than
// the time settled on, at most quietLevels ns earlier, and carries the
// level in its low bits, for any time and level (the rounding once made
// it up to twice that early).
func TestQuietAtKeepsItsContract(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		until := rapid.Int64Range(quietLevels, math.MaxInt64).Draw(t, "until")
		level := rapid.Int64Range(0, quietLevels-1).Draw(t, "level")
		q := quietAt(until, level)
		if q > until || until-q > quietLevels || q&quietLevels != level+1 {
			t.Fatalf("quietAt(%d, %d) = %d: %d early, low bits %d", until, level, q, until-q, q&quietLevels)
		}
	})
}
