package syncer

import "github.com/leasequota/leasequota/quota"

// Rebase replaces t's base quota with q, resolved: the quota its lease
// calls pass from now on, and the one its requests apply unless Redis
// holds an override for t (which stays in force over the new base until
// deleted, as before). It is how a re-resolved configured quota (a new
// answer of the limiter's QuotaFunc) reaches a tracked tenant, and it
// treats the change as Redis treats an override that changes: tokens
// already leased stay spendable until their lease expires, and the next
// lease calls, on their usual schedule, pass q to the bucket, which
// refills at q's rate and caps at q's burst from then on. It reports
// whether the base quota changed.
//
// Rebase takes t's lock, which the syncer holds across a lease call for
// t, so it may wait for one; the syncer's loop never waits for it (it
// skips a tenant whose lock is taken). Call it off the request path.
func (s *Syncer) Rebase(t *Tenant, q quota.Quota) bool {
	t.mu.Lock()
	defer s.unlock(t)
	cur := t.limits.Load()
	if cur.baseOf().Quota == q || t.flag(flagEvicted) {
		return false
	}
	base := s.baseLimits(q)
	if cur.base == nil {
		s.ttlFalls(&cur.Quota, &base.Quota)
		t.limits.Store(base)
		s.requota(t, &cur.Quota, &base.Quota)
	} else {
		t.limits.Store(&limits{Quota: cur.Quota, base: base})
	}
	return true
}

// Hash returns xxhash of the tenant's name, folded to 32 bits, as the
// planner's phase uses it: for callers that spread work over tenants
// evenly (the limiter's quota refresh). It never changes.
func (t *Tenant) Hash() uint32 { return hashOf(t.name) }
