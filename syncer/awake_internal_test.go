package syncer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"pgregory.net/rapid"
)

// awakeQuota is the quota of the tests of awake.go: a tenant idle for a
// second or two goes dormant.
var awakeQuota = quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: time.Second}

// TestSetShrinksAsTenantsSleep: after every tick the set holds at least
// half of its peak (settle makes it again below that), so its room goes
// as its tenants go dormant, not at the next visit of every tenant; once
// all are dormant it is empty and its peak 0. It fails when only the
// visits of every tenant make the set again (the net is off here, and
// the tenants go dormant before their idle checks fall due).
func TestSetShrinksAsTenantsSleep(t *testing.T) {
	const n = 200
	s, all, clock := tracking(t, n, awakeQuota, drivenMode, func(o *Options) { o.IdleTimeout = time.Hour })
	s.awake.noNet = true
	tick := ticker(s, clock)
	for i, tn := range all {
		tn.NoteMiss(int64(1 + i%5)) // demands apart, so that they sleep apart
	}
	var peak int
	for i := 0; ; i++ {
		if i == 2000 {
			t.Fatalf("%d tenants still in the set after 50 s", len(s.awake.set))
		}
		tick()
		w := &s.awake
		peak = max(peak, w.peak)
		if 2*len(w.set) < w.peak {
			t.Fatalf("tick %d: the set holds %d tenants, less than half of its peak %d", i, len(w.set), w.peak)
		}
		if len(w.set) == 0 {
			if w.peak != 0 {
				t.Fatalf("an empty set keeps a peak of %d", w.peak)
			}
			break
		}
	}
	if peak != n {
		t.Fatalf("the set's peak was %d, want %d", peak, n)
	}
	for _, tn := range all {
		if !tn.Dormant() {
			t.Fatalf("%s is out of the set but not dormant", tn.name)
		}
	}
}

// TestTickVisitsOnlyAwakeTenants: once every tenant is dormant, ticks
// visit none of them but once a fullVisitEvery (the net); a tenant
// revived by an urgent round, a new one, and a dormant one whose miss
// found the urgent queue full are each visited by the next tick, the
// last without any urgent round. Each step fails with ticks that skip
// the tenants they should see (a set not joined on revive, on Track, or
// by a miss on a dormant tenant); the first with ticks that visit all.
func TestTickVisitsOnlyAwakeTenants(t *testing.T) {
	const n = 200
	s, all, clock := tracking(t, n, awakeQuota, drivenMode, func(o *Options) { o.IdleTimeout = time.Hour })
	tick := ticker(s, clock)
	for _, tn := range all {
		tn.NoteMiss(1)
	}
	dormant := func() (d int) {
		for _, tn := range all {
			if tn.Dormant() {
				d++
			}
		}
		return d
	}
	for i := 0; dormant() < n; i++ {
		if i == 2000 {
			t.Fatalf("%d of %d tenants dormant after 50 s", dormant(), n)
		}
		tick()
	}
	for _, tn := range all {
		if !tn.Leased() {
			t.Fatalf("%s went dormant without a lease", tn.name)
		}
	}
	// The round each went dormant in took it out of the set (settle).
	if len(s.awake.set) != 0 {
		t.Fatalf("%d tenants in the set with every tenant dormant", len(s.awake.set))
	}

	// Over two nets' time: one visit of all per fullVisitEvery, no other.
	ticks := int(2 * fullVisitEvery / (25 * time.Millisecond))
	before := s.awake.visited
	for range ticks {
		tick()
	}
	if got := s.awake.visited - before; got < n || got > 3*n {
		t.Fatalf("%d ticks over %d dormant tenants visited %d, want %d to %d (one visit of all a %v)", ticks, n, got, n, 3*n, fullVisitEvery)
	}

	// A dormant tenant revived by an urgent round: visited by each tick.
	ctx := context.Background()
	woken := all[7]
	s.NoteMiss(woken, 1)
	if !s.Urgent(ctx) || woken.Dormant() {
		t.Fatal("the urgent round did not revive the tenant a request missed on")
	}
	s.awake.fullAt = clock.Load() + int64(time.Hour) // only the set may bring it
	before = s.awake.visited
	tick()
	if got := s.awake.visited - before; got != 1 {
		t.Fatalf("a tick after one tenant was revived visited %d tenants, want 1", got)
	}

	// A new tenant, and a dormant one whose miss finds the urgent queue
	// full: the next ticks lease both, with no urgent round.
	fresh, err := s.Track("tenant-new", awakeQuota)
	if err != nil {
		t.Fatal(err)
	}
	for len(s.urgent) < cap(s.urgent) {
		s.urgent <- woken
	}
	asleep := all[42]
	s.NoteMiss(asleep, 1)
	fresh.NoteMiss(1)
	for i := 0; asleep.Dormant() || !fresh.Leased(); i++ {
		if i == 4 {
			t.Fatalf("after %d ticks: tenant with a miss dormant %v, new tenant leased %v", i, asleep.Dormant(), fresh.Leased())
		}
		tick()
	}
}

