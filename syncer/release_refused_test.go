package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestRefusedReturnIsForfeited: a return that the open circuit breaker
// refuses (Redis down for calls in a row) was never sent, so its tokens
// are lost to the bucket: forfeited, as a return that fails. Counted
// neither returned nor forfeited, they read as spent
// (TokensSpent = granted - returned - forfeited - held).
func TestRefusedReturnIsForfeited(t *testing.T) {
	now, advance, _, _, _ := MemstorePair(t)
	fs := faultstore.New(memstore.New(memstore.WithClock(now)))
	view, err := fs.Instance("mine", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s := New(view, Options{Planner: NewPlanner(Config{Interval: time.Minute}, 1), Now: now, Driven: true, IdleTimeout: time.Hour})
	defer s.Close()
	q := quota.Quota{Rate: 0.001, Burst: 10, MinLease: 4, MaxLease: 4, LeaseTTL: time.Minute}
	x, err := s.Track("x", q)
	if err != nil {
		t.Fatal(err)
	}
	refillNow(t, s, x, 4)
	if x.Held() != 4 {
		t.Fatalf("x holds %d, want 4", x.Held())
	}
	fs.SetDown(nil)
	// Lease calls fail in a row until the breaker opens.
	for i := 0; !s.Degraded(); i++ {
		if i == 10 {
			t.Fatalf("the breaker did not open after %d failed calls", i)
		}
		y, err := s.Track("y"+string(rune('a'+i)), q)
		if err != nil {
			t.Fatal(err)
		}
		s.Refill(context.Background(), y, 1)
		s.Refills(context.Background())
		s.Deliver()
	}
	before := s.Stats()
	made, _ := fs.Calls(faultstore.OpRelease)
	advance(2 * time.Minute) // x's lease is over
	s.Tick(context.Background())
	after := s.Stats()
	madeAfter, _ := fs.Calls(faultstore.OpRelease)
	expired := after.Expired - before.Expired
	gone := after.Returned - before.Returned + after.Forfeited - before.Forfeited
	t.Logf("expired %d, returned+forfeited %d, release calls made %d", expired, gone, madeAfter-made)
	if expired != 4 {
		t.Fatalf("expired %d, want x's 4", expired)
	}
	if gone != expired {
		t.Errorf("of %d expired tokens %d were counted returned or forfeited; the breaker refused their return: want all forfeited", expired, gone)
	}
}
