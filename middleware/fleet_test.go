package middleware_test

import (
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
