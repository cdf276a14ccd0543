package leasequota_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestDeniedAllowAllUncountsModeAdmissions: a denied AllowAll is one
// decision, a denial. An admission by a tenant's failure mode on the way
// (FailOpen, Redis down) stayed counted besides it: Stats showed a
// fail_open admission and an unavailable denial for one denied call.
func TestDeniedAllowAllUncountsModeAdmissions(t *testing.T) {
	store := faultySetup(t)
	quotas := map[string]leasequota.Quota{
		"open":   {Rate: 100, Burst: 20, FailureMode: leasequota.FailOpen},
		"closed": {Rate: 100, Burst: 20, FailureMode: leasequota.FailClosed},
	}
	l := newLimiter(t, store, leasequota.WithRefreshInterval(20*time.Millisecond),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quotas[tenant] }))
	store.SetDown(nil)
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for tenant := range quotas {
		for l.AllowN(ctx, tenant, 1).Mode == leasequota.FailDefault {
			if time.Now().After(deadline) {
				t.Fatalf("%s not degraded", tenant)
			}
			time.Sleep(time.Millisecond)
		}
	}
	before := l.Stats().Decisions
	d := l.AllowAll(ctx, 1, "open", "closed")
	after := l.Stats().Decisions
	if d.Allowed || d.Reason != leasequota.ReasonUnavailable {
		t.Fatalf("AllowAll = %+v, want denied by closed's FailClosed", d)
	}
	var allowed, denied int64
	for r, o := range after {
		allowed += o.Allowed - before[r].Allowed
		denied += o.Denied - before[r].Denied
	}
	if allowed != 0 || denied != 1 {
		t.Errorf("one denied AllowAll counted %d admissions and %d denials, want 0 and 1 (before %v, after %v)", allowed, denied, before, after)
	}
}
