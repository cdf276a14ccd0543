package middleware_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestRateLimitRIsFleetRemaining: RateLimit's r (and X-RateLimit-Remaining)
// is the fleet-wide estimate, Decision.FleetRemaining: the global level
// the lease call left plus this instance's tokens, not the lease alone.
func TestRateLimitRIsFleetRemaining(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.01, Burst: 50, MinLease: 5, MaxLease: 5}))
	var hook hookLog
	srv := serve(t, l, hook.option(), middleware.WithLegacyHeaders())
	want := policy{"default", 50, 5000}
	for i, fleet := range []int64{45 + 4, 45 + 3} {
		res := get(t, srv)
		r := check200(t, res, want)
		d := hook.last(t).d
		if d.Remaining != 4-int64(i) || d.FleetRemaining != fleet || r != fleet {
			t.Fatalf("request %d: r=%d, decision %+v; want r = FleetRemaining = %d (45 in the bucket, %d leased here)",
				i, r, d, fleet, 4-i)
		}
		if v := res.header.Get("X-RateLimit-Remaining"); v != strconv.FormatInt(fleet, 10) {
			t.Fatalf("request %d: X-RateLimit-Remaining %q, want %d", i, v, fleet)
		}
	}
}

// TestPolicyFieldsFollowQuotas: RateLimit-Policy, cached with the quotas
// it describes, changes with them: one policy whose keys have different
// quotas, and two policies (the list cached for the combination).
func TestPolicyFieldsFollowQuotas(t *testing.T) {
	leakCheck(t)
	quotas := map[string]leasequota.Quota{
		"a": {Rate: 1, Burst: 10}, "b": {Rate: 2, Burst: 50},
		"tenant:a": {Rate: 1, Burst: 10}, "tenant:b": {Rate: 2, Burst: 50},
	}
	l := newLimiter(t, leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
		if q, ok := quotas[key]; ok {
			return q
		}
		return leasequota.Quota{Rate: 5, Burst: 5} // ip:...
	}))
	one := serve(t, l, middleware.WithHeaderKey("X-Tenant"))
	two := serve(t, l, stacked()...)
	wantA, wantB, ip := policy{"default", 10, 10}, policy{"default", 50, 25}, policy{"ip", 5, 1}
	for _, tenant := range []string{"a", "b", "a", "b"} {
		want := map[string]policy{"a": wantA, "b": wantB}[tenant]
		check200(t, get(t, one, "X-Tenant", tenant), want)
		res := get(t, two, "X-Tenant", tenant)
		if res.status != http.StatusOK {
			t.Fatalf("two policies, tenant %s: status %d", tenant, res.status)
		}
		want.name = "tenant"
		checkPolicies(t, res, ip, want)
	}
}

// TestPolicyFieldReplaceable: a handler may add to and replace the
// RateLimit-Policy field the middleware set (its value slice is shared by
// responses): the next response carries the middleware's value, intact.
func TestPolicyFieldReplaceable(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 10}))
	const other = `"other";q=1;w=1`
	h := middleware.New(l)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/replace" {
			w.Header().Add("RateLimit-Policy", other)
			if v := w.Header().Values("RateLimit-Policy"); len(v) != 2 || v[1] != other {
				t.Errorf("after Add: RateLimit-Policy %q", v)
			}
			w.Header().Set("RateLimit-Policy", other)
		}
	}))
	for i, path := range []string{"/", "/replace", "/", "/replace", "/"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		if path == "/replace" {
			if v := rec.Header().Values("RateLimit-Policy"); len(v) != 1 || v[0] != other {
				t.Fatalf("response %d: RateLimit-Policy %q, want the handler's", i, v)
			}
		} else if got := parsePolicy(t, rec.Header()); got != (policy{"default", 10, 10}) {
			t.Fatalf("response %d: RateLimit-Policy %+v", i, got)
		}
	}
}
