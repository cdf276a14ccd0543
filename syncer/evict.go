package syncer

import (
	"time"

	"github.com/leasequota/leasequota/lease"
)

// lruEntry is a tenant and when it was last active, for eviction.
type lruEntry struct {
	active int64
	t      *Tenant
}

// evict removes the tenants ts from the registry, then marks them
// evicted and drains their tokens; it returns releases with the returns
// of the drained tokens appended. A tenant whose lock is taken (a lease
// call is in flight for it) is left for a later round.
//
// The order is what keeps readers safe: once a tenant is marked evicted a
// request holding it looks the tenant up again, and that lookup must not
// find the same tenant, or the request would go round in circles. So the
// registry drops the tenants (one step for the whole batch) before any of
// them is marked. A request that loaded a tenant before the removal may
// still spend the tokens it holds until the drain below: they were leased,
// so they are good.
func (s *Syncer) evict(ts []*Tenant, now time.Time, releases []lease.ReleaseRequest) []lease.ReleaseRequest {
	// Each tenant stays locked from here until it is marked, so no lease
	// call starts for it in between.
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
	s.reg.remove(ts)
	for _, t := range ts {
		t.setFlag(flagEvicted, true)
		if r, ok := s.drainLocked(t, now); ok {
			releases = append(releases, r)
		}
		t.mu.Unlock()
	}
	s.unlocked.Broadcast()
	s.evicted.Add(int64(len(ts)))
	return releases
}

// drainLocked empties t's counter and returns the release that gives its
// tokens back, if any. t.mu must be held.
func (s *Syncer) drainLocked(t *Tenant, now time.Time) (lease.ReleaseRequest, bool) {
	n := t.tokens.Drain()
	_, oldest, id := s.planner.Drained(&t.st)
	t.publish()
	if n <= 0 {
		return lease.ReleaseRequest{}, false
	}
	return s.returnOf(t, n, now, oldest, id), true
}
