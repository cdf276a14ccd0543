package syncer

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestAdmitGivesTurns holds admit to its rule over random rounds: with a
// window of g places binding, a round of n planned calls admits every
// quota re-read (which takes a place too, as any call in flight does) and
// the calls whose turns come first from admitFrom, as many as places are
// left (as a sort of all of them would choose), refuses the rest, and
// loses or repeats none; and since each round starts where the last
// stopped, every tenant is admitted within ceil(n/places) rounds of all of
// them asking.
func TestAdmitGivesTurns(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, tenants, g := drawAdmitRig(rt)
		defer s.Close()
		n := len(tenants)
		var cands []job
		for _, tn := range tenants {
			cands = append(cands, job{t: tn, read: rapid.IntRange(0, 9).Draw(rt, "read") == 0})
		}
		reads := 0
		for _, j := range cands {
			if j.read {
				reads++
			}
		}
		seen := map[*Tenant]bool{}
		places := max(g-reads, 0)
		rounds := 2
		if places > 0 {
			rounds = (n-reads+places-1)/places + 1
		}
		for range rounds {
			setWindow(s, g)

			// What a sort of every planned call by its turn would admit.
			from := s.one.admitFrom
			order := slices.Clone(cands)
			slices.SortStableFunc(order, func(a, b job) int { return int64Cmp(int64(s.turn(a.t)-from), int64(s.turn(b.t)-from)) })
			want := map[*Tenant]bool{}
			left := places
			for _, j := range order {
				if j.read || left > 0 {
					want[j.t] = true
					if !j.read {
						left--
					}
				}
			}

			jobs, refused := s.admit(s.opts.Now(), slices.Clone(cands))
			if len(jobs)+len(refused) != n {
				rt.Fatalf("%d admitted and %d refused of %d planned", len(jobs), len(refused), n)
			}
			got := map[*Tenant]bool{}
			for _, j := range jobs {
				got[j.t] = true
				seen[j.t] = true
			}
			for _, j := range refused {
				if got[j.t] || j.read {
					rt.Fatalf("%s refused: admitted too, or a quota re-read", j.t.name)
				}
			}
			if len(got) != len(want) {
				rt.Fatalf("admitted %d, want %d (window %d, %d re-reads)", len(got), len(want), g, reads)
			}
			for tn := range want {
				if !got[tn] {
					rt.Fatalf("%s not admitted, though its turn came among the first %d", tn.name, places)
				}
			}
		}
		if places > 0 && len(seen) != n {
			rt.Fatalf("after %d rounds of %d places, %d of %d tenants never admitted", rounds, places, n-len(seen), n)
		}
	})
}

// admitRig is a Syncer on the in-process store, its clock standing still,
// with a seed drawn by rt and n tenants of quota q, for admit's tests.
func admitRig(rt *rapid.T, n int, q quota.Quota) (*Syncer, []*Tenant) {
	now := time.Unix(1_800_000_000, 0)
	view, err := memstore.New().Instance("me", time.Second)
	if err != nil {
		rt.Fatal(err)
	}
	s := New(view, Options{Now: func() time.Time { return now }, Planner: NewPlanner(Config{}, rapid.Uint64().Draw(rt, "seed"))})
	tenants := make([]*Tenant, n)
	for i := range tenants {
		if tenants[i], err = s.Track(fmt.Sprintf("t%d", i), q); err != nil {
			rt.Fatal(err)
		}
	}
	return s, tenants
}

// drawAdmitRig draws admit's usual case: admitRig of 1 to 300 tenants of
// Rate 10 and Burst 10, and a window of 1 to 60 places (g) for setWindow.
func drawAdmitRig(rt *rapid.T) (s *Syncer, tenants []*Tenant, g int) {
	n := rapid.IntRange(1, 300).Draw(rt, "tenants")
	g = rapid.IntRange(1, 60).Draw(rt, "window")
	s, tenants = admitRig(rt, n, quota.Quota{Rate: 10, Burst: 10})
	return s, tenants, g
}

// setWindow gives s's call budget a window of g places with none in
// flight, which will not grow before an hour has passed.
func setWindow(s *Syncer, g int) {
	b := &s.one.budget
	b.mu.Lock()
	b.window, b.inFlight, b.calmAfter = float64(g), 0, s.opts.Now().Add(time.Hour)
	b.mu.Unlock()
}

