package leasequota

import (
	"sync"
	"sync/atomic"

	"github.com/leasequota/leasequota/syncer"
)

// entry is one tenant known to this instance.
type entry struct {
	syncer.Tenant
}

// quota returns the tenant's quota, defaults resolved.
func (e *entry) quota() Quota { return quotaOfLimits(e.Limits()) }

// registry maps tenant names to entries. Lookups of known tenants take no
// lock: they read an immutable map through an atomic pointer. New tenants
// go to a dirty map under a mutex and are copied into a new read map once
// the lookups that missed the read map have paid for the copy, so the copy
// cost per tenant stays constant however many tenants there are.
type registry struct {
	read atomic.Pointer[map[string]*entry] // never modified once stored

	mu     sync.Mutex        // guards dirty and misses
	dirty  map[string]*entry // entries not yet in read
	misses int               // lookups that had to take mu since the last copy

	// evictedAdmits sums the Admits of removed entries, so that totals
	// survive eviction.
	evictedAdmits atomic.Int64
}

func newRegistry() *registry {
	r := &registry{dirty: map[string]*entry{}}
	m := map[string]*entry{}
	r.read.Store(&m)
	return r
}

// load returns the tenant's entry, or nil. It is the hot path: one map
// read, no lock, no allocation, unless the tenant is new.
func (r *registry) load(name string) *entry {
	if e := (*r.read.Load())[name]; e != nil {
		return e
	}
	return r.loadSlow(name)
}

func (r *registry) loadSlow(name string) *entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.dirty[name]
	if e == nil {
		// Copied into read between our two looks.
		e = (*r.read.Load())[name]
	}
	r.missLocked()
	return e
}

// loadOrStore returns the entry of tenant name, storing e if there is none.
func (r *registry) loadOrStore(name string, e *entry) (actual *entry, loaded bool) {
	if got := (*r.read.Load())[name]; got != nil {
		return got, true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if got := (*r.read.Load())[name]; got != nil {
		return got, true
	}
	if got := r.dirty[name]; got != nil {
		return got, true
	}
	r.dirty[name] = e
	r.missLocked()
	return e, false
}

// missLocked counts a lookup that took the lock and copies dirty into read
// once enough have: as many as the entries the copy moves, and at least
// an eighth of read's size. r.mu must be held.
func (r *registry) missLocked() {
	r.misses++
	if len(r.dirty) == 0 {
		return
	}
	old := *r.read.Load()
	if r.misses < len(r.dirty) || r.misses < len(old)/8 {
		return
	}
	m := make(map[string]*entry, len(old)+len(r.dirty))
	for k, v := range old {
		m[k] = v
	}
	for k, v := range r.dirty {
		m[k] = v
	}
	r.read.Store(&m)
	r.dirty = map[string]*entry{}
	r.misses = 0
}

// len returns the number of tenants.
func (r *registry) len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(*r.read.Load()) + len(r.dirty)
}

// tenants yields every tenant and its name: those in read, then a
// snapshot of dirty.
func (r *registry) tenants(yield func(string, *syncer.Tenant) bool) {
	for name, e := range *r.read.Load() {
		if !yield(name, &e.Tenant) {
			return
		}
	}
	r.mu.Lock()
	extra := make([]named, 0, len(r.dirty))
	for name, e := range r.dirty {
		extra = append(extra, named{name, e})
	}
	r.mu.Unlock()
	for _, x := range extra {
		if !yield(x.name, &x.e.Tenant) {
			return
		}
	}
}

// named is an entry and its tenant's name.
type named struct {
	name string
	e    *entry
}

// remove deletes the given tenants (evicted by the syncer). It copies the
// read map once for the whole batch, merging dirty into it.
func (r *registry) remove(ts []*syncer.Tenant) {
	if len(ts) == 0 {
		return
	}
	gone := make(map[*syncer.Tenant]bool, len(ts))
	for _, t := range ts {
		gone[t] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := *r.read.Load()
	m := make(map[string]*entry, len(old)+len(r.dirty))
	for _, src := range []map[string]*entry{old, r.dirty} {
		for k, e := range src {
			if gone[&e.Tenant] {
				r.evictedAdmits.Add(e.Admits.Load())
				continue
			}
			m[k] = e
		}
	}
	r.read.Store(&m)
	r.dirty = map[string]*entry{}
	r.misses = 0
}
