package leasequota_test

import (
	"context"
	"errors"
	"testing"

	"github.com/leasequota/leasequota"
)

// TestClosedDecisionTenant holds Decision.Tenant's doc to the code on a
// closed limiter: AllowN, and AllowAll or WaitAll of one tenant (which are
// AllowN and WaitN), name the tenant; AllowAll and WaitAll of several
// name none (ReasonClosed, Tenant empty: no tenant decided), as
// docs/policies.md's table of bad input and the gRPC interceptors' and
// HTTP middleware's "none decided (the Limiter closed)" say.
func TestClosedDecisionTenant(t *testing.T) {
	l := newLimiter(t, setup(t), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
	ctx := context.Background()
	if !l.Allow("a") || !l.Allow("b") {
		t.Fatal("not admitted before Close")
	}
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	check := func(what string, d leasequota.Decision, err error, waits bool, want string) {
		t.Helper()
		if d.Allowed || d.Reason != leasequota.ReasonClosed || d.Tenant != want {
			t.Errorf("%s after Close: allowed %v, reason %v, tenant %q; want a denial, closed, tenant %q", what, d.Allowed, d.Reason, d.Tenant, want)
		}
		if waits && !errors.Is(err, leasequota.ErrClosed) {
			t.Errorf("%s after Close: error %v, want ErrClosed", what, err)
		}
	}
	check("AllowN", l.AllowN(ctx, "a", 1), nil, false, "a")
	check("AllowAll of one", l.AllowAll(ctx, 1, "a"), nil, false, "a")
	d, err := l.WaitAll(ctx, 1, "a")
	check("WaitAll of one", d, err, true, "a")
	check("AllowAll of two", l.AllowAll(ctx, 1, "a", "b"), nil, false, "")
	d, err = l.WaitAll(ctx, 1, "a", "b")
	check("WaitAll of two", d, err, true, "")
}
