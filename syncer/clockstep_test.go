package syncer_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// steppedRig is a driven Syncer whose clock (Options.Now) is the store's
// plus an offset the test steps, as a wall clock that NTP or an operator
// steps: the store's clock, another machine's, never steps.
type steppedRig struct {
	s      *syncer.Syncer
	mem    *memstore.Store
	store  *recordingStore
	clock  atomic.Int64 // the store's: unix ns
	offset atomic.Int64 // the syncer's clock less the store's
}

func newSteppedRig(t *testing.T) *steppedRig {
	r := &steppedRig{}
	r.clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	r.mem = memstore.New(memstore.WithClock(r.storeNow))
	view, err := r.mem.Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	r.store = &recordingStore{Store: view}
	r.s = syncer.New(r.store, syncer.Options{
		Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:     func() time.Time { return time.Unix(0, r.clock.Load()+r.offset.Load()) },
		Driven:  true,
	})
	t.Cleanup(r.s.Close)
	return r
}

func (r *steppedRig) storeNow() time.Time { return time.Unix(0, r.clock.Load()) }

// run moves both clocks on by d in ticks of 25 ms, the syncer ticking at
// each, and calls each (if not nil) after every tick.
func (r *steppedRig) run(d time.Duration, each func()) {
	ctx := context.Background()
	for end := r.clock.Load() + int64(d); r.clock.Load() < end; {
		r.clock.Add(int64(25 * time.Millisecond))
		r.s.Tick(ctx)
		if each != nil {
			each()
		}
	}
}

// stepBacks are the steps of the tests below: none, an NTP step, an
// operator's mistake, and steps across the 12.4 days after which a
// State's stamps are rebased and the 24.8 days of a stamp's range.
var stepBacks = []time.Duration{0, 30 * time.Second, 10 * time.Minute, 48 * time.Hour, 13 * 24 * time.Hour, 30 * 24 * time.Hour}

// TestSyncerClockStepBackKeepsLeases is why the syncer's clock
// (Options.Now) must not step: it times the lease lifetime, so a clock
// stepped back by d after a grant keeps the lease's tokens spendable for
// d more, past the LeaseTTL after which the window bound counts them
// spent or gone (docs/design.md, "The invariant"). The Limiter gives the
// syncer a clock that does not step (internal/monoclock). The
// store's clock here never steps: 3 s after the grant of a lease with a
// TTL of 1 s, none of it may be left; with a step back of 30 s, 10
// minutes, 2 or 13 days it all is. Past 24.8 days the stamps' rebase
// wraps them to the far past, and the tokens expire at once.
func TestSyncerClockStepBackKeepsLeases(t *testing.T) {
	q := quota.Quota{Rate: 1, Burst: 1000, MinLease: 50, MaxLease: 100, LeaseTTL: time.Second}
	for _, d := range stepBacks {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			r := newSteppedRig(t)
			tn, err := r.s.Track("t", q)
			if err != nil {
				t.Fatal(err)
			}
			refill(t, r.s, tn, 1)
			held := tn.Held()
			if held < q.MinLease {
				t.Fatalf("held %d after the refill, want at least %d", held, q.MinLease)
			}
			r.offset.Add(-int64(d))
			r.run(3*time.Second, nil) // 3 lifetimes of the store's clock
			left := tn.Held()
			t.Logf("step back %v: %d of %d leased tokens left 3 s after the grant (expired %d)", d, left, held, r.s.Stats().Expired)
			switch {
			case d == 0 || d > 24*24*time.Hour:
				if left != 0 {
					t.Errorf("%d tokens left 3 lease lifetimes after their grant", left)
				}
			default:
				if left != held {
					t.Errorf("%d of %d tokens left: the clock stepped back by %v, its lease lives that much longer", left, held, d)
				}
			}
		})
	}
}

// TestSyncerClockStepBackHoldsTenantBack: a tenant whose bucket ran dry
// waits for it to refill (State.notBefore); a clock stepped back by d
// makes the wait d longer. With a burst of 20 at 20 a second, drained by
// the first lease, a tenant asking for a token every tick is granted
// again within a second or two; stepped back by 30 s or more, it gets
// nothing in the 5 s that follow (whatever the stamps do past 24.8 days:
// the round leaves the tenant alone, quiet until the wait's end,
// Tenant.quietUntil, in unix nanoseconds of the stepped clock).
func TestSyncerClockStepBackHoldsTenantBack(t *testing.T) {
	q := quota.Quota{Rate: 20, Burst: 20, MinLease: 20, MaxLease: 20, LeaseTTL: time.Second}
	for _, d := range stepBacks {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			r := newSteppedRig(t)
			tn, err := r.s.Track("t", q)
			if err != nil {
				t.Fatal(err)
			}
			refill(t, r.s, tn, 20)
			for {
				if ok, _ := tn.Spend(1); !ok {
					break
				}
			}
			spent := int64(0)
			ask := func() {
				r.s.NoteMiss(tn, 1)
				r.s.Urgent(context.Background())
				for {
					ok, _ := tn.Spend(1)
					if !ok {
						break
					}
					spent++
				}
			}
			r.run(100*time.Millisecond, ask) // held back: the bucket refills
			spent = 0
			calls := len(r.store.calls())
			r.offset.Add(-int64(d))
			r.run(5*time.Second, ask)
			t.Logf("step back %v: %d tokens spent in the 5 s after it (%d calls)", d, spent, len(r.store.calls())-calls)
			switch {
			case d == 0:
				if spent < 50 {
					t.Errorf("%d tokens spent in 5 s at 20/s, want most of the refill", spent)
				}
			default:
				if spent != 0 {
					t.Errorf("%d tokens spent: the clock stepped back by %v, the tenant is held back that much longer", spent, d)
				}
			}
		})
	}
}

