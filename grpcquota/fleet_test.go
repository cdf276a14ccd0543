package grpcquota_test

import (
	"testing"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// TestRateLimitRIsFleetRemaining: the "ratelimit" metadata's r is the
// fleet-wide estimate, Decision.FleetRemaining: the global level the
// lease call left plus this instance's tokens, not the lease alone.
func TestRateLimitRIsFleetRemaining(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.01, Burst: 50, MinLease: 5, MaxLease: 5}))
	var hook hookLog
	c := serve(t, l, hook.option(), grpcquota.WithRateLimitMetadata())
	for i, fleet := range []int64{45 + 4, 45 + 3} {
		md, err := check(t, c)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		_, d := hook.last(t)
		name, p := sfItem(t, md, grpcquota.MetadataRateLimit)
		if name != "default" || d.Remaining != 4-int64(i) || d.FleetRemaining != fleet || p["r"] != fleet || p["t"] != 0 {
			t.Fatalf("call %d: ratelimit %q, decision %+v; want r = FleetRemaining = %d (45 in the bucket, %d leased here)",
				i, md.Get(grpcquota.MetadataRateLimit), d, fleet, 4-i)
		}
	}
}
