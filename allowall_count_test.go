package leasequota_test

import (
	"context"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestAllowAllCounts holds the decisions count's doc (Stats.Decisions,
// docs/metrics.md) to the code: an AllowAll of k tenants that admits
// counts k admissions, one per tenant (ReasonLeased here, each from its
// lease); one that denies counts one denial, under its Decision's Reason,
// and no admission for the tenants before the one that denied.
func TestAllowAllCounts(t *testing.T) {
	l := newLimiter(t, setup(t), leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		if tenant == "scarce" {
			return leasequota.Quota{Rate: 0.001, Burst: 1}
		}
		return leasequota.Quota{Rate: 10, Burst: 100, MinLease: 20}
	}))
	ctx := context.Background()
	for _, tenant := range []string{"a", "b", "c"} {
		if !l.Allow(tenant) {
			t.Fatalf("%s: first request denied", tenant)
		}
	}
	before := l.Stats().Decisions
	if d := l.AllowAll(ctx, 1, "a", "b", "c"); !d.Allowed {
		t.Fatalf("AllowAll of 3: %+v, want admitted", d)
	}
	after := l.Stats().Decisions
	if allowed, denied := decisionsDelta(before, after); allowed != 3 || denied != 0 || after[leasequota.ReasonLeased].Allowed-before[leasequota.ReasonLeased].Allowed != 3 {
		t.Errorf("AllowAll of 3 admitted: counted %d admissions and %d denials, want 3 leased and 0 (%v -> %v)", allowed, denied, before, after)
	}
	if !l.Allow("scarce") {
		t.Fatal("scarce: its one token denied")
	}
	before = l.Stats().Decisions
	d := l.AllowAll(ctx, 1, "a", "b", "scarce")
	if d.Allowed || d.Tenant != "scarce" {
		t.Fatalf("AllowAll with scarce spent: %+v, want denied by scarce", d)
	}
	after = l.Stats().Decisions
	if allowed, denied := decisionsDelta(before, after); allowed != 0 || denied != 1 || after[d.Reason].Denied-before[d.Reason].Denied != 1 {
		t.Errorf("AllowAll of 3 denied (%v): counted %d admissions and %d denials, want 0 and 1 %v (%v -> %v)", d.Reason, allowed, denied, d.Reason, before, after)
	}
}