// refill makes a driven syncer's refill of tn for need tokens and
// delivers it, failing t on an error.
func refill(t *testing.T, s *syncer.Syncer, tn *syncer.Tenant, need int64) {
	t.Helper()
	ctx := context.Background()
	ch := s.Refill(ctx, tn, need)
	s.Refills(ctx)
	s.Deliver()
	if r := <-ch; r.Err != nil {
		t.Fatalf("refill: %v", r.Err)
	}
}

// TestSyncerClockStepBackBreaksWindowBound: the fleet-wide consequence.
// Instance A leases a full bucket (100 tokens at 10 a second, a lease
// lifetime of 1 s) and its clock steps back by 30 s; 20 s later the
// bucket has refilled, instance B (whose clock did not step) leases and
// spends it, and A spends the lease it still holds: 200 tokens in one
// instant, where the window bound allows B + r(W + L) = 100 + 10 x 1.025
// (docs/design.md, "The invariant"). Without the step, A's lease had
// expired long before.
func TestSyncerClockStepBackBreaksWindowBound(t *testing.T) {
	q := quota.Quota{Rate: 10, Burst: 100, MinLease: 100, MaxLease: 100, LeaseTTL: time.Second}
	for _, d := range []time.Duration{0, 30 * time.Second} {
		r := newSteppedRig(t)
		other, err := r.mem.Instance("other", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		b := syncer.New(other, syncer.Options{
			Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 2),
			Now:     r.storeNow,
			Driven:  true,
		})
		t.Cleanup(b.Close)
		ta, err := r.s.Track("t", q)
		if err != nil {
			t.Fatal(err)
		}
		tb, err := b.Track("t", q)
		if err != nil {
			t.Fatal(err)
		}
		refill(t, r.s, ta, 100)
		if ta.Held() != 100 {
			t.Fatalf("A holds %d, want the burst of 100", ta.Held())
		}
		r.offset.Add(-int64(d))
		r.run(20*time.Second, func() { b.Tick(context.Background()) })
		refill(t, b, tb, 100)
		admitted := int64(0)
		for _, tn := range []*syncer.Tenant{ta, tb} {
			for {
				if ok, _ := tn.Spend(1); !ok {
					break
				}
				admitted++
			}
		}
		bound := float64(q.Burst) + q.Rate*(q.LeaseTTL+25*time.Millisecond).Seconds()
		t.Logf("step back %v: %d admitted at one instant 20 s after A's lease, bound %.2f", d, admitted, bound)
		if d == 0 && float64(admitted) > bound {
			t.Errorf("%d admitted at one instant without a step, over the bound %.2f", admitted, bound)
		}
		if d > 0 && admitted != 200 {
			t.Errorf("%d admitted with A's clock stepped back by %v, want A's stale 100 and B's 100", admitted, d)
		}
	}
}

// TestSyncerClockStepForward: a clock stepped forward expires the leases
// it held at once (returned to the bucket, quota lost, never the bound)
// and the tenant goes on: leased again at its next miss, whatever the
// step (across the stamps' rebase at 12.4 days and their range of 24.8
// included). A step of more than the idle timeout (a minute) evicts it
// first; its next request tracks it again.
func TestSyncerClockStepForward(t *testing.T) {
	q := quota.Quota{Rate: 20, Burst: 100, MinLease: 20, MaxLease: 20, LeaseTTL: time.Second}
	for _, d := range []time.Duration{30 * time.Second, 10 * time.Minute, 48 * time.Hour, 13 * 24 * time.Hour, 30 * 24 * time.Hour} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			r := newSteppedRig(t)
			tn, err := r.s.Track("t", q)
			if err != nil {
				t.Fatal(err)
			}
			refill(t, r.s, tn, 20)
			held := tn.Held()
			r.offset.Add(int64(d))
			r.run(25*time.Millisecond, nil)
			if tn.Held() != 0 {
				t.Fatalf("%d of %d tokens held after a step forward of %v past their lease", tn.Held(), held, d)
			}
			st := r.s.Stats()
			spent := int64(0)
			r.run(3*time.Second, func() {
				if tn.Evicted() {
					if tn, err = r.s.Track("t", q); err != nil {
						t.Fatal(err)
					}
				}
				r.s.NoteMiss(tn, 1)
				r.s.Urgent(context.Background())
				for {
					if ok, _ := tn.Spend(1); !ok {
						break
					}
					spent++
				}
			})
			t.Logf("step forward %v: %d of %d tokens expired (%d returned), evicted %d; then %d spent in 3 s at 20/s",
				d, st.Expired, held, st.Returned, st.Evicted, spent)
			if spent < 40 {
				t.Errorf("%d tokens spent in 3 s at 20 a second after the step, want most of the refill", spent)
			}
		})
	}
}
