package syncer

import (
	"iter"
	"maps"
	"math"
	"slices"
	"sync"
	"time"
)

// The tenants a tick visits (Tick). A tick visited every tenant tracked,
// forty times a second at the default interval, and passed a dormant one
// by after a look at its fields (passBy): a cache miss a tenant when they
// are many, so that an instance that had seen 100,000 tenants, all
// dormant, spent a tenth of a core on doing nothing for them until their
// idle timeout (BenchmarkIdleTenantsCPU). Now a tick visits the tenants
// in a set (awake.set): every tenant that is not dormant (a new or
// revived one joins it: Syncer.join), and each dormant one on which a
// request noted a miss or a refund since (Syncer.wake). It visits every
// tenant only when
//   - a dormant tenant's idle check is due (the earliest of them:
//     awake.dueAt);
//   - the round re-reads quotas;
//   - fullVisitEvery has passed since the last such tick: a net under
//     whatever else could wake a dormant tenant unseen (tokens given back
//     into its counter by a request that spent them before it went
//     dormant), which a tick then sees at most that much later.
// With MaxTenants every tick ranks every tenant, and no set is kept.
// TestTicksOfTheSetMatchTicksOfAll holds the set's ticks, without the
// net, to ticks of every tenant.

// wake makes a dormant t, on which a request has just noted a miss or a
// refund, one the next tick visits, as a tick that visited every tenant
// would (passBy: it wakes). After the note: a t that went dormant before
// it is seen so here; one that did not yet sees it, and stays awake
// (sleep).
func (s *Syncer) wake(t *Tenant) {
	if t.Dormant() {
		s.join(t)
	}
}

// join makes t, new, revived or woken, one the next tick visits; with
// MaxTenants, whose ticks rank every tenant, it keeps no set.
func (s *Syncer) join(t *Tenant) {
	if !s.capped() {
		s.awake.add(t)
	}
}

// capped reports whether Options.MaxTenants caps the tenants kept: then
// every round ranks every tenant it visits by its last activity, and
// every tick visits them all.
func (s *Syncer) capped() bool { return s.opts.MaxTenants > 0 }

// fullVisitEvery is how long a tick may pass dormant tenants by at most.
const fullVisitEvery = time.Second

// awake keeps the tenants a tick visits between ticks that visit all.
type awake struct {
	mu    sync.Mutex // guards added
	added []*Tenant  // new or revived since a tick last took them
	spare []*Tenant  // the added slice a tick last emptied, for reuse

	// The loop's own (Tick).
	// set holds every tenant that is not dormant, and the dormant ones
	// that Syncer.wake added; made again once it holds less than half
	// of its peak (settle), so that the map does not keep the room of
	// the peak (a map never shrinks).
	set  map[*Tenant]struct{}
	peak int // the most tenants set held since it was made
	// dueAt is the earliest idle check (quietUntil) of a dormant tenant,
	// as the ticks saw them go dormant, or found them dormant (unix
	// nanoseconds).
	dueAt int64
	// fullAt is when the next tick visits every tenant at the latest.
	fullAt int64
	// slept is the tenants that went dormant in a round (sleep), which
	// it then takes out of the set (settle).
	slept []*Tenant
	// visited counts the tenants rounds visited, for the tests.
	visited int64
	// always makes every tick visit every tenant, as before the set: the
	// tests' reference; noNet makes none do so for fullVisitEvery, so
	// that the tests see what the set alone does.
	always, noNet bool
}

// add makes t one the next tick visits: new, revived, or dormant with
// something to plan (Syncer.wake). Safe for concurrent use; t's lock may
// be held.
func (w *awake) add(t *Tenant) {
	w.mu.Lock()
	w.added = append(w.added, t)
	w.mu.Unlock()
}

// take moves the tenants added since the last tick into the set.
func (w *awake) take() {
	w.mu.Lock()
	added := w.added
	w.added = w.spare[:0]
	w.mu.Unlock()
	if w.set == nil {
		w.set = make(map[*Tenant]struct{}, len(added))
	}
	for _, t := range added {
		w.set[t] = struct{}{}
	}
	w.peak = max(w.peak, len(w.set))
	clear(added)
	w.spare = added[:0]
}

// full reports whether a tick at ns visits every tenant, which it must
// when must is set; if so, the visit recounts dueAt (seen).
func (w *awake) full(ns int64, must bool) bool {
	if !must && !w.always && ns < w.dueAt && ns < w.fullAt {
		return false
	}
	w.dueAt = math.MaxInt64
	w.fullAt = satAdd(ns, int64(fullVisitEvery))
	if w.noNet {
		w.fullAt = math.MaxInt64
	}
	return true
}

// tenants yields the set's tenants, by name when driven (a map's order is
// random).
func (w *awake) tenants(driven bool) iter.Seq[*Tenant] {
	if driven {
		return slices.Values(byName(maps.Keys(w.set)))
	}
	return maps.Keys(w.set)
}

// seen notes what a visit of every tenant left t in: awake, in the set;
// dormant, out of it, its idle check counted in dueAt; evicted, out. The
// round's settle then makes the set again if it fell under half of its
// peak.
func (w *awake) seen(t *Tenant) {
	switch {
	case t.flag(flagEvicted):
		delete(w.set, t)
	case t.lease.Load() == nil:
		delete(w.set, t)
		w.dueAt = min(w.dueAt, t.quietUntil.Load())
	default:
		w.set[t] = struct{}{}
		w.peak = max(w.peak, len(w.set))
	}
}

// gone takes an evicted tenant out of the set.
func (w *awake) gone(t *Tenant) { delete(w.set, t) }

// settle takes the tenants that went dormant in a round out of the set,
// their idle checks counted in dueAt. A tenant revived since is added
// again (add), and the next tick takes it. A set left with less than
// half of its peak (by these, by a visit of every tenant: seen, or by
// evictions: gone) is made again, its room given back in the round that
// freed it: the heap then does not depend on when a later visit of
// every tenant came (BenchmarkTenantMemory read 100 or 123 B a dormant
// tenant when only such visits made it again, as its first wave's map
// had been made again before its measure or not). Its cost, a copy of
// what is left, is less than the deletions since the peak. Every round
// ends here, a visit of every tenant too.
func (w *awake) settle() {
	for _, t := range w.slept {
		delete(w.set, t)
		w.dueAt = min(w.dueAt, t.quietUntil.Load())
	}
	clear(w.slept)
	w.slept = w.slept[:0]
	if 2*len(w.set) < w.peak {
		set := make(map[*Tenant]struct{}, len(w.set)) // not maps.Clone, which may keep the room
		for t := range w.set {
			set[t] = struct{}{}
		}
		w.set, w.peak = set, len(set)
	}
}
