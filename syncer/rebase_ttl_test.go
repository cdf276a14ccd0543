package syncer_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/quota"
)

// TestRebaseShorterLeaseTTLExpiresAQuietTenantsTokens: a quota whose
// LeaseTTL is cut (Rebase) applies to the leased tokens at the next plan,
// as it does for any tenant, a tenant that rounds pass by (quiet.go)
// included. requota let them alone when the rate and burst did not rise,
// and a held-back tenant (its bucket dry) stayed quiet until its batch's
// expiry as reckoned from the old LeaseTTL of a minute: 9 tokens still
// held 3 s after the LeaseTTL was cut to 1 s (tuning.md: a lowered quota
// is in force for admissions after at most LeaseTTL).
func TestRebaseShorterLeaseTTLExpiresAQuietTenantsTokens(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, s := clockedSyncer(t, 0)
	defer s.Close()
	ctx := context.Background()
	q := quota.Quota{Rate: 0.01, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: time.Minute}
	c := tracker(t, s, q)("c")
	if err := (<-s.Refill(ctx, c, 10)).Err; err != nil || c.Held() != 10 {
		t.Fatalf("first refill: %v, %d tokens held; want the bucket's 10", err, c.Held())
	}
	c.Spend(1)
	for range 4 {
		clock.Add(25 * time.Millisecond)
		s.Tick(ctx)
		s.Wait()
	}
	q.LeaseTTL = time.Second
	if !s.Rebase(c, q) {
		t.Fatal("Rebase: no change")
	}
	start := clock.Now()
	for clock.Now().Sub(start) < 3*time.Second {
		clock.Add(25 * time.Millisecond)
		s.Tick(ctx)
		s.Wait()
	}
	t.Logf("3 s after the LeaseTTL was cut to 1 s: %d tokens held, Stats %+v", c.Held(), s.Stats())
	if c.Held() != 0 {
		t.Errorf("%d tokens leased more than 3 s ago still held, with a LeaseTTL of 1 s", c.Held())
	}
}
