package syncer

import (
	"context"
	"time"
)

// The fleet's size, for the floor of the call budget's window (budget.go):
// the floors of all instances together must stay a queue Redis runs
// within a call's deadline, so each instance's floor is budgetFleetFloor
// divided by the fleet's size. A tenant's registry tells how many
// instances lease that tenant, not how many share Redis: in a fleet of
// 256 instances whose tenants are each on 3 of them, the most any tenant
// reported was 3, each floor was 85 commands and all of them together
// 21,760, about 0.9 s of a Redis running a command in 40 µs, past every
// call's deadline. In the queue model every call then timed out and none
// of the rate was admitted (TestSaturatedSparseFleet). So each instance
// counts the fleet in a roster of its own (lease.InstanceCounter, a key
// that the instances under a prefix share) every lease TTL, after a poll
// of the quota version that Redis answered (pollQuota), which is a few
// hundred small script calls a second for a fleet of 1,000 instances.

// rosterDue reports whether the fleet's roster is due to be counted at
// now, and marks it counted: once a lease TTL (each entry lives for the
// instance's registry window, six lease TTLs by default, two with
// reservations), and with every poll of the quota version while the
// count rises (rosterRising). Why: a fleet that starts at once counts
// 1, 2, ... as its instances come in, and the first instances would keep
// the floors of a small fleet for a lease TTL, while their first calls
// saturate Redis (TestSaturatedSparseFleet: 14,934 lease calls failed
// after its start, none with the recounts). Never for a store that
// cannot count (a Store of an earlier release, a test double): the
// budget then goes by the registries. Called by the loop only, as
// pollQuota is.
func (s *Syncer) rosterDue(now time.Time) bool {
	if s.counter == nil {
		return false
	}
	ns := now.UnixNano()
	if s.rosterCounted != 0 && ns-s.rosterCounted < int64(s.leaseTTL) && !s.rosterRising.Load() {
		return false
	}
	s.rosterCounted = ns
	return true
}

// countRoster counts the fleet's instances, this one included, and keeps
// the count; a count that fails keeps the last one (an instance gone
// stays counted until then, which only lowers the floors). It has the
// liveness read's deadline (livenessTimeout), not a lease call's: the
// count matters most while Redis is saturated, when the queue the floors
// made is longer than a call's deadline, and a count that timed out with
// them would leave the floors as they were (TestSaturatedSparseFleet: 1 %
// of the rate admitted with the call deadline).
func (s *Syncer) countRoster(ctx context.Context) {
	if s.counter == nil {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.livenessTimeout())
	defer cancel()
	if n, err := s.counter.CountInstances(ctx); err == nil && n > 0 {
		s.rosterRising.Store(int64(n) > s.roster.Swap(int64(n)))
	}
}

// callFloor is the floor of this instance's call window: its share of
// budgetFleetFloor by the roster's count, or by the most instances Redis
// reported on any tenant here (fleetSize, at least Options.Instances)
// when that is more, as during a rollout, when instances of an earlier
// release lease without counting themselves. Until a count found what
// the one before it found (none yet, or the fleet still coming in), it is
// budgetMin. Why: a fleet that starts at once saturates Redis while its
// instances count 1, 2, ... and their recounts time out in the queue the
// floors make; an instance that counted itself alone kept a lone
// instance's floor, and with floors sized so (or by the registries,
// which report a handful of instances then) the fleet stayed saturated
// for seconds (TestSaturatedSparseFleet: 6,509 to 9,837 lease calls
// failed after its start). A store that cannot count leaves the floor to
// the registries, as before the roster.
func (s *Syncer) callFloor() int {
	if s.counter != nil && (s.roster.Load() == 0 || s.rosterRising.Load()) {
		return budgetMin
	}
	return budgetFloor(max(s.fleetSize(), int(s.roster.Load())))
}
