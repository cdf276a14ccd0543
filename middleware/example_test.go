package middleware_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/middleware"
)

// Limit each client IP to 10 requests a second with bursts of 20, behind
// a load balancer in 10.0.0.0/8 that appends to X-Forwarded-For. It needs
// a Redis server, so it is compiled but not run.
func ExampleNew() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	l, err := leasequota.New(rdb, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 20}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	limit := middleware.New(l,
		middleware.WithTrustedProxies(middleware.XForwardedFor, netip.MustParsePrefix("10.0.0.0/8")),
		middleware.WithMaxWait(50*time.Millisecond),
	)
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
}

// Key requests by tenant: the value of X-Tenant is the tenant that
// WithQuotaFunc receives and SetQuota takes. Requests without the header
// are limited by client IP, as tenants "ip:<address>", a prefix no
// X-Tenant value may take (without WithClientIPFallback they would get
// 400). It needs a Redis server, so it is compiled but not run.
func ExampleWithHeaderKey() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	l, err := leasequota.New(rdb, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		switch {
		case tenant == "big-customer":
			return leasequota.Quota{Rate: 5000, Burst: 10000}
		case strings.HasPrefix(tenant, "ip:"): // no X-Tenant
			return leasequota.Quota{Rate: 5, Burst: 10}
		}
		return leasequota.Quota{Rate: 100, Burst: 200}
	}))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	// Requests with "X-Tenant: acme" get this quota on every instance,
	// within about a refresh interval.
	if err := l.SetQuota(context.Background(), "acme", leasequota.Quota{Rate: 1000, Burst: 2000}); err != nil {
		log.Fatal(err)
	}
	limit := middleware.New(l, middleware.WithHeaderKey("X-Tenant"), middleware.WithClientIPFallback("ip:"))
	mux := http.NewServeMux()
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })
	log.Fatal(http.ListenAndServe(":8080", limit(mux)))
}

// Key requests by API key, charge expensive routes more, and watch what
// enforcing would do in shadow mode before turning it on. It runs on the
// in-process store; in production, give leasequota.New a Redis client.
func ExampleWithShadow() {
	l, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 30, MinLease: 30}),
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())

	limit := middleware.New(l,
		middleware.WithHeaderKey("X-Api-Key"),
		middleware.WithCost(func(r *http.Request) int64 {
			if r.URL.Path == "/export" {
				return 10
			}
			return 1
		}),
		middleware.WithShadow(),
		middleware.WithDecisionHook(func(r *http.Request, key string, d leasequota.Decision) {
			if !d.Allowed {
				fmt.Printf("would refuse %s %s: %v\n", key, r.URL.Path, d.Reason)
			}
		}),
	)
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	for _, path := range []string{"/read", "/export", "/export", "/export", "/read"} {
		r := httptest.NewRequest("GET", path, nil)
		r.Header.Set("X-Api-Key", "acme")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(path, w.Code)
	}
	// Output:
	// /read 200
	// /export 200
	// /export 200
	// would refuse acme /export: exhausted
	// /export 200
	// /read 200
}

// ClientIP finds the client behind trusted proxies: the header is walked
// right to left, skipping the proxies; what the client wrote itself, left
// of the address its first proxy saw, is ignored.
func ExampleClientIP() {
	proxies := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}

	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.2:51234" // the load balancer
	r.Header.Set("X-Forwarded-For", "203.0.113.66, 198.51.100.7, 10.0.0.1")
	ip, _ := middleware.ClientIP(r, middleware.XForwardedFor, proxies)
	fmt.Println(ip)

	r.RemoteAddr = "192.0.2.9:4000" // not a proxy: its header is not trusted
	ip, _ = middleware.ClientIP(r, middleware.XForwardedFor, proxies)
	fmt.Println(ip)

	r.RemoteAddr = "10.0.0.2:51234"
	r.Header.Set("Forwarded", `for=198.51.100.7;proto=https, for="[2001:db8::1]:4711"`)
	ip, _ = middleware.ClientIP(r, middleware.Forwarded, proxies)
	fmt.Println(ip)
	// Output:
	// 198.51.100.7
	// 192.0.2.9
	// 2001:db8::1
}

