package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestShareStopsWhenTheRateFallsInABackoff: a share's accrual stops at
// the first plan that finds the quota's rate below the rate the share was
// granted under, even while the tenant's calls are held back by a failure
// backoff (the circuit breaker refused its renewals: Redis unreachable
// from here). The limiter learns the lower rate without Redis (its
// QuotaFunc's new answer, Rebase), and design.md says the share ends at
// the next plan then; held back, the plan returned before it stopped the
// accrual, and the share went on coming due at the old pace until the
// backoff ended, up to a refresh interval.
func TestShareStopsWhenTheRateFallsInABackoff(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	qOld := quota.Quota{Rate: 1000, Burst: 100, LeaseTTL: time.Second, MaxLease: 100}
	qNew := quota.Quota{Rate: 10, Burst: 10, LeaseTTL: time.Second, MaxLease: 10}
	p := NewPlanner(Config{Interval: time.Second, SharePeriod: 10 * time.Second}, 1)
	st := scarceStateOf(p, "t", now, 3000)
	a := p.Plan(st, qOld, now, Input{Urgent: true, Need: 1, Missed: 300})
	if a.Share != lease.ShareAsk {
		t.Fatalf("first plan %+v, want a share ask", a)
	}
	g := grantShare(900, now, now.Add(8*time.Second))
	p.Granted(st, qOld, now, a.Acquire, g, 0)
	p.Shared(st, qOld, a.Share, now, now, g)
	if _, held := st.HeldShare(); !held {
		t.Fatal("no share held")
	}
	fall := now.Add(7 * time.Second)
	var after int64 // share tokens due after the first plan that saw the fall
	refused, seen := 0, false
	for at := now; at.Before(now.Add(8 * time.Second)); at = at.Add(25 * time.Millisecond) {
		q := qOld
		if !at.Before(fall) {
			q = qNew
		}
		a := p.Plan(st, q, at, Input{Urgent: true, Need: 1, Missed: 75})
		p.Expired(st, a.Expire, 0)
		st.ledger.Sync(0) // requests spent everything
		if seen {
			after += a.Drip
		}
		seen = seen || q == qNew
		if a.Calls() {
			// The circuit breaker refuses every call: none is sent.
			st.uncut(a.cut)
			p.Failed(st, at)
			refused++
		}
	}
	if refused == 0 {
		t.Fatal("no call was planned: the test holds no tenant in a backoff")
	}
	t.Logf("%d calls refused; %d share tokens came due after the plan that saw the rate fall to %v", refused, after, qNew.Rate)
	if after != 0 {
		t.Errorf("%d tokens of a share granted under a rate of %v came due after a plan saw the rate fall to %v", after, qOld.Rate, qNew.Rate)
	}
}
