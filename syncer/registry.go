package syncer

import (
	"errors"
	"iter"
	"maps"
	"math"
	"sync"
	"sync/atomic"

	"github.com/leasequota/leasequota/quota"
)

// ErrTooManyTenants is Track's error when the syncer tracks twice
// Options.MaxTenants tenants already: eviction is catching up.
var ErrTooManyTenants = errors.New("syncer: too many tenants")

// registry maps tenant names to their Tenants; the Syncer owns it and is
// the only one to add or remove tenants. Lookups of known tenants take no
// lock: they read an immutable table through an atomic pointer. New tenants
// go to a dirty map under a mutex and are copied into a new read table once
// the lookups that missed the read table have paid for the copy, so the
// copy cost per tenant stays constant however many tenants there are.
//
// A tenant is removed before it is marked evicted (remove), so no lookup
// ever returns an evicted tenant.
type registry struct {
	read atomic.Pointer[table] // never modified once stored
	key  hashKey               // of the tables' hashes (strHash); set by init

	mu     sync.Mutex         // guards dirty and misses, and the changes of evictedAdmits by remove
	dirty  map[string]*Tenant // tenants not yet in read
	misses int                // lookups that had to take mu since the last copy

	// evictedAdmits sums the admissions of removed tenants, so that
	// totals survive eviction: remove moves each one's there as it marks
	// it evicted, and Syncer.Uncount takes back from it an admission of
	// a tenant marked. A walk of the tenants for totals reads it with its
	// snapshot of the tables, under mu (snapshot), so that each tenant
	// counts once: in the tables or in evictedAdmits.
	evictedAdmits atomic.Int64
}

func (r *registry) init() {
	r.key = newHashKey()
	r.dirty = map[string]*Tenant{}
	r.read.Store(newTable(0))
}

// hash returns the hash of name in r's tables.
func (r *registry) hash(name string) uint64 { return strHash(name, r.key) }

// load returns the tenant named name, or nil. It is the hot path: one
// table lookup, no lock, no allocation, unless the tenant is new.
func (r *registry) load(name string) *Tenant {
	if t := r.read.Load().find(name, r.hash(name)); t != nil {
		return t
	}
	return r.loadSlow(name)
}

func (r *registry) loadSlow(name string) *Tenant {
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.dirty[name]
	if t == nil {
		// Copied into read between our two looks.
		t = r.read.Load().find(name, r.hash(name))
	}
	r.missLocked()
	return t
}

// loadOrStore returns the tenant named t.name, storing t if there is none.
func (r *registry) loadOrStore(t *Tenant) (actual *Tenant, loaded bool) {
	actual, loaded, _ = r.loadOrStoreBelow(t, 0)
	return actual, loaded
}

// loadOrStoreBelow is loadOrStore that stores t only while r holds fewer
// than limit tenants (no limit when limit <= 0), counted under the same
// lock as the store: stored is false, and actual nil, when t was refused.
// A count read before the lock let tenants stored at once each find room
// for one more (TestTrackHoldsTheCap).
func (r *registry) loadOrStoreBelow(t *Tenant, limit int) (actual *Tenant, loaded, stored bool) {
	h := r.hash(t.name)
	if got := r.read.Load().find(t.name, h); got != nil {
		return got, true, false
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := r.read.Load().find(t.name, h); got != nil {
		return got, true, false
	}
	if got := r.dirty[t.name]; got != nil {
		return got, true, false
	}
	if limit > 0 && r.read.Load().n+len(r.dirty) >= limit {
		return nil, false, false
	}
	r.dirty[t.name] = t
	r.missLocked()
	return t, false, true
}

// missLocked counts a lookup that took the lock and copies dirty into read
// once enough have: as many as the tenants the copy moves, and at least an
// eighth of read's size. r.mu must be held.
func (r *registry) missLocked() {
	r.misses++
	if len(r.dirty) == 0 {
		return
	}
	if r.misses < len(r.dirty) || r.misses < r.read.Load().n/8 {
		return
	}
	r.rebuildLocked(nil)
}

// rebuildLocked stores a new read table with the tenants of read and
// dirty but those in gone, and empties dirty. r.mu must be held.
func (r *registry) rebuildLocked(gone map[*Tenant]bool) {
	old := r.read.Load()
	n := old.n + len(r.dirty)
	for t := range gone {
		if old.find(t.name, r.hash(t.name)) == t || r.dirty[t.name] == t {
			n--
		}
	}
	tb := newTable(n)
	for _, src := range []iter.Seq[*Tenant]{old.all, maps.Values(r.dirty)} {
		for t := range src {
			if gone[t] {
				continue
			}
			tb.add(t, r.hash(t.name))
		}
	}
	r.read.Store(tb)
	r.dirty = map[string]*Tenant{}
	r.misses = 0
}

// len returns the number of tenants.
func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read.Load().n + len(r.dirty)
}

