package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestRefundReturnedComesBackWithTheRefill: a refund made while a lease
// call held the tenant's lock is queued as a return, which a round that
// finds the tenant still locked leaves queued. The tenant's next refill
// makes that return before its acquire, and leases the tokens again,
// although its last call found the bucket dry (it refills in 1,000 s): its
// waiting requests need not wait for a round.
func TestRefundReturnedComesBackWithTheRefill(t *testing.T) {
	s, tn, _ := drivenTenant(t, Config{Interval: time.Minute}, "ip:a", quota.Quota{Rate: 0.001, Burst: 2, MinLease: 2, MaxLease: 2, LeaseTTL: 10 * time.Minute})
	ctx := context.Background()
	refillNow(t, s, tn, 2)
	front, clock := tn.Front(), s.Clock()
	if ok, _ := tn.Spend(2); !ok {
		t.Fatalf("the first lease holds %d tokens, want 2", tn.tokens.Load())
	}
	tn.mu.Lock() // a lease call in flight
	got := s.Refund(tn, 2, front, clock)
	if got != RefundReturned {
		t.Fatalf("Refund while the lock is held: %v, want RefundReturned", got)
	}
	// A round meanwhile leaves the return queued for the tenant's next
	// plan, which makes it before its acquire.
	s.Tick(ctx)
	tn.mu.Unlock()
	if st := s.Stats(); st.Returned+st.Forfeited != 0 {
		t.Fatalf("a round that found the tenant locked made its refund's return: stats %+v", st)
	}
	refillNow(t, s, tn, 2)
	if n := tn.tokens.Load(); n != 2 {
		t.Fatalf("after the refill, ip:a holds %d tokens, want the 2 refunded", n)
	}
	// Credited in whole tokens, rounded down (Redis credits 1.999999999
	// of them): the rest counts as forfeited.
	if st := s.Stats(); st.Returned+st.Forfeited != 2 || st.Returned < 1 || st.Granted != 4 {
		t.Errorf("stats %+v: want the 2 tokens returned (Returned+Forfeited), and 4 granted", st)
	}
	// Made once: a later round has nothing of it to return.
	before := s.Stats().Returned
	s.Tick(ctx)
	if st := s.Stats(); st.Returned != before {
		t.Errorf("a round after the refill returned %d more tokens", st.Returned-before)
	}
	s.Close()
}
