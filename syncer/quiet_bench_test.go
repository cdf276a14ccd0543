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

// BenchmarkTickHeldBack is one scheduled round (Tick) over 10,000
// tenants that are all over-demanded, their buckets drained and their next
// calls held back while their shares accrue or until their turns, the state most of a
// saturated fleet's tenants are in most of the time; each tick, requests
// have missed on every one of them. ns/tenant is the round's cost per
// tenant; a round makes no call. The store is the in-process model, and
// time is a fake clock that does not move, so every tick finds the same.
func BenchmarkTickHeldBack(b *testing.B) {
	const tenants = 10_000
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		b.Fatal(err)
	}
	s := syncer.New(view, syncer.Options{Planner: syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1), Now: now})
	ctx := context.Background()
	q := quota.Quota{Rate: 10, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: 10 * time.Second}
	all := make([]*syncer.Tenant, tenants)
	for i := range all {
		if all[i], err = s.Track(fmt.Sprintf("tenant-%05d", i), q); err != nil {
			b.Fatal(err)
		}
	}
	// Lease each bucket dry, spend it, and miss, tick after tick (the call
	// budget's window lets the first calls through a few hundred at a
	// time), until a tick, the clock standing, makes no call: every
	// tenant's next call is held back, by its bucket or its turn.
	calls := s.Stats().Calls
	for i := 0; ; i++ {
		if i == 4000 {
			b.Fatalf("tenants still calling after %d ticks", i)
		}
		for _, t := range all {
			if h := t.Held(); h > 0 {
				t.Spend(h)
			}
			t.NoteMiss(2)
		}
		clock.Add(int64(25 * time.Millisecond))
		s.Tick(ctx)
		if c := s.Stats().Calls; c != calls {
			calls = c
			continue
		}
		if i > 8 {
			break
		}
	}
	for _, t := range all {
		if !t.Leased() {
			b.Fatalf("%s never leased", t.Name())
		}
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for _, t := range all {
			t.NoteMiss(2)
		}
		s.Tick(ctx)
	}
	b.StopTimer()
	if n := s.Stats().Calls - calls; n != 0 {
		b.Fatalf("%d calls in the held-back ticks", n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/tenants, "ns/tenant")
}
