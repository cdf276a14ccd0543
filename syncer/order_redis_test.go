package syncer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// TestReturnAfterRefillOvertookRound is the reported over-credit, through
// the Syncer on a real Redis (B = 100, r = 1000/s). A round reads its
// clock, and while it walks its tenants an urgent refill for one of them
// runs (its clock read later) and takes 40 tokens from the full bucket.
// The bucket refills to 100, another instance takes 95, and then the round
// reaches the tenant, which a request found short, and its call takes the
// few tokens left. Every token goes back (ReleaseAll). Had the refill's 40
// never been granted, the bucket would have lost them to the cap when it
// refilled, so at most the round's tokens may be credited. A return that
// names the round's grant (it was planned first, but granted last) is
// credited all of them.
func TestReturnAfterRefillOvertookRound(t *testing.T) {
	rdb := redisserver.StartServer(t).Client()
	t.Cleanup(func() { rdb.Close() })
	prefix := redisserver.Prefix(t)
	mine, err := lease.NewClient(rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	other, err := lease.NewClient(rdb, prefix) // another instance
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const name = "overtaken"
	lim := quota.Quota{Rate: 1000, Burst: 100, MinLease: 1, MaxLease: 40, LeaseTTL: time.Minute}
	planner := syncer.NewPlanner(syncer.Config{}, 1)
	// The refill reads a clock 10 ms ahead of the round's, so that their
	// stamps differ even when both run within a millisecond.
	var ahead atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(ahead.Load())) }
	// Calls get 10 s, not the default half interval (50 ms): the refill
	// is the first script call on a new server (NOSCRIPT, then EVAL),
	// and on a loaded machine it timed out, the test then showing nothing.
	s := syncer.New(mine, syncer.Options{Planner: planner, Now: now, CallTimeout: 10 * time.Second})
	tn, err := s.Track(name, lim)
	if err != nil {
		t.Fatal(err)
	}

	var refilled, othersTook int64
	overtaken := func(yield func(*syncer.Tenant) bool) {
		// The round has read its clock: the refill runs before it reaches
		// the tenant.
		ahead.Store(int64(10 * time.Millisecond))
		select {
		case r := <-s.Refill(ctx, tn, 40):
			if r.Err != nil {
				t.Errorf("refill: %v", r.Err)
				return
			}
		case <-ctx.Done():
			t.Error("refill: no answer")
			return
		}
		refilled = s.Stats().Granted
		// The bucket refills to full (40 ms at this rate), and the other
		// instance takes 95.
		for {
			g, err := other.Acquire(ctx, name, quota.Bucket(lim), 0)
			if err != nil {
				t.Errorf("reading the bucket: %v", err)
				return
			}
			if g.Tokens >= float64(lim.Burst) {
				break
			}
			time.Sleep(time.Millisecond) // poll; ctx bounds it
		}
		g, err := other.Acquire(ctx, name, quota.Bucket(lim), 95)
		if err != nil {
			t.Errorf("the other instance's acquire: %v", err)
			return
		}
		othersTook = g.Granted
		// A request finds the tenant short: the round asks for more.
		tn.NoteMiss(60)
		yield(tn)
	}
	s.Round(ctx, overtaken)
	if t.Failed() {
		return
	}
	checkOvertakenReturns(t, ctx, s, refilled, othersTook)
}

// checkOvertakenReturns is the second half of the overtaken-round
// scenario (TestReturnAfterRefillOvertookRound on Redis,
// TestSyncerOnMemstore on the in-process store): after the round, it
// checks the premise (the refill took 40, the other instance 95, the
// round some), returns everything, and checks that no more than the
// round's own tokens were credited: the refill's would have been lost to
// the cap.
func checkOvertakenReturns(t *testing.T, ctx context.Context, s *syncer.Syncer, refilled, othersTook int64) {
	t.Helper()
	fromRound := s.Stats().Granted - refilled
	if refilled != 40 || othersTook != 95 || fromRound <= 0 {
		t.Fatalf("test premise: the refill took %d (want 40), the other instance %d (want 95), the round %d (want > 0)",
			refilled, othersTook, fromRound)
	}
	s.Close()
	if err := s.ReleaseAll(ctx); err != nil {
		t.Fatal(err)
	}
	st := s.Stats()
	t.Logf("the refill took %d tokens, the round %d; %d returned, %d credited", refilled, fromRound, refilled+fromRound, st.Returned)
	if st.Returned+st.Forfeited != refilled+fromRound {
		t.Errorf("returned %d tokens (credited %d, forfeited %d), want all %d", st.Returned+st.Forfeited, st.Returned, st.Forfeited, refilled+fromRound)
	}
	if st.Returned > fromRound {
		t.Errorf("credited %d of the %d tokens returned: more than the round's %d, though the refill's %d would have been lost to the cap",
			st.Returned, refilled+fromRound, fromRound, refilled)
	}
}
