package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestRaisedQuotaLiftsTheHold: a tenant starved at 0.01 tokens a second
// is held back for the old rate's refill (minutes); its quota is raised
// to 1,000 a second, by an override the quota re-read brings or by a new
// base quota (Rebase), and a request is admitted within a second. The
// hold, reckoned from the old rate, kept it from calling: nothing was
// admitted for a minute, though a change applies within a poll and two
// rounds. A tick between the hold and the raise left the tenant quiet
// until the old hold's end (30 s here, IdleTimeout/2 at most), and rounds
// passed it by.
func TestRaisedQuotaLiftsTheHold(t *testing.T) {
	for _, how := range []string{"override", "Rebase"} {
		t.Run(how, func(t *testing.T) {
			now, advance, _, mine, other := MemstorePair(t)
			ctx := context.Background()
			q := quota.Quota{Rate: 0.01, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second}
			s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
			t.Cleanup(s.Close)
			tn, err := s.Track("t", q)
			if err != nil {
				t.Fatal(err)
			}
			// Another instance drains the bucket: this one's call finds
			// it dry and holds back for its refill.
			if _, err := other.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: quota.Bucket(q), Want: 10, Demand: 1}}, nil); err != nil {
				t.Fatal(err)
			}
			advance(time.Millisecond)
			tn.NoteMiss(1)
			refillNow(t, s, tn, 1)
			if held := tn.lease.Load().st.NotBefore().Sub(now()); held < time.Minute {
				t.Fatalf("after the dry grant: held back %v, want the old rate's refill (minutes)", held)
			}
			// Ticks plan the held tenant: quiet until the old hold ends.
			s.Tick(ctx)
			advance(25 * time.Millisecond)
			s.Tick(ctx)
			if how == "Rebase" {
				raised := q
				raised.Rate, raised.Burst, raised.MaxLease = 1000, 1000, 500
				s.Rebase(tn, raised)
			} else if _, err := other.SetOverride(ctx, "t", quota.Bucket(q), lease.Override{Rate: 1000, Burst: 1000}); err != nil {
				t.Fatal(err)
			}
			start := now()
			for i := 0; ; i++ { // a request each tick, missing until admitted
				if i == 40*60 {
					t.Fatalf("no request admitted in the minute after the rate went from 0.01 to 1,000 a second")
				}
				advance(25 * time.Millisecond)
				if ok, _ := tn.Spend(1); ok {
					if d := now().Sub(start); d > time.Second {
						t.Errorf("the first request admitted %v after the quota was raised, want within a second", d)
					}
					break
				}
				s.NoteMiss(tn, 1)
				s.Tick(ctx)
				s.Urgent(ctx)
			}
		})
	}
}