// all yields every tenant: those of read and dirty as one snapshot,
// taken under r.mu. Why one: read walked first and dirty copied after
// let a lookup's rebuild in between move dirty's tenants into a new read
// table, and they were yielded by neither: Close returned none of their
// tokens (5,445 left leased in a test with requests during Close), and a
// tick skipped them.
func (r *registry) all(yield func(*Tenant) bool) {
	read, extra, _ := r.snapshot()
	for t := range read.all {
		if !yield(t) {
			return
		}
	}
	for _, t := range extra {
		if !yield(t) {
			return
		}
	}
}

// snapshot returns the tenants as one snapshot taken under r.mu (see
// all): the read table and those of dirty, and with them the admissions
// of the tenants removed before (evictedAdmits).
func (r *registry) snapshot() (read *table, extra []*Tenant, evicted int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	read = r.read.Load()
	extra = make([]*Tenant, 0, len(r.dirty))
	for _, t := range r.dirty {
		extra = append(extra, t)
	}
	return read, extra, r.evictedAdmits.Load()
}

// remove deletes the tenants ts, then marks them evicted and moves their
// admissions to evictedAdmits, all in one step under r.mu: a walk for
// totals (snapshot) finds each of them either in the tables or in
// evictedAdmits, never in both or neither. It copies the read table once
// for the whole batch, merging dirty into it. The tenants must be drained
// (Syncer.evict): their admissions are final, but for those taken back
// since, which Syncer.Uncount takes off evictedAdmits.
func (r *registry) remove(ts []*Tenant) {
	if len(ts) == 0 {
		return
	}
	gone := make(map[*Tenant]bool, len(ts))
	for _, t := range ts {
		gone[t] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rebuildLocked(gone)
	// Marked once no lookup finds them. Admitted, read after the mark,
	// waits for an uncount under way: one that began before the mark is
	// in it, one after finds the tenant marked (Tenant.uncount).
	for t := range gone {
		if !t.setFlag(flagEvicted, true) {
			r.evictedAdmits.Add(t.Admitted())
		}
	}
}

// Tenant returns the tenant named name, or nil when the syncer does not
// track it. It is the request path's lookup: one table read, no lock and no
// allocation for a known tenant. It never returns an evicted tenant that
// was already removed, and a tenant is removed before it is marked
// evicted.
func (s *Syncer) Tenant(name string) *Tenant { return s.reg.load(name) }

// Track returns the tenant named name, creating it with the base quota q,
// resolved, when the syncer does not track it. A new tenant's first lease
// call is up to the caller (Refill) or the next round. With
// Options.MaxTenants set, Track refuses a new tenant with
// ErrTooManyTenants while the syncer tracks twice that many. The cap
// holds when new tenants come at once: it is checked under the lock that
// stores the tenant (registry.loadOrStoreBelow).
func (s *Syncer) Track(name string, q quota.Quota) (*Tenant, error) {
	if t := s.reg.load(name); t != nil {
		return t, nil
	}
	limit := 0
	if max := s.opts.MaxTenants; max > 0 {
		limit = 2 * min(max, math.MaxInt/2)
		if s.reg.len() >= limit {
			// Full: refused before a Tenant is made for nothing.
			return nil, ErrTooManyTenants
		}
	}
	t := &Tenant{}
	t.init(name, s.baseLimits(q), s.planner, s.opts.Now())
	t, loaded, stored := s.reg.loadOrStoreBelow(t, limit)
	if !loaded && !stored {
		return nil, ErrTooManyTenants
	}
	if stored {
		s.join(t)
	}
	return t, nil
}

// Len returns the number of tenants tracked.
func (s *Syncer) Len() int { return s.reg.len() }

// Tenants yields every tenant tracked, for introspection and totals.
func (s *Syncer) Tenants() iter.Seq[*Tenant] { return s.reg.all }

// LeaseTotals returns the requests admitted from leases without a wait,
// over every tenant ever tracked (Tenant.Spend counts them), and the
// leased tokens held now. It visits every tenant. Each admission counts
// once: an evicted tenant's move to a total of their own as it is
// removed, which is read with the snapshot of the tenants visited.
func (s *Syncer) LeaseTotals() (admitted, held int64) {
	read, extra, admitted := s.reg.snapshot()
	add := func(t *Tenant) {
		admitted += t.Admitted()
		held += t.tokens.Load()
	}
	for t := range read.all {
		add(t)
	}
	for _, t := range extra {
		add(t)
	}
	return admitted, held
}
