package syncer

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/lease"
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

// fleetRoster is what a Syncer keeps of the fleet's roster. The loop
// decides when to count (rosterDue) and a poll's goroutine counts
// (countRoster), so every field is an atomic or set once by New.
type fleetRoster struct {
	counter lease.InstanceCounter // the store, when it can count; nil otherwise (set by New)
	n       atomic.Int64          // the last count; 0 before one
	rising  atomic.Bool           // the last count was more than the one before it (the first: more than none)
	off     atomic.Bool           // the store refused the roster for good: no more counts
	busy    atomic.Bool           // a count is due or in flight: one at a time
	at      atomic.Int64          // unix nanoseconds of the last count made
}

// counting reports whether the store counts the roster.
func (r *fleetRoster) counting() bool { return r.counter != nil && !r.off.Load() }

// rosterDue reports whether the fleet's roster is due to be counted at
// now, and if so takes the one count in flight, which countRoster gives
// back: once a lease TTL (each entry lives for the instance's registry
// window, six lease TTLs by default, two with reservations), and at every
// poll of the quota version while the count rises. Why: a fleet that
// starts at once counts 1, 2, ... as its instances come in, and the first
// instances would keep the floors of a small fleet for a lease TTL, while
// their first calls saturate Redis (TestSaturatedSparseFleet: 14,934
// lease calls failed after its start, none with the recounts). Never for
// a store that cannot count (a Store of an earlier release, a test
// double) or refused the roster for good: the budget then goes by the
// registries. Called by the loop only, as pollQuota is.
func (s *Syncer) rosterDue(now time.Time) bool {
	r := &s.roster
	if !r.counting() {
		return false
	}
	if last := r.at.Load(); last != 0 && now.UnixNano()-last < int64(s.leaseTTL) && !r.rising.Load() {
		return false
	}
	return r.busy.CompareAndSwap(false, true)
}

// countRoster makes the count rosterDue took, for the poll at now, within
// timeout, and keeps what it finds: only after a read of the quota version
// that Redis answered (answered), so that a Redis that refuses
// connections is found down first, without a count waiting out its
// deadline (go-redis retries the dial); unmade, the count is due again at
// the next poll. (On a Redis Cluster the roster's key may live on another
// master than the version's: a count to a dead one fails within its
// deadline.) A count that fails keeps the last one (an instance gone stays
// counted until then, which only lowers the floors); a refusal for good
// (lease.ErrNoRoster, or a store without an instance id) stops counting.
//
// The poll's goroutine runs it beside the rounds with the liveness read's
// deadline (livenessTimeout), not a lease call's: the count matters most
// while Redis is saturated, when the queue the floors made is longer than
// a call's deadline, and a count that timed out with them would leave the
// floors as they were (TestSaturatedSparseFleet: 1 % of the rate admitted
// with the call deadline). In driven mode the tick runs it, within the
// call deadline.
func (s *Syncer) countRoster(ctx context.Context, now time.Time, timeout time.Duration, answered bool) {
	r := &s.roster
	defer r.busy.Store(false)
	if !answered {
		return
	}
	r.at.Store(now.UnixNano())
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	n, err := r.counter.CountInstances(ctx)
	switch {
	case errors.Is(err, lease.ErrNoRoster) || errors.Is(err, lease.ErrBadRequest):
		r.off.Store(true)
		r.rising.Store(false)
	case err == nil && n > 0:
		r.rising.Store(int64(n) > r.n.Swap(int64(n)))
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
// failed after its start). A store that cannot count, or refused the
// roster for good, leaves the floor to the registries, as before the
// roster.
func (s *Syncer) callFloor() int {
	n := s.roster.n.Load()
	if s.roster.counting() && (n == 0 || s.roster.rising.Load()) {
		return budgetMin
	}
	return budgetFloor(max(s.fleetSize(), int(n)))
}

// leaveRoster takes this instance out of the fleet's roster at Close
// (ReleaseAll), after its last count, so that the other instances count
// it no more at once: a fleet restarted under new instance ids would
// otherwise be counted twice for a registry window, which halves its
// floors. Only when this instance counted itself (a count was made) and
// Redis is not failing (Degraded), so that a Close without Redis does
// not wait out a call's deadline for it; the entry then expires by
// itself, a window after the last count. Its error is dropped for the
// same reason: nothing is lost with it but a window of a count too high,
// which only lowers the floors.
func (s *Syncer) leaveRoster(ctx context.Context) {
	r := &s.roster
	leaver, ok := r.counter.(lease.RosterLeaver)
	if !ok || !r.counting() || r.at.Load() == 0 || s.Degraded() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, s.callTimeout(1))
	defer cancel()
	_ = leaver.LeaveRoster(ctx)
}
