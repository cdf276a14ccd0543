package leasequota_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// Example, the setup of a service on its Redis, needs a Redis at
// localhost:6379: it compiles but does not run as a test (no Output
// comment). The other examples run on the in-process store
// (lease/memstore), which needs no Redis, and check their output.

func Example() {
	// ContextTimeoutEnabled lets WithRedisTimeout bound every Redis call.
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer rdb.Close()
	lim, err := leasequota.New(rdb,
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 200}),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
			if tenant == "big-customer" {
				return leasequota.Quota{Rate: 5000, Burst: 10000}
			}
			return leasequota.Quota{Rate: 100, Burst: 200}
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background()) // returns unused leased tokens

	http.HandleFunc("/work", func(w http.ResponseWriter, r *http.Request) {
		d := lim.AllowN(r.Context(), r.Header.Get("X-Tenant"), 1)
		if !d.Allowed {
			w.Header().Set("Retry-After", strconv.Itoa(int(d.RetryAfter.Seconds())+1))
			http.Error(w, "quota exceeded: "+d.Reason.String(), http.StatusTooManyRequests)
			return
		}
		fmt.Fprintln(w, "done")
	})
}

// A Limiter on the in-process store: the global buckets in this process's
// memory, with the semantics they have in Redis. Limiters made on the same
// store share them, as limiters on one Redis do.
func ExampleNewWithStore() {
	store := memstore.New()
	lim, err := leasequota.NewWithStore(store,
		// A burst of 3 leased at once; at one token per 1000 s nothing
		// refills here.
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.001, Burst: 3, MinLease: 3}),
		// A tenant's first request waits for its first lease.
		leasequota.WithColdStartWait(time.Second),
		// Warnings and errors only.
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	for range 4 {
		d := lim.AllowN(context.Background(), "acme", 1)
		fmt.Println(d.Allowed, d.Reason, d.Remaining)
	}
	// Output:
	// true cold_start 2
	// true leased 1
	// true leased 0
	// false exhausted 0
}

func ExampleLimiter_WaitN() {
	// A global cap on a downstream dependency, shared by every worker. (On
	// the in-process store here; in production, New on the workers' Redis.)
	lim, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 10, MaxLease: 2}),
		leasequota.WithFailureMode(leasequota.FailClosed),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if _, err := lim.WaitN(ctx, "payments", 1); err != nil {
		switch {
		case errors.Is(err, leasequota.ErrUnavailable):
			log.Print("Redis is down and the quota fails closed: try later")
		case errors.Is(err, context.DeadlineExceeded):
			log.Print("no token within 2s")
		}
		return
	}
	fmt.Println("calling the payment provider")
	// Output: calling the payment provider
}

func ExampleLimiter_SetQuota() {
	// On the in-process store here; in production, New on the instances'
	// shared Redis.
	lim, err := leasequota.NewWithStore(memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 200}),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	// Every instance sharing the store (Redis) applies the new quota within
	// about a refresh interval.
	ctx := context.Background()
	if err := lim.SetQuota(ctx, "tenant-42", leasequota.Quota{Rate: 1000, Burst: 2000}); err != nil {
		log.Fatal(err)
	}
	q, ok, err := lim.GetQuota(ctx, "tenant-42")
	fmt.Println(q.Rate, ok, err)
	// Output: 1000 true <nil>
}

func ExampleLimiter_ListQuotas() {
	lim, err := leasequota.NewWithStore(memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 200}),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())
	ctx := context.Background()
	for _, tenant := range []string{"tenant-7", "tenant-42"} {
		if err := lim.SetQuota(ctx, tenant, leasequota.Quota{Rate: 1000, Burst: 2000}); err != nil {
			log.Fatal(err)
		}
	}

	// On Redis the order is SCAN's: sort when it matters.
	var lines []string
	for tq, err := range lim.ListQuotas(ctx) {
		if errors.Is(err, leasequota.ErrUnnamedQuota) {
			lines = append(lines, fmt.Sprintf("%s (name unknown): %v/s", tq.Key, tq.Quota.Rate))
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		lines = append(lines, fmt.Sprintf("%s: %v/s, burst %d", tq.Tenant, tq.Quota.Rate, tq.Quota.Burst))
	}
	slices.Sort(lines)
	fmt.Println(strings.Join(lines, "\n"))
	// Output:
	// tenant-42: 1000/s, burst 2000
	// tenant-7: 1000/s, burst 2000
}

func ExampleWithQuotaRefresh() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	plans := func(tenant string) leasequota.Quota { // reads the tenant's plan, e.g. from a database
		return leasequota.Quota{Rate: 100, Burst: 200}
	}
	// Each tracked tenant's plan is read again once a minute, in the
	// background.
	lim, err := leasequota.New(rdb, leasequota.WithQuotaFunc(plans), leasequota.WithQuotaRefresh(time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	// A plan changed: this instance reads it again now.
	lim.Invalidate("tenant-42")
}

// Two policies on every request, decided at once: 2 requests per client
// IP (Per(2, time.Hour): refilled slowly, nothing refills here) and the
// tenant's quota. A denial by the IP's policy spends nothing of the
// tenant's; Decision.Tenant says which policy decided.
func ExampleLimiter_AllowAll() {
	lim, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
			if strings.HasPrefix(key, "ip:") {
				q := leasequota.Per(2, time.Hour)
				q.MinLease = 2 // lease the IP's whole burst at once
				return q
			}
			return leasequota.Quota{Rate: 0.001, Burst: 10, MinLease: 10}
		}),
		leasequota.WithColdStartWait(time.Second),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	ctx := context.Background()
	for range 3 {
		d := lim.AllowAll(ctx, 1, "ip:203.0.113.7", "tenant:acme")
		fmt.Println(d.Allowed, d.Tenant, d.Remaining)
	}
	info, _ := lim.Tenant("tenant:acme")
	fmt.Println("tenant:acme holds", info.Tokens)

	// Work not done: give the tokens of an admission back.
	d := lim.AllowAll(ctx, 1, "tenant:acme", "ip:198.51.100.1")
	fmt.Println(lim.Refund(&d, "tenant:acme", "ip:198.51.100.1"), lim.Refund(&d, "tenant:acme", "ip:198.51.100.1") != nil)
	// Output:
	// true ip:203.0.113.7 1
	// true ip:203.0.113.7 0
	// false ip:203.0.113.7 0
	// tenant:acme holds 8
	// <nil> true
}

func ExamplePer() {
	fmt.Printf("%+v\n", leasequota.Per(1000, 24*time.Hour))
	fmt.Println(leasequota.Per(0, time.Second).Validate() != nil)
	// Output:
	// {Rate:0.011574074074074073 Burst:1000 MinLease:0 MaxLease:0 LeaseTTL:0s FailureMode:default}
	// true
}

// A limiter for a service that decides for hot tenants on many cores: a
// tenant asked for 10,000 times a second or more on this instance keeps
// its leased tokens in a slot per CPU, so that requests on different
// CPUs do not share one counter (docs/tuning.md).
func ExampleWithPerCPUTokens() {
	lim, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 50_000, Burst: 5_000}),
		// Split tenants from 2,000 requests a second on this instance
		// (DefaultPerCPUDemand: 10,000; 0: never).
		leasequota.WithPerCPUTokens(2_000),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer lim.Close(context.Background())

	fmt.Println(lim.Allow("acme"))
	info, _ := lim.Tenant("acme")
	// A tenant is split once the syncer has seen its demand, and only
	// with GOMAXPROCS above 1: here, after one request, it is one count.
	fmt.Println(info.Slots)
	// Output:
	// true
	// 0
}