// TestTicksOfTheSetMatchTicksOfAll drives two Syncers alike with random
// steps (requests that spend, miss, wait for a refill, are refunded
// later, by when their tenant may be dormant; new
// tenants; ticks, urgent rounds and refills; time moving on), one whose
// ticks visit the set (awake.go) and one whose ticks visit every tenant,
// and finds their tenants and counts the same after every step. The
// first has no net (fullVisitEvery): it visits all only when a dormant
// tenant's idle check is due or a rescan asks. It fails when a tick of
// the set misses a tenant that a tick of all would plan: a revive or
// Track not joining the set, a dormant tenant's miss or refund not
// joining it (Syncer.wake), an idle check missed.
func TestTicksOfTheSetMatchTicksOfAll(t *testing.T) {
	var reached atomic.Int64 // steps that found a tenant dormant
	rapid.Check(t, func(rt *rapid.T) {
		clock := new(atomic.Int64)
		clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
		now := func() time.Time { return time.Unix(0, clock.Load()) }
		// A demand's half-life of 100 ms: an idle tenant goes dormant
		// after 1.6 s, before its idle timeout evicts it.
		idle := time.Duration(rapid.IntRange(2, 8).Draw(rt, "idle s")) * time.Second
		mk := func(always bool) *Syncer {
			view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
			if err != nil {
				rt.Fatal(err)
			}
			s := New(view, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond, HalfLife: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: idle})
			s.awake.always, s.awake.noNet = always, !always
			return s
		}
		pair := [2]*Syncer{mk(false), mk(true)}
		ctx := context.Background()
		track := func(name string) [2]*Tenant {
			var ts [2]*Tenant
			for i, s := range pair {
				tn, err := s.Track(name, awakeQuota)
				if err != nil {
					rt.Fatal(err)
				}
				ts[i] = tn
			}
			return ts
		}
		names := []string{"a", "b", "c", "d", "e", "f"}
		// Admissions not yet refunded, each Syncer's.
		type spent struct {
			t     *Tenant
			front lease.GrantID
			clock int64
		}
		var held [2][]spent
		steps := rapid.IntRange(50, 400).Draw(rt, "steps")
		dormantSteps := 0
		for step := range steps {
			name := rapid.SampledFrom(names).Draw(rt, "tenant")
			op := rapid.IntRange(0, 9).Draw(rt, "op")
			switch op {
			case 0, 1: // a request that spends, or misses
				ts := track(name)
				var ok [2]bool
				for i, tn := range ts {
					ok[i], _ = tn.Spend(1)
					if !ok[i] {
						pair[i].NoteMiss(tn, 1)
					}
				}
				if ok[0] != ok[1] {
					rt.Fatalf("step %d: %s spent %v with the set, %v with all", step, name, ok[0], ok[1])
				}
			case 2: // a request that waits for its own refill
				for i, tn := range track(name) {
					pair[i].NoteWait(tn, 1)
					pair[i].Refill(ctx, tn, 1)
				}
			case 3: // a spend to refund later, or the oldest such refunded
				if len(held[0]) > 0 && rapid.Bool().Draw(rt, "refund") {
					for i := range pair {
						h := held[i][0]
						held[i] = held[i][1:]
						pair[i].Refund(h.t, 1, h.front, h.clock)
					}
					break
				}
				for i, tn := range track(name) {
					front, c := tn.Front(), pair[i].Clock()
					if ok, _ := tn.Spend(1); ok {
						held[i] = append(held[i], spent{tn, front, c})
					}
				}
				if len(held[0]) != len(held[1]) {
					rt.Fatalf("step %d: %s spent with one and not the other", step, name)
				}
			case 4:
				for _, s := range pair {
					s.Urgent(ctx)
				}
			case 5:
				for _, s := range pair {
					s.Refills(ctx)
				}
			default: // time moves on by a tick, or many
				d := 25 * time.Millisecond
				if op == 9 {
					d = time.Duration(rapid.IntRange(1, 200).Draw(rt, "ticks")) * 25 * time.Millisecond
				}
				for end := clock.Load() + int64(d); clock.Load() < end; {
					clock.Add(int64(25 * time.Millisecond))
					for _, s := range pair {
						s.Deliver()
						s.Tick(ctx)
					}
				}
			}
			for _, name := range names {
				a, b := pair[0].Tenant(name), pair[1].Tenant(name)
				if (a == nil) != (b == nil) {
					rt.Fatalf("step %d: %s tracked %v with the set, %v with all", step, name, a != nil, b != nil)
				}
				if a == nil {
					continue
				}
				if got, want := describe(a), describe(b); got != want {
					rt.Fatalf("step %d: %s is %s with the set, %s with all", step, name, got, want)
				}
			}
			for _, tn := range names {
				if a := pair[0].Tenant(tn); a != nil && a.Dormant() {
					dormantSteps++
				}
			}
			if got, want := pair[0].Stats(), pair[1].Stats(); got != want {
				rt.Fatalf("step %d: stats %+v with the set, %+v with all", step, got, want)
			}
		}
		reached.Add(int64(dormantSteps))
	})
	if reached.Load() == 0 {
		t.Fatal("no tenant went dormant in any case: the test does not reach what it is for")
	}
}

