package bucket

import "testing"

// TestFailedSplitSpendIgnoresPutBack: a spend of more tokens than a split
// counter can spend fails without moving any, whatever failed spends put
// back meanwhile (slot.back): those are counted (Load) but not spendable
// until Restore. Counted towards the spend's n, a spend of more than the
// spendable tokens but no more than those and the put-back gathered every
// spendable token and put them back too, where no request could spend
// them until the syncer's next plan restored them: the requests of one
// token after it were denied with tokens held.
func TestFailedSplitSpendIgnoresPutBack(t *testing.T) {
	var c Counter
	c.Stripe(4)
	c.Add(8)
	c.Spread()
	// What a failed gather that lost a race put back (trySpendSplit).
	(*c.slots.Load())[0].back.Store(6)
	if got := c.Load(); got != 14 {
		t.Fatalf("Load() = %d, want 14 (8 spendable, 6 put back)", got)
	}
	if ok, _ := c.TrySpendFrom(1, 10); ok {
		t.Fatal("a spend of 10 with 8 spendable tokens succeeded")
	}
	if b := c.Back(); b != 6 {
		t.Errorf("Back() = %d after a failed spend of 10, want the 6 put back before: it moved %d spendable tokens there", b, b-6)
	}
	for i := range 8 {
		if ok, _ := c.TrySpendFrom(i, 1); !ok {
			t.Fatalf("spend %d of 1 token of the 8 spendable before the failed spend: denied", i+1)
		}
	}
}
