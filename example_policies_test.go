package leasequota_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// The examples of docs/policies.md, which shows each of them whole
// (internal/doccheck checks that it does). They run on the in-process
// store with quotas that refill nothing while they run, each key leasing
// its whole burst at once (MinLease = Burst), so their output is exact.

// An API gateway: every request is limited per client IP, per tenant and
// per tenant per day, in one decision.
func ExampleLimiter_AllowAll_gateway() {
	daily := map[string]int64{"acme": 1000, "initech": 2} // the tenants' plans
	lim, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
			var q leasequota.Quota
			switch {
			case strings.HasPrefix(key, "ip:"):
				q = leasequota.Per(3, time.Minute)
			case strings.HasPrefix(key, "tenant:"):
				q = leasequota.Per(4, time.Minute)
			case strings.HasPrefix(key, "day:"):
				q = leasequota.Per(daily[strings.TrimPrefix(key, "day:")], 24*time.Hour)
			}
			q.MinLease = q.Burst // lease the whole burst at once: exact Remaining
			return q
		}),
		leasequota.WithColdStartWait(time.Second),
		leasequota.WithLeaseTTL(time.Minute), // leases outlive the example
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	request := func(ip, tenant string) {
		d := lim.AllowAll(context.Background(), 1, "ip:"+ip, "tenant:"+tenant, "day:"+tenant)
		if d.Allowed {
			fmt.Printf("%s for %s: allowed, %s has %d left\n", ip, tenant, d.Tenant, d.Remaining)
			return
		}
		fmt.Printf("%s for %s: denied by %s (%s), retry after %v\n", ip, tenant, d.Tenant, d.Reason, d.RetryAfter.Round(time.Second))
	}
	for range 4 {
		request("203.0.113.7", "acme") // one client, 3 a minute
	}
	for range 2 {
		request("198.51.100.4", "acme") // another client of acme
	}
	for range 3 {
		request("192.0.2.80", "initech") // a trial plan: 2 a day
	}
	// Output:
	// 203.0.113.7 for acme: allowed, ip:203.0.113.7 has 2 left
	// 203.0.113.7 for acme: allowed, ip:203.0.113.7 has 1 left
	// 203.0.113.7 for acme: allowed, ip:203.0.113.7 has 0 left
	// 203.0.113.7 for acme: denied by ip:203.0.113.7 (exhausted), retry after 20s
	// 198.51.100.4 for acme: allowed, tenant:acme has 0 left
	// 198.51.100.4 for acme: denied by tenant:acme (exhausted), retry after 15s
	// 192.0.2.80 for initech: allowed, day:initech has 1 left
	// 192.0.2.80 for initech: allowed, day:initech has 0 left
	// 192.0.2.80 for initech: denied by day:initech (exhausted), retry after 12h0m0s
}

// A hierarchy: a global limit over every tenant's, over every user's.
func ExampleLimiter_AllowAll_hierarchy() {
	lim, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
			var q leasequota.Quota
			switch {
			case key == "global": // what the shared backend can take
				q = leasequota.Per(6, time.Minute)
			case strings.HasPrefix(key, "tenant:"):
				q = leasequota.Per(4, time.Minute)
			case strings.HasPrefix(key, "user:"):
				q = leasequota.Per(3, time.Minute)
			}
			q.MinLease = q.Burst // lease the whole burst at once: exact Remaining
			return q
		}),
		leasequota.WithColdStartWait(time.Second),
		leasequota.WithLeaseTTL(time.Minute), // leases outlive the example
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	request := func(tenant, user string, times int) {
		for range times {
			d := lim.AllowAll(context.Background(), 1, "global", "tenant:"+tenant, "user:"+tenant+"/"+user)
			fmt.Printf("%s/%s: %-5v %s has %d left\n", tenant, user, d.Allowed, d.Tenant, d.Remaining)
		}
	}
	request("acme", "alice", 4)   // alice's own limit decides
	request("acme", "bob", 2)     // then acme's
	request("globex", "carol", 3) // then the global one
	// Output:
	// acme/alice: true  user:acme/alice has 2 left
	// acme/alice: true  user:acme/alice has 1 left
	// acme/alice: true  user:acme/alice has 0 left
	// acme/alice: false user:acme/alice has 0 left
	// acme/bob: true  tenant:acme has 0 left
	// acme/bob: false tenant:acme has 0 left
	// globex/carol: true  global has 1 left
	// globex/carol: true  global has 0 left
	// globex/carol: false global has 0 left
}

// A cost-weighted endpoint: an export costs 10 tokens of the tenant's
// quota and its client IP's, a read 1. Work not done is refunded.
func ExampleLimiter_AllowAll_costWeighted() {
	lim, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
			q := leasequota.Per(25, time.Minute) // "tenant:"
			if strings.HasPrefix(key, "ip:") {
				q = leasequota.Per(60, time.Minute)
			}
			q.MinLease = q.Burst // lease the whole burst at once: exact Remaining
			return q
		}),
		leasequota.WithColdStartWait(time.Second),
		// No sync round while the example runs: a lease call holding a
		// key's lock would send the refund below to the store, not back
		// into the lease.
		leasequota.WithRefreshInterval(time.Minute), leasequota.WithLeaseTTL(2*time.Minute),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	const export, read = 10, 1 // tokens per call
	keys := []string{"tenant:acme", "ip:198.51.100.4"}
	call := func(what string, cost int64) leasequota.Decision {
		d := lim.AllowAll(context.Background(), cost, keys...)
		if d.Allowed {
			fmt.Printf("%s (%d): allowed, %s has %d left\n", what, cost, d.Tenant, d.Remaining)
		} else {
			fmt.Printf("%s (%d): denied by %s (%s)\n", what, cost, d.Tenant, d.Reason)
		}
		return d
	}
	call("export", export)
	d := call("export", export)
	// The export failed upstream before doing any work: give its tokens
	// back, to every key it was charged to.
	if err := lim.Refund(&d, keys...); err != nil {
		log.Fatal(err)
	}
	call("export", export)
	d = call("export", export) // 5 left of 10: nothing is spent
	// The bucket makes the 5 tokens missing in 12 s (25 a minute), less
	// the time since the lease; RetryAfter is later when the limiter will
	// not call Redis before then (a lease call that found the bucket dry,
	// which a busy machine may have made in the meantime).
	fmt.Println("retry after 10s or more:", d.RetryAfter >= 10*time.Second)
	call("read", read)
	call("import", 30) // more than tenant:acme's burst: never admitted
	// Output:
	// export (10): allowed, tenant:acme has 15 left
	// export (10): allowed, tenant:acme has 5 left
	// export (10): allowed, tenant:acme has 5 left
	// export (10): denied by tenant:acme (exhausted)
	// retry after 10s or more: true
	// read (1): allowed, tenant:acme has 4 left
	// import (30): denied by tenant:acme (invalid_n)
}
