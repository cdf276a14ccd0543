package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestShareClockStep: a rate share is mapped into the local clock when
// its reply arrives (LocalWindow), and its tokens come due by that clock
// from then on; so a step of the clock moves them. The share here is 25
// a second for 6 s of Redis's clock. A clock stepped forward by 5 s
// 100 ms after the reply makes 125 tokens come due at once, where the
// share had accrued 5 in Redis (the rest of the rate went on refilling
// the bucket for the other instances): more than the bound allows over
// those 200 ms. Stepped back by 30 s, the tokens still to come come due
// 30 s late, after Redis ended the share and refills the bucket at the
// whole rate again.
// Why the Limiter's clock (Options.Now) must not step.
func TestShareClockStep(t *testing.T) {
	for _, step := range []time.Duration{0, 5 * time.Second, -30 * time.Second} {
		now := time.Unix(1_000_000, 0)
		p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
		st := scarceState(p, now, 300)
		a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30})
		if a.Share != lease.ShareAsk {
			t.Fatalf("%+v, want an ask", a)
		}
		// Redis's clock is the local one (before the step), the call runs
		// and its reply arrives at once.
		g := grantShare(25, now, now.Add(6*time.Second))
		p.Granted(st, shareQuota, now, a.Acquire, g, 0)
		p.Shared(st, shareQuota, a.Share, now, now, g)
		var early, late, dripped int64 // tokens due before Redis accrued them; after the share ended; in all
		for redis := now; redis.Before(now.Add(40 * time.Second)); redis = redis.Add(50 * time.Millisecond) {
			local := redis
			if redis.Sub(now) >= 100*time.Millisecond {
				local = local.Add(step)
			}
			a := p.Plan(st, shareQuota, local, Input{Urgent: true, Need: 1, Missed: 5})
			p.Expired(st, a.Expire, 0)
			st.ledger.Sync(0) // requests spent everything
			if a.Calls() {
				break // the renewal: the share's accrual stopped
			}
			accrued := 25 * redis.Sub(now).Seconds()
			if a.Drip > 0 && redis.After(g.RateShare.Until) {
				late += a.Drip
			}
			dripped += a.Drip
			if float64(dripped) > accrued+1e-9 {
				early = max(early, int64(float64(dripped)-accrued))
			}
		}
		t.Logf("step %v: up to %d tokens came due before the share accrued them in Redis, %d after it ended", step, early, late)
		switch {
		case step == 0 && (early > 0 || late > 0):
			t.Errorf("without a step: %d tokens early, %d late", early, late)
		case step > 0 && early < 100:
			t.Errorf("stepped forward by %v: %d tokens early, want the step's 125 less the 5 accrued", step, early)
		case step < 0 && late == 0:
			t.Errorf("stepped back by %v: no token came due after the share ended", -step)
		}
	}
}
