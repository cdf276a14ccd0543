package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// BenchmarkRoundWindowCut is one round over 2,000 tenants that each plan a
// call, with room for 16 in the call budget's window: the state of a
// saturated fleet's rounds, which refuse most of what they plan
// (admit). Between rounds the clock moves past every hold, and every
// tenant spends what it got and misses, so each round plans 2,000 calls
// again. The store is the in-process model.
func BenchmarkRoundWindowCut(b *testing.B) {
	const tenants, room = 2000, 16
	now := time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	view, err := memstore.New(memstore.WithClock(clock)).Instance("me", time.Second)
	if err != nil {
		b.Fatal(err)
	}
	s := New(view, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: clock})
	round := spendingRounds(b, s, &now, tenants, room)
	for range 4 {
		round()
	}
	held := s.Stats().HeldBack
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		round()
	}
	b.StopTimer()
	refused := float64(s.Stats().HeldBack-held) / float64(b.N)
	if refused < tenants/2 {
		b.Fatalf("%.0f calls refused a round, want most of %d", refused, tenants)
	}
	b.ReportMetric(refused, "refused/round")
}