// HeaderKey keys requests by the header's value, as it is: the tenant to
// name in SetQuota and WithQuotaFunc. A request without the header has no
// key ("").
func ExampleHeaderKey() {
	key := middleware.HeaderKey("x-tenant")
	r := httptest.NewRequest("GET", "/", nil)
	fmt.Printf("%q\n", key(r))
	r.Header.Set("X-Tenant", "acme")
	fmt.Printf("%q\n", key(r))
	// Output:
	// ""
	// "acme"
}

// Window is the w parameter of RateLimit-Policy: the seconds a quota's
// bucket takes to refill from empty.
func ExampleWindow() {
	fmt.Println(middleware.Window(leasequota.Quota{Rate: 100, Burst: 1000}))
	fmt.Println(middleware.Window(leasequota.Quota{Rate: 2, Burst: 5}))
	// Output:
	// 10
	// 3
}

// Two policies at once: per client IP and per tenant, decided by one
// AllowAll, so that a request the tenant's quota refuses spends nothing
// of its IP's. WithQuotaFunc gives each key its quota by its prefix. It
// runs on the in-process store; in production, give leasequota.New a
// Redis client, and leave the lease sizes to the limiter (each key here
// leases its whole burst at once, so that the figures are exact). A unit
// refills in 22.5 s for a tenant and 16.7 s for a client, so that t,
// rounded up to whole seconds, does not depend on how long the example
// takes (nor on when the limiter will next call the store, which may
// round the wait up a little).
func ExampleWithPolicy() {
	l, err := leasequota.NewWithStore(memstore.New(),
		leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
			q := leasequota.Per(2, 45*time.Second) // "tenant:", or the tenant's plan
			if strings.HasPrefix(key, "ip:") {
				q = leasequota.Per(3, 50*time.Second)
			}
			q.MinLease = q.Burst // lease the whole burst at once: exact figures
			return q
		}),
		leasequota.WithLeaseTTL(time.Minute), // leases outlive the example
		leasequota.WithLogger(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close(context.Background())
	tenant := func(r *http.Request) string {
		if v := r.Header.Get("X-Tenant"); v != "" {
			return "tenant:" + v
		}
		return "" // refused with 400, naming policy "tenant"
	}
	limit := middleware.New(l,
		middleware.WithClientIPPolicy("ip", "ip:"),
		middleware.WithPolicy("tenant", tenant),
		middleware.WithDenialHandler(func(w http.ResponseWriter, r *http.Request, d middleware.Denial) {
			// The RateLimit fields and Retry-After are set already.
			http.Error(w, "slow down ("+d.Policy+")", d.Status)
		}))
	h := limit(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))

	request := func(ip, tenant string) {
		r := httptest.NewRequest("GET", "/api/", nil)
		r.RemoteAddr = ip + ":4711"
		if tenant != "" {
			r.Header.Set("X-Tenant", tenant)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%s %s: %d | %s | %s\n", ip, tenant, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	request("192.0.2.1", "acme")
	request("192.0.2.1", "acme")
	request("192.0.2.1", "acme")    // acme's quota refuses: nothing spent of the IP's
	request("192.0.2.1", "initech") // so the IP's last unit goes to another tenant
	request("192.0.2.1", "initech")
	request("192.0.2.1", "") // no tenant: 400
	// Output:
	// 192.0.2.1 acme: 200 | "ip";q=3;w=50, "tenant";q=2;w=45 | "tenant";r=1;t=0
	// 192.0.2.1 acme: 200 | "ip";q=3;w=50, "tenant";q=2;w=45 | "tenant";r=0;t=0
	// 192.0.2.1 acme: 429 | "ip";q=3;w=50, "tenant";q=2;w=45 | "tenant";r=0;t=23
	// 192.0.2.1 initech: 200 | "ip";q=3;w=50, "tenant";q=2;w=45 | "ip";r=0;t=0
	// 192.0.2.1 initech: 429 | "ip";q=3;w=50, "tenant";q=2;w=45 | "ip";r=0;t=17
	// 192.0.2.1 : 400 |  |
}
