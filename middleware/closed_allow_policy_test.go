package middleware_test

import (
	"context"
	"net/http"
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestClosedDegradedAllowPolicyField: with DegradedAllow, a closed
// Limiter's requests are passed on without RateLimit; RateLimit-Policy is
// there for a key the Limiter tracked before Close (its Decision carries
// the key's quota), and absent for a key it never tracked, whose quota a
// closed Limiter does not look up (its QuotaFunc, or an override in
// Redis). The docs said every such request had RateLimit-Policy.
func TestClosedDegradedAllowPolicyField(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
	var hook hookLog
	srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Api-Key"), middleware.WithDegradedMode(middleware.DegradedAllow))
	check200(t, get(t, srv, "X-Api-Key", "seen"), policy{"default", 10, 1})
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		key        string
		wantPolicy bool
	}{{"seen", true}, {"unseen", false}} {
		res := get(t, srv, "X-Api-Key", c.key)
		if res.status != http.StatusOK {
			t.Fatalf("%s: status %d, want 200 with DegradedAllow", c.key, res.status)
		}
		if d := hook.last(t).d; d.Reason != leasequota.ReasonClosed {
			t.Fatalf("%s: reason %v, want closed", c.key, d.Reason)
		}
		if v := res.header.Values("RateLimit"); len(v) != 0 {
			t.Errorf("%s: RateLimit %q from a closed Limiter, want none", c.key, v)
		}
		if !c.wantPolicy {
			if v := res.header.Values("RateLimit-Policy"); len(v) != 0 {
				t.Errorf("%s: RateLimit-Policy %q for a key never tracked", c.key, v)
			}
			continue
		}
		if got := parsePolicy(t, res.header); got != (policy{"default", 10, 1}) {
			t.Errorf("%s: RateLimit-Policy %+v", c.key, got)
		}
	}
}
