package grpcquota_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// TestMetadataTenantIsTheValue checks the one tenant identity: the tenant
// of a call keyed by WithMetadataKey is the metadata value, as it is given
// to WithQuotaFunc, to the decision hook, and to SetQuota and GetQuota.
func TestMetadataTenantIsTheValue(t *testing.T) {
	leakCheck(t)
	t.Run("QuotaFunc", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if tenant == "big-customer" {
				return leasequota.Quota{Rate: 50, Burst: 100}
			}
			return leasequota.Quota{Rate: 1, Burst: 5}
		}))
		var hook hookLog
		c := serve(t, l, hook.option(), grpcquota.WithMetadataKey("x-tenant"))
		if _, err := check(t, c, "x-tenant", "big-customer"); err != nil {
			t.Fatal(err)
		}
		if key, d := hook.last(t); key != "big-customer" || d.Quota.Burst != 100 {
			t.Fatalf("hook saw key %q with Burst %d, want big-customer with Burst 100", key, d.Quota.Burst)
		}
	})
	t.Run("SetQuota", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 5}))
		var hook hookLog
		c := serve(t, l, hook.option(), grpcquota.WithMetadataKey("x-tenant"))
		if _, err := check(t, c, "x-tenant", "acme"); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		big := leasequota.Quota{Rate: 50, Burst: 100}
		if err := l.SetQuota(ctx, "acme", big); err != nil {
			t.Fatal(err)
		}
		// The instance applies the override after its next lease call, at
		// least once per refresh interval for an active tenant.
		deadline := time.Now().Add(5 * time.Second)
		for {
			check(t, c, "x-tenant", "acme") // admitted or refused: the hook has the quota
			key, d := hook.last(t)
			if d.Quota.Burst == big.Burst {
				if key != "acme" {
					t.Fatalf("hook saw key %q, want acme", key)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("calls with x-tenant: acme still get Burst %d 5 s after SetQuota(acme, %+v) (hook key %q)",
					d.Quota.Burst, big, key)
			}
			time.Sleep(20 * time.Millisecond) // pace the polling
		}
	})
}

// TestNoTenantCannotSpendATenantsQuota: a call that names no tenant must
// not be limited under a name a client can choose. Here its peer address,
// 127.0.0.1, is also a metadata value: the calls without the metadata must
// leave the quota of tenant 127.0.0.1 alone. By default they end with
// InvalidArgument.
func TestNoTenantCannotSpendATenantsQuota(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 0.5, Burst: 2}
	for name, keyed := range map[string]grpcquota.Option{
		"WithMetadataKey": grpcquota.WithMetadataKey("x-tenant"),
		// A key function that returns the tenant as it is, the way to name
		// tenants without a prefix before WithMetadataKey did.
		"WithKeyFunc": grpcquota.WithKeyFunc(func(ctx context.Context, _ string) string {
			md, _ := metadata.FromIncomingContext(ctx)
			if v := md.Get("x-tenant"); len(v) > 0 {
				return v[0]
			}
			return ""
		}),
	} {
		t.Run(name, func(t *testing.T) {
			l := newLimiter(t, leasequota.WithDefaultQuota(q))
			var hook hookLog
			c := serve(t, l, hook.option(), keyed)
			var keyless []error
			for i := 0; i < 2*int(q.Burst); i++ {
				_, err := check(t, c)
				keyless = append(keyless, err)
			}
			for i := 0; i < int(q.Burst); i++ {
				if _, err := check(t, c, "x-tenant", "127.0.0.1"); err != nil {
					t.Fatalf("call %d of tenant 127.0.0.1 after %d calls without a tenant from 127.0.0.1: %v: they spent its quota",
						i+1, len(keyless), err)
				}
				if key, _ := hook.last(t); key != "127.0.0.1" {
					t.Fatalf("hook saw key %q for x-tenant: 127.0.0.1, want 127.0.0.1", key)
				}
			}
			for _, err := range keyless {
				if status.Code(err) != codes.InvalidArgument {
					t.Fatalf("call without a tenant: %v, want InvalidArgument", err)
				}
			}
			t.Logf("without a tenant: %v", keyless[0])
		})
	}
}