func int64Cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestTurnWaitKeepsTurns: refused tenants that wait out turnWait before
// they are planned again still come back before their turn. Over random
// rounds with a window of g places, each tenant wanting one call, and the
// tenants refused waiting the ticks turnWait gives them (absent from the
// rounds meanwhile), every tenant is admitted within ceil(n/g) + 1 rounds,
// as when all ask every round, and the rounds plan fewer calls than n a
// round once n is many times g.
func TestTurnWaitKeepsTurns(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 2000).Draw(rt, "tenants")
		g := rapid.IntRange(1, 60).Draw(rt, "window")
		s, tenants := admitRig(rt, n, quota.Quota{Rate: 10, Burst: 10, LeaseTTL: time.Hour})
		defer s.Close()
		tick := s.planner.Config().Interval / 4
		back := map[*Tenant]int{} // the round from which a refused tenant asks again
		admitted := map[*Tenant]bool{}
		rounds := (n+g-1)/g + 1
		planned := 0
		for r := range rounds {
			var cands []job
			for _, tn := range tenants {
				if !admitted[tn] && back[tn] <= r {
					cands = append(cands, job{t: tn})
				}
			}
			planned += len(cands)
			setWindow(s, g)
			jobs, refused := s.admit(s.opts.Now(), cands)
			for _, j := range jobs {
				admitted[j.t] = true
			}
			for _, j := range refused {
				back[j.t] = r + 1 + int(s.turnWait(j.t, &s.one, j.ahead)/tick)
			}
		}
		if len(admitted) != n {
			rt.Fatalf("after %d rounds of %d places, %d of %d tenants never admitted", rounds, g, n-len(admitted), n)
		}
		if n >= 20*g && planned >= n*rounds/2 {
			rt.Fatalf("%d calls planned in %d rounds of %d tenants: the waits saved less than half", planned, rounds, n)
		}
	})
}

// TestDroppedWorkGivesBackItsRoom: work dropped as Run ends (drop) gives
// back the room admit took for its calls and unlocks its tenants. The room
// stayed taken for good, which shrank the window of a Syncer whose Run
// was started again (or whose refills went on) by that many calls.
func TestDroppedWorkGivesBackItsRoom(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		n := rapid.IntRange(1, 40).Draw(rt, "tenants")
		s, tenants := admitRig(rt, n, quota.Quota{Rate: 10, Burst: 10})
		defer s.Close()
		setWindow(s, rapid.IntRange(1, 60).Draw(rt, "window"))
		var cands []job
		for _, tn := range tenants {
			tn.mu.Lock() // as the round plans the call
			cands = append(cands, job{t: tn, read: rapid.IntRange(0, 9).Draw(rt, "read") == 0})
		}
		jobs, refused := s.admit(s.opts.Now(), cands)
		for _, j := range refused {
			j.t.mu.Unlock()
		}
		s.drop(&nodeWork{node: &s.one, jobs: jobs}, s.opts.Now())
		if _, inFlight, _ := s.one.budget.state(); inFlight != 0 {
			rt.Fatalf("%d calls of %d admitted dropped: %d still in flight, want 0", len(jobs), n, inFlight)
		}
		for _, tn := range tenants {
			if !tn.mu.TryLock() {
				rt.Fatalf("tenant %s still locked after its call was dropped", tn.name)
			}
			tn.mu.Unlock()
		}
	})
}

// TestAdmitPutsShareAsksFirst: under a window of g places, asks for a
// rate share go ahead of the turns, up to half of the places, and the
// turns still reach every tenant: with the same calls planned every round,
// each tenant is admitted within ceil(n / ceil(places/2)) + 1 rounds.
func TestAdmitPutsShareAsksFirst(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		s, tenants, g := drawAdmitRig(rt)
		defer s.Close()
		n := len(tenants)
		var cands []job
		asks := 0
		for _, tn := range tenants {
			j := job{t: tn}
			if rapid.IntRange(0, 2).Draw(rt, "ask") == 0 {
				j.share = lease.ShareAsk
				asks++
			}
			cands = append(cands, j)
		}
		rounds := (n+(g+1)/2-1)/((g+1)/2) + 1
		seen := map[*Tenant]bool{}
		for round := range rounds {
			setWindow(s, g)
			jobs, refused := s.admit(s.opts.Now(), slices.Clone(cands))
			if len(jobs) != min(g, n) || len(jobs)+len(refused) != n {
				rt.Fatalf("round %d: %d admitted and %d refused of %d planned, window %d", round, len(jobs), len(refused), n, g)
			}
			admittedAsks := 0
			for _, j := range jobs {
				seen[j.t] = true
				if j.share == lease.ShareAsk {
					admittedAsks++
				}
			}
			if want := min(asks, g/2); admittedAsks < want {
				rt.Fatalf("round %d: %d asks for a share admitted of %d, want %d at least (window %d)", round, admittedAsks, asks, want, g)
			}
		}
		if len(seen) != n {
			rt.Fatalf("after %d rounds of %d places, %d of %d tenants never admitted", rounds, g, n-len(seen), n)
		}
	})
}
