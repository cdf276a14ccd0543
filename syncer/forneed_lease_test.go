package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestRefillOfALeaseKeepsTheWholeAsk: a starved tenant's calls made by
// waiting requests (refills) whose ask is the lease's, not a request's
// need (a request of one token short of a lease of its share of the
// burst), hold the next call back for the whole ask after a partial
// grant, as a round's do (TestScarceAsksForItsShareOfTheBurst): about
// Rate/Burst calls a second. Only an ask raised to the request's need is
// counted less what it got (Action.ForNeed).
func TestRefillOfALeaseKeepsTheWholeAsk(t *testing.T) {
	const instances = 16
	lim := quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 100, LeaseTTL: time.Second}
	share := lim.Rate / instances
	capacity := float64(lim.Burst) * share / lim.Rate
	r := newRig(Config{}, lim, "scarce")
	r.refills = true
	credit := capacity
	last := r.now
	forNeed := 0
	r.grant = func(want int64) (lease.Grant, bool) {
		credit = min(capacity, credit+share*r.now.Sub(last).Seconds())
		last = r.now
		g := min(want, int64(credit))
		credit -= float64(g)
		return lease.Grant{Granted: g, Tokens: 0.5, Instances: instances, Share: share, ServerTime: r.now}, true
	}
	r.run(3*share, 20*time.Second, tick, func(a Action) {
		if a.Acquire > 0 && a.ForNeed > 0 {
			forNeed++
		}
	})
	r.checkHeld(t)
	perSec := float64(r.calls) / 20
	t.Logf("%d calls (%.2f/s), %d marked for a request's need, %d tokens acquired", r.calls, perSec, forNeed, r.acquired)
	if perSec > 1.5*lim.Rate/float64(lim.Burst) {
		t.Errorf("%.2f calls a second, want about Rate/Burst = %.2f", perSec, lim.Rate/float64(lim.Burst))
	}
}
