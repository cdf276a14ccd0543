package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestRefundAfterReleaseAllIsForfeited: a refund that comes after
// ReleaseAll made the queue's returns (a Refund that passed the limiter's
// closed check as Close began) is forfeited and counted so. It was
// queued for a round that never came: its tokens were lost, counted as
// refunded but neither returned nor forfeited.
func TestRefundAfterReleaseAllIsForfeited(t *testing.T) {
	now, _, _, mine, _ := MemstorePair(t)
	s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true, IdleTimeout: time.Hour})
	tn, err := s.Track("x", quota.Quota{Rate: 10, Burst: 20, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	refillNow(t, s, tn, 5)
	front, clock := tn.Front(), s.Clock()
	if ok, _ := tn.SpendWaited(3); !ok {
		t.Fatal("the spend of 3 failed")
	}
	s.Close()
	if err := s.ReleaseAll(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := s.Stats()
	if got := s.Refund(tn, 3, front, clock); got != RefundForfeited {
		t.Errorf("a refund after ReleaseAll: %v, want RefundForfeited", got)
	}
	after := s.Stats()
	if refunded, forfeited := after.Refunded-before.Refunded, after.Forfeited-before.Forfeited; refunded != 3 || forfeited != 3 {
		t.Errorf("refunded %d, forfeited %d; want 3 and 3", refunded, forfeited)
	}
}
