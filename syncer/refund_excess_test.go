package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestRefundKeepsNoExcess: tokens the counter holds beyond what the ledger
// accounts for (a failed split spend that gathered them put them back after
// the plan that counted them spent and expired their batch,
// bucket.Counter.trySpendSplit) are forfeited by the next plan. A refund
// credited in between gave the ledger's oldest batch the whole difference
// between counter and ledger, the excess with the refund: the next plan
// found none to forfeit, and tokens of the batch that had expired lived on
// as the younger batch's, up to a lease lifetime past their own.
func TestRefundKeepsNoExcess(t *testing.T) {
	s, tn, _, advance := drivenTenant(t, Config{Interval: 100 * time.Millisecond}, "x", quota.Quota{Rate: 0.001, Burst: 20, MinLease: 5, MaxLease: 5, LeaseTTL: time.Second})
	ctx := context.Background()
	refillNow(t, s, tn, 5) // A
	advance(500 * time.Millisecond)
	refillNow(t, s, tn, 10) // B
	if got := tn.Held(); got != 10 {
		t.Fatalf("held %d, want two batches of 5", got)
	}
	advance(550 * time.Millisecond) // A's lease is over, B's is not
	// A spend of 4 on a split counter gathers 3 tokens, then falls short:
	// they are out of every count meanwhile.
	if ok, _ := tn.tokens.TrySpend(3); !ok {
		t.Fatal("gathering 3 failed")
	}
	s.Tick(ctx) // counts the 3 spent from A; A's other 2 expire
	front, clock := tn.Front(), s.Clock()
	if ok, _ := tn.Spend(1); !ok { // an admission, refunded below
		t.Fatal("the spend of 1 failed")
	}
	advance(10 * time.Millisecond)
	s.Tick(ctx)      // counts it spent from B
	tn.tokens.Add(3) // the failed spend puts its 3 of A back
	if got := s.Refund(tn, 1, front, clock); got != RefundCredited {
		t.Fatalf("Refund: %v, want RefundCredited", got)
	}
	advance(10 * time.Millisecond)
	s.Tick(ctx) // must forfeit A's 3
	spent := 0
	for {
		if ok, _ := tn.Spend(1); !ok {
			break
		}
		spent++
	}
	if spent > 5 {
		t.Errorf("%d tokens spent after A's lease ended and the plans since; only B's 5 were alive", spent)
	}
}
