package grpcquota_test

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// TestRateLimitRAtMostQ: the "ratelimit" metadata's r is at most the q of
// "ratelimit-policy", as the package documentation says, also when this
// instance holds more tokens than the key's Burst: tokens leased before
// SetQuota lowered it stay spendable, and Decision.FleetRemaining, never
// less than Remaining, is then above Burst. It was sent as it was: q=10
// with r=58.
func TestRateLimitRAtMostQ(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 100, MinLease: 60, MaxLease: 60}),
		leasequota.WithRefreshInterval(100*time.Millisecond))
	var hook hookLog
	c := serve(t, l, hook.option(), grpcquota.WithRateLimitMetadata(), grpcquota.WithMetadataKey("x-tenant"))
	if _, err := check(t, c, "x-tenant", "acme"); err != nil {
		t.Fatal(err)
	}
	if _, d := hook.last(t); d.Remaining < 20 {
		t.Fatalf("first decision %+v: want a lease of 60", d)
	}
	if err := l.SetQuota(context.Background(), "acme", leasequota.Quota{Rate: 1, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		md, err := check(t, c, "x-tenant", "acme")
		if err != nil {
			t.Fatal(err)
		}
		if _, d := hook.last(t); d.Quota.Burst == 10 {
			if d.FleetRemaining <= 10 {
				t.Fatalf("decision %+v: want FleetRemaining above the new Burst (tokens leased before)", d)
			}
			_, pol := sfItem(t, md, grpcquota.MetadataPolicy)
			_, rl := sfItem(t, md, grpcquota.MetadataRateLimit)
			if pol["q"] != 10 || rl["r"] != 10 {
				t.Fatalf("ratelimit-policy %q, ratelimit %q; want q=10 and r=10 (at most q)",
					md.Get(grpcquota.MetadataPolicy), md.Get(grpcquota.MetadataRateLimit))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the new quota never applied")
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
}
