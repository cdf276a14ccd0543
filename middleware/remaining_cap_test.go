package middleware_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestRateLimitRAtMostQ: RateLimit's r (and X-RateLimit-Remaining) is at
// most q, as the package documentation says, also when this instance
// holds more tokens than the key's Burst: tokens leased before SetQuota
// lowered it stay spendable, and Decision.FleetRemaining, never less than
// Remaining, is then above Burst. The middleware sent it as it was:
// RateLimit-Policy q=10 with RateLimit r=58.
func TestRateLimitRAtMostQ(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 100, MinLease: 60, MaxLease: 60}),
		leasequota.WithRefreshInterval(100*time.Millisecond))
	var hook hookLog
	plain := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Tenant"))
	legacy := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Tenant"), middleware.WithLegacyHeaders())
	check200(t, get(t, plain, "X-Tenant", "acme"), policy{"default", 100, 100})
	if d := hook.last(t).d; d.Remaining < 20 {
		t.Fatalf("first decision %+v: want a lease of 60", d)
	}
	if err := l.SetQuota(context.Background(), "acme", leasequota.Quota{Rate: 1, Burst: 10}); err != nil {
		t.Fatal(err)
	}
	want := policy{"default", 10, 10}
	for deadline := time.Now().Add(10 * time.Second); ; {
		res := get(t, plain, "X-Tenant", "acme")
		if d := hook.last(t).d; d.Quota.Burst == 10 {
			if d.FleetRemaining <= 10 {
				t.Fatalf("decision %+v: want FleetRemaining above the new Burst (tokens leased before)", d)
			}
			check200(t, res, want) // r <= q
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the new quota never applied")
		}
		time.Sleep(10 * time.Millisecond) // poll
	}
	res := get(t, legacy, "X-Tenant", "acme")
	r := check200(t, res, want)
	if d := hook.last(t).d; d.FleetRemaining <= 10 || r != 10 {
		t.Fatalf("legacy: r=%d, decision %+v; want r = q = 10", r, d)
	}
	if v := res.header.Get("X-RateLimit-Remaining"); v != strconv.Itoa(10) {
		t.Fatalf("X-RateLimit-Remaining %q, want 10 (at most X-RateLimit-Limit)", v)
	}
}
