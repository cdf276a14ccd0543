package middleware_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestHeaderTenantIsTheValue checks the one tenant identity: the tenant of
// a request keyed by WithHeaderKey is the header's value, as it is given
// to WithQuotaFunc, to the decision hook, and to SetQuota and GetQuota.
func TestHeaderTenantIsTheValue(t *testing.T) {
	leakCheck(t)
	t.Run("QuotaFunc", func(t *testing.T) {
		// The README's quick start, behind the middleware.
		l := newLimiter(t, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if tenant == "big-customer" {
				return leasequota.Quota{Rate: 50, Burst: 100}
			}
			return leasequota.Quota{Rate: 1, Burst: 5}
		}))
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Tenant"))
		check200(t, get(t, srv, "X-Tenant", "big-customer"), policy{"default", 100, 2})
		if key := hook.last(t).key; key != "big-customer" {
			t.Fatalf("hook saw key %q, want the header's value big-customer", key)
		}
		check200(t, get(t, srv, "X-Tenant", "small-customer"), policy{"default", 5, 5})
	})
	t.Run("SetQuota", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 5}))
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Tenant"))
		check200(t, get(t, srv, "X-Tenant", "acme"), policy{"default", 5, 5})

		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		big := leasequota.Quota{Rate: 50, Burst: 100}
		if err := l.SetQuota(ctx, "acme", big); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := l.GetQuota(ctx, "acme"); err != nil || !ok || got.Rate != big.Rate || got.Burst != big.Burst {
			t.Fatalf("GetQuota(acme) = %+v, %v, %v; want %+v", got, ok, err, big)
		}
		// The instance applies the override after its next lease call, at
		// least once per refresh interval for an active tenant.
		deadline := time.Now().Add(5 * time.Second)
		for {
			res := get(t, srv, "X-Tenant", "acme")
			if parsePolicy(t, res.header).q == big.Burst {
				check200(t, res, policy{"default", 100, 2})
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("responses to X-Tenant: acme still say %q 5 s after SetQuota(acme, %+v) (hook key %q)",
					res.header.Get("RateLimit-Policy"), big, hook.last(t).key)
			}
			time.Sleep(pollEvery)
		}
		if key := hook.last(t).key; key != "acme" {
			t.Fatalf("hook saw key %q, want acme", key)
		}
		// Other tenants keep the configured quota.
		check200(t, get(t, srv, "X-Tenant", "other"), policy{"default", 5, 5})
	})
}

// TestNoTenantCannotSpendATenantsQuota: a request that names no tenant must
// not be limited under a name a client can choose. Here its client IP,
// 127.0.0.1, is also a header value: the requests without the header must
// leave the quota of tenant 127.0.0.1 alone. By default they are refused
// with 400.
func TestNoTenantCannotSpendATenantsQuota(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 0.5, Burst: 2}
	want := policy{"default", 2, 4}
	for name, keyed := range map[string]middleware.Option{
		"WithHeaderKey": middleware.WithHeaderKey("X-Tenant"),
		// A key function that returns the tenant as it is, the way to name
		// tenants without a prefix before WithHeaderKey did.
		"WithKeyFunc": middleware.WithKeyFunc(func(r *http.Request) string { return r.Header.Get("X-Tenant") }),
	} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, leasequota.WithDefaultQuota(q))
			var hook hookLog
			srv := serve(t, l, hook.option(), keyed)
			var keyless []result
			for i := 0; i < 2*int(q.Burst); i++ {
				keyless = append(keyless, get(t, srv))
			}
			for i := 0; i < int(q.Burst); i++ {
				res := get(t, srv, "X-Tenant", "127.0.0.1")
				if res.status != http.StatusOK {
					t.Fatalf("request %d of tenant 127.0.0.1 after %d requests without a tenant from 127.0.0.1: status %d (%s), want 200: they spent its quota",
						i+1, len(keyless), res.status, res.header.Get("RateLimit"))
				}
				check200(t, res, want)
				if key := hook.last(t).key; key != "127.0.0.1" {
					t.Fatalf("hook saw key %q for X-Tenant: 127.0.0.1, want 127.0.0.1", key)
				}
			}
			for i, res := range keyless {
				p := checkProblem(t, res, http.StatusBadRequest, "about:blank")
				if i == 0 {
					t.Logf("without a tenant: %d %s", res.status, p.Detail)
				}
				if v := res.header.Values("RateLimit-Policy"); len(v) != 0 {
					t.Fatalf("RateLimit-Policy %q without a tenant", v)
				}
			}
		})
	}
}
