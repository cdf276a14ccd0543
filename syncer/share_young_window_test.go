package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestShareAskYoungnessFollowsRegistrationNotSharePeriod: the cap of a
// young tenant's ask (lease.ShareTerms.Instances, the most instances Redis
// reported on any tenant here) is there because a fleet's instances
// register one by one at the start: each registers with its first lease
// call, and stays counted for a registry window of lease lifetimes
// (RegistryWindow). With rate shares on the limiter's Config.Window is
// max(that, 2 × SharePeriod), so with a long period a tenant stays
// "young" for two periods: a tenant on 2 instances of a fleet where some
// other tenant is on 64 asks for a sixty-fourth of its rate an hour after
// it arrived (period 1 h, lease TTL 1 s), and the share so granted lasts
// up to 1.5 periods more.
func TestShareAskYoungnessFollowsRegistrationNotSharePeriod(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	const period = time.Hour
	window := max(RegistryWindow(shareQuota.LeaseTTL, 100*time.Millisecond, 0), 2*period) // as limiter.go sets it
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: period, Window: window}, 1)
	st := &State{}
	p.Init(st, "t", now.Add(-time.Hour))
	for i := range 50 {
		p.observe(st, now.Add(-5*time.Second+time.Duration(i)*100*time.Millisecond).UnixNano(), 30)
	}
	st.flags |= flagGranted | flagScarce
	st.instances = 2
	a := p.Plan(st, shareQuota, now, Input{Urgent: true, Need: 1, Missed: 30, Fleet: 64})
	if a.Share != lease.ShareAsk {
		t.Fatalf("scarce tenant's call: %+v, want an ask for a share", a)
	}
	if got := a.ShareTerms.Instances; got != 0 {
		t.Errorf("an ask an hour after the tenant arrived (its 2 instances registered for 3,600 lease lifetimes) names %d instances, want none", got)
	}
}
