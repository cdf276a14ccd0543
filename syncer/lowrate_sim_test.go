package syncer_test

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestSimLowRateTenantCalls: issue #16's low-rate shape, one tenant of
// Rate 20 and Burst 40 over 4 instances, each offered 3x its share, for a
// simulated minute. A scarce instance waits for the bucket and then
// takes a worthwhile lease; it must not come back for top-ups of two or
// three tokens. Before the planner kept such an instance scarce (Granted:
// the bucket was left with less than the grant) and held back its
// scheduled top-ups below half its lease target (Plan), it made 108.4
// script calls per 1,000 decisions here; with them, 83.4; with leases
// of low-rate tenants sized in time as well (worthwhileLease), 71.1 (the
// issue's goal is 80); 73.4 with a new tenant's demand estimated as its
// mean so far (Planner.seen: this minute-long run has little of a start),
// at 97.9-98.8 % of Burst + Rate·T throughout.
func TestSimLowRateTenantCalls(t *testing.T) {
	t.Parallel()
	tn := simTenant{name: "low20", lim: quota.Quota{Rate: 20, Burst: 40, MinLease: 1, MaxLease: 40, LeaseTTL: time.Second},
		demand: constant(3), maxN: 1, overQuota: true}
	cfg := simConfig{
		seed:      11,
		instances: 4,
		tenants:   []simTenant{tn},
		duration:  time.Minute,
		step:      time.Millisecond,
		faults:    simFaults{maxDelay: time.Millisecond},
		windows:   []time.Duration{time.Second},
	}
	st := newSim(cfg).run()
	report(t, cfg, st)
	if st.violations > 0 {
		t.Fatalf("%d violations of the invariant; first %s", st.violations, st.firstViolation)
	}
	perK := 1000 * float64(st.scripts[0]) / float64(st.demanded[0])
	util := float64(st.admitted[0]) / (float64(tn.lim.Burst) + tn.lim.Rate*cfg.duration.Seconds())
	t.Logf("%.1f script calls per 1,000 decisions, %.1f%% of Burst + Rate·T admitted", perK, 100*util)
	if perK > 80 {
		t.Errorf("%.1f script calls per 1,000 decisions, want at most 80", perK)
	}
	if util < 0.95 {
		t.Errorf("%.1f%% of Burst + Rate·T admitted, want at least 95%%", 100*util)
	}
}
