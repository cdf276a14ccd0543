package middleware_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasequota/leasequota"
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

// Key requests by API key, charge expensive routes more, and watch what
// enforcing would do in shadow mode before turning it on.
func ExampleWithShadow() {
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	l, err := leasequota.New(rdb, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 200}))
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
				log.Printf("would refuse %s %s: %v, retry after %v", key, r.URL.Path, d.Reason, d.RetryAfter)
			}
		}),
	)
	_ = limit(http.NotFoundHandler())
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

// HeaderKey keys requests by an API key, namespaced by the header's name;
// requests without one fall back to the client IP.
func ExampleHeaderKey() {
	key := middleware.HeaderKey("x-api-key")
	r := httptest.NewRequest("GET", "/", nil)
	fmt.Printf("%q\n", key(r))
	r.Header.Set("X-Api-Key", "k-123")
	fmt.Printf("%q\n", key(r))
	// Output:
	// ""
	// "X-Api-Key:k-123"
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
