package syncer

import (
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// lruEntry is a tenant and when it was last active, for eviction.
type lruEntry struct {
	active int64
	t      *Tenant
}

// evict drains the tenants ts, then removes them from the registry and
// marks them evicted; it returns releases with the returns of the
// drained tokens appended. A tenant whose lock is taken (a lease call is
// in flight for it) is left for a later round.
//
// The order is what keeps readers safe and the count of admissions
// exact. Once a tenant is marked evicted a request holding it looks the
// tenant up again, and that lookup must not find the same tenant, or the
// request would go round in circles: so the registry drops the tenants
// (one step for the whole batch) before any of them is marked. And the
// removal moves a tenant's admissions to the registry's total of evicted
// ones (registry.remove), which must then be final: so the tenants are
// drained first. A request that loaded a tenant before may spend the
// tokens it holds until the drain (they were leased, so they are good),
// and none after it. Drained after the removal, as they were, a tenant's
// tokens spent in between were admissions counted nowhere
// (TestEvictedAdmissionsCountOnce).
func (s *Syncer) evict(ts []*Tenant, now time.Time, releases []lease.ReleaseRequest) []lease.ReleaseRequest {
	// Each tenant stays locked from here until it is marked, so no lease
	// call starts for it in between, and no refund credits it.
	locked := ts[:0]
	for _, t := range ts {
		if t.mu.TryLock() {
			locked = append(locked, t)
		}
	}
	ts = locked
	if len(ts) == 0 {
		return releases
	}
	for _, t := range ts {
		// Tracked again, the tenant may resolve a shorter LeaseTTL than
		// the one its refunds' tokens were leased under.
		s.noteTTLFell(t.Limits().LeaseTTL, now)
		if r, ok := s.drainLocked(t, now); ok {
			releases = append(releases, r)
		}
	}
	s.reg.remove(ts)
	for _, t := range ts {
		s.awake.gone(t)
		s.forgetFailing(t)
		t.mu.Unlock()
	}
	s.unlocked.Broadcast()
	s.evicted.Add(int64(len(ts)))
	return releases
}

// drainLocked empties t's counter for good and returns the release that
// gives its tokens back, if any. t.mu must be held. It marks t first and
// waits for the give-backs and spends under way (Tenant.quiesce): what
// they put into the counter is in the drain, and none puts anything
// after it (see flagDrained). Tokens beyond what the ledger
// holds (given back by a multi-tenant decision after the ledger had
// accounted for their spend, as planWith finds them) are forfeited: their
// grant is unknown, and with no batch left the release had no age at all
// (the zero time's, which overflowed into a negative Age that Redis
// refused, and Close reported an error).
func (s *Syncer) drainLocked(t *Tenant, now time.Time) (lease.ReleaseRequest, bool) {
	t.quiesce() // nothing is put into the counter after the drain (flagDrained)
	n := t.drain()
	var (
		held   int64
		oldest time.Time
		id     lease.GrantID
	)
	if ls := t.lease.Load(); ls != nil {
		held, oldest, id = s.planner.Drained(&ls.st)
		t.publish()
	}
	if excess := n - held; excess > 0 {
		s.forfeited.Add(excess)
		n = held
	}
	if n <= 0 {
		return lease.ReleaseRequest{}, false
	}
	return s.returnOf(t, n, now, oldest, id), true
}

// idleOrKept adds t, whose lock is held and which has no call planned, to
// evict when it has been idle for Options.IdleTimeout at time now, and
// reports whether it did; else, with Options.MaxTenants set, it lists t
// for eviction by age (s.lru). A tenant with requests since its last plan
// (activeSincePlan) was active after it: as of now. Why: a round passes
// by a held-back tenant (quiet.go) whatever its requests miss or spend,
// so its last plan's activity was stale by up to half the idle timeout,
// and over MaxTenants the tenant whose requests came at every tick was
// evicted as the least recently active, before tenants whose last
// request was older (TestMaxTenantsKeepsAHeldBackTenantItsRequestsHit).
func (s *Syncer) idleOrKept(t *Tenant, now time.Time, evict *[]*Tenant) bool {
	active := t.lastActive()
	if t.activeSincePlan() {
		active = max(active, now.UnixNano())
	}
	if now.UnixNano()-active >= int64(s.opts.IdleTimeout) && !s.sharing(t, now) {
		*evict = append(*evict, t)
		return true
	}
	if s.capped() {
		s.lru = append(s.lru, lruEntry{active: active, t: t})
	}
	return false
}

// sharing reports whether t (locked) holds a rate share that is not past
// its end at now: an idle tenant so is kept past its idle timeout until
// its plan has ended the share (Planner.endAfter: up to a quarter period
// after its demand went), or the share's end has passed. Why: evicted, it
// forgot the share without ending it, and Redis kept it in force, its
// rate withheld from the bucket and spent by no one, until its epoch
// ended, up to 1.5 periods after the grant: with a period of 8 minutes
// and the default idle timeout, 3 of 8 idle tenants were evicted with
// the whole rate held for 3.5 to 7.4 minutes more
// (TestIdleEvictionEndsTheShare). Ended at eviction instead, the ends of
// a fleet whose load stopped at once would all go in one round again,
// which endAfter's jitter spreads. An eviction for MaxTenants does not
// wait.
func (s *Syncer) sharing(t *Tenant, now time.Time) bool {
	ls := t.lease.Load()
	return ls != nil && ls.st.shareLive(now.UnixNano())
}

// activeSincePlan reports whether requests missed, or spent from t's
// lease, since its last plan (t.mu held): its miss word holds something
// (NoteMiss, NoteNeed, Unmiss), or its counter holds less than its ledger,
// which each plan brings down to the counter (Ledger.Sync) and nothing
// else lowers but a drain.
func (t *Tenant) activeSincePlan() bool {
	if t.miss.Load() != 0 {
		return true
	}
	ls := t.lease.Load()
	return ls != nil && t.tokens.Load() < ls.st.ledger.Total()
}

// sleep lets t go dormant (see Tenant) when it may at time now: its
// lock is held and its plan called for nothing. Beyond what the planner
// asks (Planner.Dormant), no request may be waiting for it to be planned
// (a miss, a refund), its counter is empty, it has no fallback bucket,
// and its bucket was full as last seen: a revived tenant's requests are
// told so (Tenant.RetryAfter).
func (s *Syncer) sleep(t *Tenant, now time.Time) {
	ls := t.lease.Load()
	lim := t.Limits()
	if t.wakes() || ls.fallback.Load() != nil {
		return
	}
	if !ls.refilled(now, lim) {
		return
	}
	if !s.planner.Dormant(&ls.st, *lim, now) {
		return
	}
	t.idleSince = t.lastActive()
	t.restripe(1) // the counter is empty: only its slots' memory goes
	t.dropUnobserved()
	t.lease.Store(nil)
	// Rounds pass it by until its idle check is due (passBy); after
	// the lease, so that a round that reads this sees no lease either.
	t.quietUntil.Store(quietAt(satAdd(t.idleSince, int64(s.opts.IdleTimeout)), 0))
	s.awake.slept = append(s.awake.slept, t)
}

// revive makes t's State anew, as for a tenant that leased before if t
// did, when t is dormant. t's lock must be held.
func (s *Syncer) revive(t *Tenant, now time.Time) {
	if t.lease.Load() != nil {
		return
	}
	ls := &leaseState{}
	s.planner.Revive(&ls.st, t.name, now, t.idleSince, t.flag(flagLeased))
	// Its dormant idle check's time is no quiet time of the State it gets
	// (passBy): cleared before the lease is set.
	t.quietUntil.Store(0)
	t.lease.Store(ls)
	s.join(t)
}

// wakes reports whether a dormant t has something to plan: a request
// missed or refunded since its last plan, or its counter holds tokens
// (given back by a multi-tenant decision, to be forfeited: Syncer.planWith).
// Misses taken back (a negative count: Action.Unobserved) are not
// something to plan.
func (t *Tenant) wakes() bool { return !t.stillAt(0) }

// stillAt reports whether t's counter holds level tokens, none of them
// put back by a failed spend (Back), no request has missed since its last
// plan and no refund is queued: a quiet tenant that published level
// (quietAt) has had nothing happen that a plan would see. (Its counter
// only leaves the level by a spend, a give-back or a grant. A grant
// follows a plan that made a call, which published no quiet time, and
// the tenant stays locked until the grant is applied; a lock-free
// give-back clears the published time (UnspendWaited); a spend given
// back under the lock (Syncer.CreditAt) leaves the counter and the
// ledger as they were, or the counter at a level the published one is
// not.)
func (t *Tenant) stillAt(level int64) bool {
	miss := t.miss.Load()
	return t.flags.Load()&(flagUrgent|flagRefunded) == 0 && int32(miss) <= 0 && miss>>32 == 0 &&
		t.tokens.Back() == 0 && t.tokens.Load() == level
}

// Dormant reports whether t is dormant (see Tenant): holding no lease
// state until a request needs it planned.
func (t *Tenant) Dormant() bool { return t.lease.Load() == nil }

// Dormant returns the number of dormant tenants. It visits every tenant,
// for introspection and tests.
func (s *Syncer) Dormant() (n int) {
	for t := range s.reg.all {
		if t.Dormant() {
			n++
		}
	}
	return n
}

// satAdd returns a + b (b >= 0), or math.MaxInt64 where that overflows: a
// dormant tenant's idle check with an idle timeout of centuries.
func satAdd(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