// describe is what TestTicksOfTheSetMatchTicksOfAll compares of a tenant.
func describe(t *Tenant) string {
	return fmt.Sprintf("dormant %v, evicted %v, leased %v, holding %d, flags %#x", t.Dormant(), t.Evicted(), t.Leased(), t.Held(), t.flags.Load()&(syncBusy-1))
}

// TestNoCapKeepsTheSet: a MaxTenants that is not positive caps nothing
// (Options.MaxTenants), so a new tenant joins the set as without one.
// Fails when the set is kept by one reading of the cap and walked by
// another: a negative MaxTenants then kept no set and walked it.
func TestNoCapKeepsTheSet(t *testing.T) {
	s, _, _ := tracking(t, 0, awakeQuota, drivenMode, func(o *Options) { o.MaxTenants = -1 })
	if _, err := s.Track("tenant-new", awakeQuota); err != nil {
		t.Fatal(err)
	}
	s.awake.take()
	if len(s.awake.set) != 1 {
		t.Fatalf("with MaxTenants -1 (no cap) the set holds %d tenants after one was tracked, want 1", len(s.awake.set))
	}
}

// TestMaxTenantsKeepsNoSet: with MaxTenants, whose ticks rank every
// tenant, no set is kept (Syncer.join) and every tick visits every
// tenant, dormant or not. Fails when tenants join a set no tick walks,
// which then only grows.
func TestMaxTenantsKeepsNoSet(t *testing.T) {
	const n = 20
	s, all, clock := tracking(t, n, awakeQuota, drivenMode, func(o *Options) { o.MaxTenants = 1000; o.IdleTimeout = time.Hour })
	tick := ticker(s, clock)
	for _, tn := range all {
		tn.NoteMiss(1)
	}
	for i := range 400 { // 10 s: leased, then dormant
		before := s.awake.visited
		tick()
		if got := s.awake.visited - before; got != n {
			t.Fatalf("tick %d visited %d tenants, want all %d", i, got, n)
		}
		s.awake.mu.Lock()
		added := len(s.awake.added)
		s.awake.mu.Unlock()
		if len(s.awake.set) != 0 || added != 0 {
			t.Fatalf("tick %d: with MaxTenants the set holds %d tenants and %d wait to join it, want none", i, len(s.awake.set), added)
		}
	}
	if s.Dormant() != n {
		t.Fatalf("%d of %d tenants dormant after 10 s idle", s.Dormant(), n)
	}
}
