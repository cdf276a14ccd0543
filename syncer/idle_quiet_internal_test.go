package syncer

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestIdleTenantNotPlannedUntilDormant: a tenant seen once, whose lease
// expired unspent and which keeps no lease (its demand gone), is left
// alone by the rounds until it may go dormant, and then goes dormant as
// before: at the first tick 16 half-lives of the demand after it was
// last active. Planned at each of its scheduled refreshes, it was
// planned about 60 times in between (every 100 ms interval).
func TestIdleTenantNotPlannedUntilDormant(t *testing.T) {
	s, tn, clock, tick := idleAfterFirstLease(t)
	tn.mu.Lock()
	dormantAt := tn.st().at(tn.st().lastActive) + int64(s.planner.dormantAfter(*tn.Limits()))
	target := tn.st().target
	tn.mu.Unlock()
	if target != 0 {
		t.Fatalf("target %d after the lease expired unspent, want 0: no lease to keep", target)
	}
	plans, requested := s.plans.Load(), s.Stats().Requested
	for clock.Load()+int64(25*time.Millisecond) < dormantAt {
		tick()
		if tn.Dormant() {
			t.Fatalf("dormant %v before its time", time.Duration(dormantAt-clock.Load()))
		}
	}
	if n := s.plans.Load() - plans; n > 1 {
		t.Errorf("planned %d times while idle before it may go dormant, want at most 1", n)
	}
	tick()
	if !tn.Dormant() {
		t.Fatalf("not dormant %v after its time", time.Duration(clock.Load()-dormantAt))
	}
	if n := s.Stats().Requested - requested; n != 0 {
		t.Errorf("%d tokens asked for while idle, want none", n)
	}
}

// TestRoundPassesIdleTenantBy: a tenant that holds nothing and keeps no
// lease publishes its quiet time with its level, 0 (quietAt), so a request ends it,
// and rounds pass it by without its lock until then (passBy); a request's
// miss ends the pass-by at once, and the next tick plans the tenant and
// leases for it. Without the mark, such a tenant was looked at under its
// lock at every tick until it went dormant (BenchmarkIdleTenantsCPU's
// cores-idle).
func TestRoundPassesIdleTenantBy(t *testing.T) {
	s, tn, clock, tick := idleAfterFirstLease(t)
	q := tn.quietUntil.Load()
	if q <= clock.Load() || q&quietLevels != 1 {
		t.Fatalf("idle tenant's published quiet time %d (now %d), want a later one at level 0", q, clock.Load())
	}
	if pass, dormant := s.passBy(tn, clock.Load()); !pass || dormant {
		t.Fatalf("passBy = %v, %v for an idle tenant in its quiet time, want true, false", pass, dormant)
	}
	// Passed by: its lock, held here, is not asked for, and nothing moves.
	tn.mu.Lock()
	plans := s.plans.Load()
	tick()
	tn.mu.Unlock()
	if s.plans.Load() != plans || tn.quietUntil.Load() != q {
		t.Fatal("a round planned or changed an idle tenant it should have passed by")
	}
	// A request misses: the pass-by ends, and the next tick leases.
	tn.NoteMiss(1)
	if pass, _ := s.passBy(tn, clock.Load()); pass {
		t.Fatal("passBy true for an idle tenant a request missed on")
	}
	requested := s.Stats().Requested
	for i := 0; s.Stats().Requested == requested; i++ {
		if i == 8 {
			t.Fatal("no lease asked for within 8 ticks of a miss")
		}
		tick()
	}
}

// TestUnspentLeaseNotPlannedUntilItExpires: a tenant seen once, which
// holds its first lease unspent and keeps no lease (its demand gone), is
// left alone by the rounds until the lease expires, and its tokens expire
// at the same tick as before: the first at or after the lease's end. It
// was planned at every scheduled refresh and at every tick of the renewal
// horizon before the end, about 28 times in a 2 s lease. A spend in that
// time ends the quiet: the next tick plans the tenant.
func TestUnspentLeaseNotPlannedUntilItExpires(t *testing.T) {
	s, all, clock := tracking(t, 2, quota.Quota{Rate: 100, Burst: 100, LeaseTTL: 2 * time.Second}, drivenMode)
	tick := ticker(s, clock)
	for _, tn := range all {
		leaseFirst(t, tn, tick)
	}
	tick() // the plans after the grants settle their quiet times
	expiry := func(tn *Tenant) int64 {
		tn.mu.Lock()
		defer tn.mu.Unlock()
		if tn.st().target != 0 {
			t.Fatalf("target %d after one request, want 0: no lease to keep", tn.st().target)
		}
		at, ok := tn.st().ledger.NextExpiry(tn.Limits().LeaseTTL)
		if !ok {
			t.Fatal("no batch held after the first lease")
		}
		return at.UnixNano()
	}
	quiet, spent := all[0], all[1]
	end := expiry(quiet)
	if quiet.Held() == 0 || spent.Held() == 0 {
		t.Fatalf("held %d and %d after the first leases, want a token each", quiet.Held(), spent.Held())
	}
	plans := s.plans.Load()
	tick()
	if n := s.plans.Load() - plans; n != 0 {
		t.Fatalf("%d plans at the tick after the grants' plans, want none", n)
	}
	// A request spends the second tenant's token: the next tick plans it.
	if ok, _ := spent.Spend(1); !ok {
		t.Fatal("the spend failed")
	}
	plans = s.plans.Load()
	tick()
	if n := s.plans.Load() - plans; n != 1 {
		t.Fatalf("%d plans at the tick after a spend, want 1: the spent tenant's", n)
	}
	plans = s.plans.Load()
	for clock.Load()+int64(25*time.Millisecond) < end {
		tick()
		if quiet.Held() == 0 {
			t.Fatalf("expired %v before the lease's end", time.Duration(end-clock.Load()))
		}
	}
	if n := s.plans.Load() - plans; n > 1 {
		t.Errorf("planned %d times while holding its unspent lease, want at most 1", n)
	}
	tick()
	if quiet.Held() != 0 {
		t.Fatalf("still holding %d tokens %v after the lease's end", quiet.Held(), time.Duration(clock.Load()-end))
	}
}

// idleAfterFirstLease returns a Syncer on a fake clock (and a tick of it)
// tracking one tenant that leased once, for one miss, and whose lease
// then expired unspent (2 s) and went back: it holds nothing and keeps
// no lease, and the plan that saw its ledger empty has settled its quiet
// time.
func idleAfterFirstLease(t *testing.T) (*Syncer, *Tenant, *atomic.Int64, func()) {
	t.Helper()
	s, all, clock := tracking(t, 1, quota.Quota{Rate: 100, Burst: 100, MinLease: 10, MaxLease: 10, LeaseTTL: 2 * time.Second}, drivenMode)
	tn := all[0]
	tick := ticker(s, clock)
	leaseFirst(t, tn, tick)
	expireAll(t, all, tick)
	return s, tn, clock, tick
}
