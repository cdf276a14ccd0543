package middleware_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// pollEvery is the pace of polling loops: they wait for a real refill.
const pollEvery = 20 * time.Millisecond

// TestPerIP is the first scenario of the design: keyed by client IP, a
// burst is admitted, then requests get 429 with Retry-After and the
// RateLimit fields, then after the refill requests are admitted again.
func TestPerIP(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 2, Burst: 5}
	l := newLimiter(t, leasequota.WithDefaultQuota(q))
	var hook hookLog
	srv := serve(t, l, hook.option())
	want := policy{"default", 5, 3} // w = ceil(5/2)

	start := time.Now()
	admitted := 0
	var denied result
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatalf("no 429 after %d requests (%d admitted)", i, admitted)
		}
		res := get(t, srv)
		if res.status == http.StatusTooManyRequests {
			denied = res
			break
		}
		check200(t, res, want)
		admitted++
	}
	elapsed := time.Since(start)
	if hook.last(t).key != "127.0.0.1" {
		t.Fatalf("key %q, want the client IP 127.0.0.1", hook.last(t).key)
	}
	// The whole burst, and no more than it plus the refill meanwhile.
	if most := int(q.Burst) + int(q.Rate*elapsed.Seconds()) + 1; admitted < int(q.Burst) || admitted > most {
		t.Fatalf("%d admitted before the first 429 in %v, want %d..%d", admitted, elapsed, q.Burst, most)
	}
	retryAfter := check429(t, denied, want)
	// A token refills in 0.5 s, but the syncer asks Redis again only when
	// a lease of MaxLease (2) tokens has refilled: 1 s, rounded up.
	if retryAfter > 3 {
		t.Fatalf("Retry-After %d, want 1..3", retryAfter)
	}
	if d := hook.last(t).d; d.Reason != leasequota.ReasonExhausted || d.Allowed {
		t.Fatalf("hook saw %+v, want a denial with reason exhausted", d)
	}

	// A refused request does not wait: the refill is 500 ms away, beyond
	// the default max wait of 100 ms.
	t0 := time.Now()
	res := get(t, srv)
	if took := time.Since(t0); res.status == http.StatusTooManyRequests && took > 90*time.Millisecond {
		t.Fatalf("a 429 took %v, want no wait for a refill beyond the max wait", took)
	}

	// Admitted again once the bucket refilled; poll with a deadline.
	deniedAt := time.Now()
	deadline := deniedAt.Add(5 * time.Second)
	for {
		res := get(t, srv)
		if res.status == http.StatusOK {
			check200(t, res, want)
			break
		}
		check429(t, res, want)
		if time.Now().After(deadline) {
			t.Fatal("still refused 5 s after the first 429")
		}
		time.Sleep(pollEvery)
	}
	if took := time.Since(deniedAt); took > time.Duration(retryAfter)*time.Second+time.Second {
		t.Fatalf("recovered %v after the 429, Retry-After said %d s", took, retryAfter)
	}
}

// TestMaxWait checks the bounded wait for a fresh lease: it admits at the
// refill rate when the wait fits, refuses at once when it cannot, and
// WithMaxWait(0) never waits.
func TestMaxWait(t *testing.T) {
	leakCheck(t)
	t.Run("waits for refills", func(t *testing.T) {
		q := leasequota.Quota{Rate: 20, Burst: 5}
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		srv := serve(t, l, middleware.WithMaxWait(time.Second))
		want := policy{"default", 5, 1}
		const n = 15
		start := time.Now()
		for i := 0; i < n; i++ {
			check200(t, get(t, srv), want)
		}
		// The global bound: n <= Burst + Rate*T, so T >= (n-Burst)/Rate.
		if min := time.Duration(float64(n-q.Burst) / q.Rate * float64(time.Second)); time.Since(start) < min*9/10 {
			t.Fatalf("%d admitted in %v, the quota allows that in no less than %v", n, time.Since(start), min)
		}
	})
	t.Run("no wait beyond the max", func(t *testing.T) {
		q := leasequota.Quota{Rate: 0.5, Burst: 1}
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		srv := serve(t, l, middleware.WithMaxWait(time.Second))
		want := policy{"default", 1, 2}
		check200(t, get(t, srv), want)
		start := time.Now()
		res := get(t, srv)
		if took := time.Since(start); took > 500*time.Millisecond {
			t.Fatalf("refusal took %v: it waited though the refill (2 s) is beyond the max wait (1 s)", took)
		}
		if ra := check429(t, res, want); ra != 2 {
			t.Fatalf("Retry-After %d, want 2", ra)
		}
	})
	t.Run("zero", func(t *testing.T) {
		q := leasequota.Quota{Rate: 20, Burst: 5}
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		srv := serve(t, l, middleware.WithMaxWait(0))
		for i := 0; ; i++ {
			if i == 20 {
				t.Fatal("no 429 in 20 requests at full speed with Rate 20/s, Burst 5")
			}
			if res := get(t, srv); res.status == http.StatusTooManyRequests {
				check429(t, res, policy{"default", 5, 1})
				break
			}
		}
	})
}

// TestTrustedProxies keys by the address the trusted proxies (here the
// loopback network the test client comes from) put in the header.
func TestTrustedProxies(t *testing.T) {
	leakCheck(t)
	loopback := netip.MustParsePrefix("127.0.0.0/8")
	want := policy{"default", 2, 4}
	q := leasequota.Quota{Rate: 0.5, Burst: 2}

	t.Run("X-Forwarded-For", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithTrustedProxies(middleware.XForwardedFor, loopback))
		cases := []struct {
			xff     []string
			wantKey string
		}{
			{[]string{"203.0.113.7"}, "203.0.113.7"},
			// Trusted hops are skipped right to left.
			{[]string{"203.0.113.7, 127.0.0.2"}, "203.0.113.7"},
			{[]string{"203.0.113.7", "127.0.0.3"}, "203.0.113.7"},
			// A client cannot choose its key: what it wrote is left of
			// the address the proxy appended.
			{[]string{"198.51.100.1, 203.0.113.7"}, "203.0.113.7"},
			{[]string{"[2001:db8::1]:4711"}, "2001:db8::1"},
			{[]string{"::ffff:203.0.113.9"}, "203.0.113.9"},
			// Malformed: fall back to RemoteAddr.
			{[]string{"garbage"}, "127.0.0.1"},
			{[]string{"unknown, 127.0.0.2"}, "127.0.0.1"},
			{[]string{"203.0.113.7:port"}, "127.0.0.1"},
			// All hops trusted: the leftmost is the client.
			{[]string{"127.0.0.9, 127.0.0.8"}, "127.0.0.9"},
			// The other header is not trusted.
			{nil, "127.0.0.1"},
		}
		for _, c := range cases {
			var h []string
			for _, v := range c.xff {
				h = append(h, "X-Forwarded-For", v)
			}
			if c.xff == nil {
				h = []string{"Forwarded", "for=203.0.113.50"}
			}
			get(t, srv, h...)
			if got := hook.last(t).key; got != c.wantKey {
				t.Errorf("X-Forwarded-For %q: key %q, want %q", c.xff, got, c.wantKey)
			}
		}
		// Separate quotas: exhaust one forwarded client, another is
		// still admitted.
		exhaust(t, srv, want, "X-Forwarded-For", "192.0.2.10")
		check200(t, get(t, srv, "X-Forwarded-For", "192.0.2.11"), want)
		check429(t, get(t, srv, "X-Forwarded-For", "192.0.2.10, 127.0.0.1"), want)
	})

	t.Run("Forwarded", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		var hook hookLog
		srv := serve(t, l, hook.option(),
			middleware.WithTrustedProxies(middleware.Forwarded, loopback),
			middleware.WithIPv6Prefix(64))
		cases := []struct {
			fwd     string
			wantKey string
		}{
			{"for=203.0.113.7", "203.0.113.7"},
			{`for=203.0.113.7;proto=https;by="[2001:db8::9]", For="127.0.0.2:8080"`, "203.0.113.7"},
			{`for="[2001:db8:1:2::17]:4711"`, "2001:db8:1:2::/64"},
			{`for=198.51.100.1;host="a,b", for=203.0.113.8`, "203.0.113.8"},
			{"for=unknown", "127.0.0.1"},
			{"for=_hidden", "127.0.0.1"},
			{"proto=http", "127.0.0.1"},
			{`for=2001:db8::1`, "127.0.0.1"}, // IPv6 must be quoted and bracketed
			{`for="203.0.113.7`, "127.0.0.1"},
		}
		for _, c := range cases {
			get(t, srv, "Forwarded", c.fwd, "X-Forwarded-For", "192.0.2.99")
			if got := hook.last(t).key; got != c.wantKey {
				t.Errorf("Forwarded %q: key %q, want %q", c.fwd, got, c.wantKey)
			}
		}
		exhaust(t, srv, want, "Forwarded", "for=192.0.2.20")
		check200(t, get(t, srv, "Forwarded", "for=192.0.2.21"), want)
	})
}

// TestUntrustedProxies ignores forwarding headers from a client that is
// not a configured proxy: they cannot buy it a fresh quota.
func TestUntrustedProxies(t *testing.T) {
	leakCheck(t)
	want := policy{"default", 2, 4}
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	var hook hookLog
	srv := serve(t, l, hook.option(),
		middleware.WithTrustedProxies(middleware.XForwardedFor, netip.MustParsePrefix("10.0.0.0/8")))
	exhaust(t, srv, want, "X-Forwarded-For", "203.0.113.1")
	check429(t, get(t, srv, "X-Forwarded-For", "203.0.113.2"), want)
	check429(t, get(t, srv, "Forwarded", "for=203.0.113.3"), want)
	check429(t, get(t, srv), want)
	if got := hook.last(t).key; got != "127.0.0.1" {
		t.Fatalf("key %q, want RemoteAddr's 127.0.0.1", got)
	}
}

// TestAPIKey keys by an API key header. A request without one, or with an
// empty one or one too long, has no key: it is refused with 400, naming
// the header, and not decided.
func TestAPIKey(t *testing.T) {
	leakCheck(t)
	want := policy{"default", 2, 4}
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	var hook hookLog
	srv := serve(t, l, hook.option(), middleware.WithHeaderKey("x-api-key"))

	exhaust(t, srv, want, "X-API-Key", "alpha")
	if got := hook.last(t).key; got != "alpha" {
		t.Fatalf("key %q, want the header's value alpha", got)
	}
	check200(t, get(t, srv, "X-API-Key", "beta"), want)
	before := hook.len()
	for _, h := range [][]string{
		nil,
		{"X-Api-Key", ""},
		{"X-Api-Key", strings.Repeat("k", middleware.MaxHeaderKeyLen+1)},
	} {
		res := get(t, srv, h...)
		p := checkProblem(t, res, http.StatusBadRequest, "about:blank")
		if !strings.Contains(p.Detail, "X-Api-Key") {
			t.Fatalf("header %q: detail %q does not name the header", h, p.Detail)
		}
		if v := res.header.Values("RateLimit-Policy"); len(v) != 0 {
			t.Fatalf("header %q: RateLimit-Policy %q without a key", h, v)
		}
	}
	if hook.len() != before {
		t.Fatal("a request without a key was decided")
	}
	check200(t, get(t, srv, "X-API-Key", strings.Repeat("k", middleware.MaxHeaderKeyLen)), want)
}

// TestClientIPFallback limits requests without a key by client IP, under
// the fallback's prefix, which no request may claim as its own key.
func TestClientIPFallback(t *testing.T) {
	leakCheck(t)
	anon := leasequota.Quota{Rate: 0.5, Burst: 2}
	l := newLimiter(t, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		if strings.HasPrefix(tenant, "ip:") {
			return anon
		}
		return leasequota.Quota{Rate: 0.5, Burst: 3}
	}))
	var hook hookLog
	srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Tenant"), middleware.WithClientIPFallback("ip:"),
		middleware.WithTrustedProxies(middleware.XForwardedFor, netip.MustParsePrefix("127.0.0.0/8")))
	anonPolicy, tenantPolicy := policy{"default", 2, 4}, policy{"default", 3, 6}

	// Without the header: the client IP (behind trusted proxies too).
	exhaust(t, srv, anonPolicy)
	if got := hook.last(t).key; got != "ip:127.0.0.1" {
		t.Fatalf("key %q without a tenant, want ip:127.0.0.1", got)
	}
	check200(t, get(t, srv, "X-Forwarded-For", "203.0.113.7"), anonPolicy)
	if got := hook.last(t).key; got != "ip:203.0.113.7" {
		t.Fatalf("key %q without a tenant behind a proxy, want ip:203.0.113.7", got)
	}
	// A tenant named like the IP has its own quota.
	check200(t, get(t, srv, "X-Tenant", "127.0.0.1"), tenantPolicy)
	// No request can name a fallback key.
	before := hook.len()
	res := get(t, srv, "X-Tenant", "ip:127.0.0.1")
	if p := checkProblem(t, res, http.StatusBadRequest, "about:blank"); !strings.Contains(p.Detail, `"ip:"`) {
		t.Fatalf("detail %q does not name the reserved prefix", p.Detail)
	}
	if hook.len() != before {
		t.Fatal("a request with a reserved key was decided")
	}
}

// TestMissingKeyHandler answers requests without a key with the given
// handler; shadow mode and a cost of 0 pass them on.
func TestMissingKeyHandler(t *testing.T) {
	leakCheck(t)
	want := policy{"default", 2, 4}
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	challenge := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `ApiKey realm="api"`)
		w.WriteHeader(http.StatusUnauthorized)
	})
	t.Run("handler", func(t *testing.T) {
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Api-Key"), middleware.WithMissingKeyHandler(challenge))
		if res := get(t, srv); res.status != http.StatusUnauthorized || res.header.Get("WWW-Authenticate") == "" {
			t.Fatalf("status %d, header %v, want the handler's 401", res.status, res.header)
		}
		if hook.len() != 0 {
			t.Fatal("a request without a key was decided")
		}
		check200(t, get(t, srv, "X-Api-Key", "k1"), want)
	})
	t.Run("shadow", func(t *testing.T) {
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Api-Key"), middleware.WithShadow())
		res := get(t, srv)
		if res.status != http.StatusOK || res.header.Get("RateLimit-Policy") != "" || hook.len() != 0 {
			t.Fatalf("status %d, header %v, %d decisions; want 200 without fields nor decision", res.status, res.header, hook.len())
		}
	})
	t.Run("cost 0", func(t *testing.T) {
		srv := serve(t, l, middleware.WithHeaderKey("X-Api-Key"),
			middleware.WithCost(func(r *http.Request) int64 { return 0 }))
		if res := get(t, srv); res.status != http.StatusOK {
			t.Fatalf("status %d for an exempt request without a key", res.status)
		}
	})
	t.Run("no client address", func(t *testing.T) {
		// Keyed by client IP, a request whose RemoteAddr is empty (built
		// in-process) has no key either.
		var hook hookLog
		h := middleware.New(l, hook.option())(okHandler)
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = ""
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, r)
		if rec.Code != http.StatusBadRequest || hook.len() != 0 {
			t.Fatalf("status %d, %d decisions; want 400 and none", rec.Code, hook.len())
		}
	})
}

// TestWeights charges each request its cost.
func TestWeights(t *testing.T) {
	leakCheck(t)
	want := policy{"default", 10, 20}
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 10}))
	var hook hookLog
	srv := serve(t, l, hook.option(), middleware.WithCost(func(r *http.Request) int64 {
		n, err := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		if err != nil {
			return 1
		}
		return n
	}))
	cost := func(n int) []string { return []string{"X-Cost", strconv.Itoa(n)} }

	check200(t, get(t, srv, cost(4)...), want)
	check200(t, get(t, srv, cost(4)...), want)
	// 2 left (and 0.5 more a second): 4 is refused, 2 admitted. The
	// Retry-After is 4 s when the 2 are known left; when a lease call took
	// them meanwhile, the planner waits for the whole 4 at 0.5/s (8 s,
	// plus jitter, rounded up): at most 10.
	if ra := check429(t, get(t, srv, cost(4)...), want); ra < 3 || ra > 10 {
		t.Fatalf("Retry-After %d for 4 units with 2 left at 0.5/s, want 3..10", ra)
	}
	// The refusal sent a lease call for what is left, which the next
	// request must not race: sent while it is out, that request finds
	// nothing here, and a wait for all 4 units at 0.5/s, beyond the max
	// wait (a 429 with Retry-After 9 in a make test run). Poll, with a
	// deadline, until the 2 are held here.
	key := hook.last(t).key
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(pollEvery) {
		if info, ok := l.Tenant(key); ok && info.Tokens >= 2 {
			break
		}
		if time.Now().After(deadline) {
			info, _ := l.Tenant(key)
			t.Fatalf("tenant %q holds %d tokens 5 s after the 429, want the 2 left", key, info.Tokens)
		}
	}
	check200(t, get(t, srv, cost(2)...), want)
	if d := hook.last(t).d; !d.Allowed {
		t.Fatalf("hook saw %+v for cost 2", d)
	}

	// Above Burst: never admissible, so no Retry-After and no t.
	res := get(t, srv, cost(11)...)
	p := checkProblem(t, res, http.StatusTooManyRequests, middleware.ProblemQuotaExceeded)
	if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != "default" {
		t.Fatalf("violated-policies %q", p.ViolatedPolicies)
	}
	if ra := res.header.Get("Retry-After"); ra != "" {
		t.Fatalf("Retry-After %q for a cost above Burst, want none", ra)
	}
	if rl := parseRateLimit(t, res.header); rl.hasT {
		t.Fatalf("RateLimit %+v for a cost above Burst, want no t", rl)
	}
	if d := hook.last(t).d; d.Reason != leasequota.ReasonInvalidN {
		t.Fatalf("hook saw %+v, want reason invalid_n", d)
	}

	// Cost 0: exempt, not counted, no fields.
	before := hook.len()
	res = get(t, srv, cost(0)...)
	if res.status != http.StatusOK || res.header.Get("RateLimit") != "" || res.header.Get("RateLimit-Policy") != "" {
		t.Fatalf("cost 0: status %d, header %v, want 200 without fields", res.status, res.header)
	}
	if hook.len() != before {
		t.Fatal("cost 0 was reported to the hook")
	}
	// A negative cost is a server bug.
	checkProblem(t, get(t, srv, cost(-1)...), http.StatusInternalServerError, "about:blank")
	// In shadow mode, which never refuses, it is passed on uncounted:
	// a WithCost on trial with a bug must not fail real traffic.
	shadow := serve(t, l, hook.option(), middleware.WithShadow(), middleware.WithCost(func(r *http.Request) int64 {
		n, _ := strconv.ParseInt(r.Header.Get("X-Cost"), 10, 64)
		return n
	}))
	before = hook.len()
	if res := get(t, shadow, cost(-1)...); res.status != http.StatusOK || string(res.body) != "ok" || hook.len() != before {
		t.Fatalf("shadow mode, a negative cost: status %d, %d decisions reported; want 200 and none", res.status, hook.len()-before)
	}
}

// TestShadow counts and sets the fields but never refuses.
func TestShadow(t *testing.T) {
	leakCheck(t)
	want := policy{"default", 2, 4}
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	var hook hookLog
	srv := serve(t, l, hook.option(), middleware.WithShadow())
	denied := 0
	for i := 0; i < 6; i++ {
		res := get(t, srv)
		if res.status != http.StatusOK || string(res.body) != "ok" {
			t.Fatalf("request %d: status %d, want 200 in shadow mode", i, res.status)
		}
		if ra := res.header.Get("Retry-After"); ra != "" {
			t.Fatalf("Retry-After %q in shadow mode", ra)
		}
		if got := parsePolicy(t, res.header); got != want {
			t.Fatalf("RateLimit-Policy %+v, want %+v", got, want)
		}
		rl := parseRateLimit(t, res.header)
		d := hook.last(t).d
		switch {
		case d.Allowed && (rl.t != 0 || !rl.hasT):
			t.Fatalf("admitted, RateLimit %+v, want t=0", rl)
		case !d.Allowed && (rl.t < 1 || rl.r > want.q):
			t.Fatalf("would be refused, RateLimit %+v, want t >= 1", rl)
		}
		if !d.Allowed {
			denied++
		}
	}
	// Burst 2 and at most a token of refill meanwhile.
	if denied < 3 {
		t.Fatalf("%d of 6 would have been refused, want >= 3", denied)
	}
}

// TestDegraded covers the Limiter not deciding: Redis down, or closed.
func TestDegraded(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 10, Burst: 10}
	deadRedis := func(t *testing.T, mode leasequota.FailureMode) *leasequota.Limiter {
		return deadLimiter(t, q, mode)
	}
	t.Run("deny", func(t *testing.T) {
		l := deadRedis(t, leasequota.FailClosed)
		var hook hookLog
		srv := serve(t, l, hook.option())
		res := get(t, srv)
		checkProblem(t, res, http.StatusServiceUnavailable, middleware.ProblemTemporaryReducedCapacity)
		if d := hook.last(t).d; d.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("reason %v, want unavailable", d.Reason)
		}
		if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q, want >= 1", res.header.Get("Retry-After"))
		}
	})
	t.Run("allow", func(t *testing.T) {
		l := deadRedis(t, leasequota.FailClosed)
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithDegradedMode(middleware.DegradedAllow))
		res := get(t, srv)
		if res.status != http.StatusOK {
			t.Fatalf("status %d, want 200 when degraded and allowed", res.status)
		}
		if d := hook.last(t).d; d.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("reason %v, want unavailable", d.Reason)
		}
		if got := parsePolicy(t, res.header); got != (policy{"default", 10, 1}) {
			t.Fatalf("RateLimit-Policy %+v", got)
		}
		if v := res.header.Values("RateLimit"); len(v) != 0 {
			t.Fatalf("RateLimit %q when degraded, want none", v)
		}
	})
	// The Limiter's own failure modes decide before the middleware's.
	t.Run("limiter fails open", func(t *testing.T) {
		var hook hookLog
		srv := serve(t, deadRedis(t, leasequota.FailOpen), hook.option())
		res := get(t, srv)
		if res.status != http.StatusOK {
			t.Fatalf("status %d, want 200 from a limiter failing open", res.status)
		}
		if d := hook.last(t).d; d.Reason != leasequota.ReasonFailOpen {
			t.Fatalf("reason %v, want fail_open", d.Reason)
		}
		if got := parsePolicy(t, res.header); got != (policy{"default", 10, 1}) {
			t.Fatalf("RateLimit-Policy %+v", got)
		}
		if v := res.header.Values("RateLimit"); len(v) != 0 {
			t.Fatalf("RateLimit %q without a lease, want none", v)
		}
	})
	t.Run("limiter falls back", func(t *testing.T) {
		var hook hookLog
		srv := serve(t, deadRedis(t, leasequota.FailLocal), hook.option(), middleware.WithMaxWait(0))
		res := get(t, srv)
		d := hook.last(t).d
		if d.Reason != leasequota.ReasonFallback {
			t.Fatalf("reason %v, want fallback", d.Reason)
		}
		if d.Allowed {
			if res.status != http.StatusOK {
				t.Fatalf("status %d for a fallback admission", res.status)
			}
		} else {
			check429(t, res, policy{"default", 10, 1})
		}
	})
	t.Run("closed", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		srv := serve(t, l)
		check200(t, get(t, srv), policy{"default", 10, 1})
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkProblem(t, get(t, srv), http.StatusServiceUnavailable, middleware.ProblemTemporaryReducedCapacity)
	})
}

// TestInvalidQuota answers 500 for a key whose quota is invalid.
func TestInvalidQuota(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
		if key == "bad" {
			return leasequota.Quota{Rate: -1, Burst: 1}
		}
		return leasequota.Quota{Rate: 1, Burst: 3}
	}))
	srv := serve(t, l, middleware.WithHeaderKey("X-Api-Key"))
	res := get(t, srv, "X-Api-Key", "bad")
	checkProblem(t, res, http.StatusInternalServerError, "about:blank")
	if v := res.header.Values("RateLimit-Policy"); len(v) != 0 {
		t.Fatalf("RateLimit-Policy %q for an invalid quota", v)
	}
	check200(t, get(t, srv, "X-Api-Key", "good"), policy{"default", 3, 3})
	// Shadow mode passes it on, without header fields (doc.go, README).
	shadow := serve(t, l, middleware.WithHeaderKey("X-Api-Key"), middleware.WithShadow())
	res = get(t, shadow, "X-Api-Key", "bad")
	if res.status != http.StatusOK || string(res.body) != "ok" {
		t.Fatalf("shadow mode, an invalid quota: status %d, body %q; want 200 from the handler", res.status, res.body)
	}
	if v := res.header.Values("RateLimit-Policy"); len(v) != 0 {
		t.Fatalf("shadow mode: RateLimit-Policy %q for an invalid quota", v)
	}
}

// TestPolicyNameAndLegacy checks a custom policy name (escaped as an
// sf-string) and the legacy fields.
func TestPolicyNameAndLegacy(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	name := `per-ip "v1" \ test`
	srv := serve(t, l, middleware.WithPolicyName(name), middleware.WithLegacyHeaders())
	want := policy{name, 2, 4}
	res := get(t, srv)
	r := check200(t, res, want)
	legacy := func(res result, field string) string {
		t.Helper()
		v := res.header.Values(field)
		if len(v) != 1 {
			t.Fatalf("%s: %q, want one value", field, v)
		}
		return v[0]
	}
	if legacy(res, "X-RateLimit-Limit") != "2" || legacy(res, "X-RateLimit-Remaining") != strconv.FormatInt(r, 10) ||
		legacy(res, "X-RateLimit-Reset") != "0" {
		t.Fatalf("legacy fields %v", res.header)
	}
	res = exhaust(t, srv, want)
	if legacy(res, "X-RateLimit-Reset") != res.header.Get("Retry-After") ||
		legacy(res, "X-RateLimit-Remaining") != strconv.FormatInt(parseRateLimit(t, res.header).r, 10) {
		t.Fatalf("legacy fields on a 429: %v", res.header)
	}
}

// TestNewPanics checks that invalid configurations are refused at once.
func TestNewPanics(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	for name, opts := range map[string][]middleware.Option{
		"nil option":              {nil},
		"negative max wait":       {middleware.WithMaxWait(-time.Second)},
		"empty policy name":       {middleware.WithPolicyName("")},
		"non-ASCII policy":        {middleware.WithPolicyName("é")},
		"bad header":              {middleware.WithTrustedProxies(0, netip.MustParsePrefix("10.0.0.0/8"))},
		"bad prefix":              {middleware.WithTrustedProxies(middleware.XForwardedFor, netip.Prefix{})},
		"bad ipv6 bits":           {middleware.WithIPv6Prefix(129)},
		"nil key func":            {middleware.WithKeyFunc(nil)},
		"empty header":            {middleware.WithHeaderKey("")},
		"nil cost":                {middleware.WithCost(nil)},
		"nil hook":                {middleware.WithDecisionHook(nil)},
		"bad degraded mode":       {middleware.WithDegradedMode(7)},
		"nil missing-key handler": {middleware.WithMissingKeyHandler(nil)},
		"empty fallback prefix":   {middleware.WithHeaderKey("X-Api-Key"), middleware.WithClientIPFallback("")},
		"fallback without keys":   {middleware.WithClientIPFallback("ip:")},
		"fallback and handler": {middleware.WithHeaderKey("X-Api-Key"), middleware.WithClientIPFallback("ip:"),
			middleware.WithMissingKeyHandler(http.NotFoundHandler())},
	} {
		func() {
			defer func() {
				switch err, _ := recover().(error); {
				case err == nil:
					t.Errorf("%s: New did not panic with an error", name)
				case !errors.Is(err, middleware.ErrInvalidOption):
					t.Errorf("%s: New panicked with %v, want an error wrapping ErrInvalidOption", name, err)
				}
			}()
			middleware.New(l, opts...)
		}()
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Error("New(nil) did not panic")
			}
		}()
		middleware.New(nil)
	}()
}

// exhaust sends requests with the given header lines until one is
// refused, and returns it; the burst must run out within 50 requests.
func exhaust(t testing.TB, srv *httptest.Server, want policy, header ...string) result {
	t.Helper()
	for i := 0; i < 50; i++ {
		res := get(t, srv, header...)
		if res.status == http.StatusTooManyRequests {
			check429(t, res, want)
			return res
		}
		check200(t, res, want)
	}
	t.Fatalf("still admitted after 50 requests with %q", header)
	return result{}
}

// TestTooManyKeys answers 503 when the Limiter cannot track one more key.
func TestTooManyKeys(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}), leasequota.WithMaxTenants(1))
	var hook hookLog
	// DegradedAllow does not apply: admitting untracked keys would defeat
	// the bound.
	srv := serve(t, l, hook.option(), middleware.WithHeaderKey("X-Api-Key"),
		middleware.WithDegradedMode(middleware.DegradedAllow))
	for i := 0; ; i++ {
		if i == 200 {
			t.Fatal("200 new keys admitted with WithMaxTenants(1)")
		}
		res := get(t, srv, "X-Api-Key", "key-"+strconv.Itoa(i))
		if res.status == http.StatusOK {
			continue
		}
		checkProblem(t, res, http.StatusServiceUnavailable, middleware.ProblemTemporaryReducedCapacity)
		if d := hook.last(t).d; d.Reason != leasequota.ReasonTooManyTenants {
			t.Fatalf("reason %v, want too_many_tenants", d.Reason)
		}
		if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q", res.header.Get("Retry-After"))
		}
		break
	}
}

// TestAdmissionAllocations: an admitted request of one policy, keyed by
// client IP, allocates once: RateLimit's value and its slice
// (RateLimit-Policy's is cached, the key is a substring of RemoteAddr).
// The count is an average
// over many requests, rounded down, so that the few allocations of the
// limiter's syncer, running meanwhile, do not make it fail.
func TestAdmissionAllocations(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e9, Burst: 1 << 40}))
	h := middleware.New(l)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest(http.MethodGet, "/", nil)
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req) // the key's first lease
	if rec.Code != http.StatusOK {
		t.Fatalf("status %d", rec.Code)
	}
	n := testing.AllocsPerRun(1000, func() {
		clear(rec.Header())
		h.ServeHTTP(rec, req)
	})
	if rec.Code != http.StatusOK || rec.Header().Get("RateLimit") == "" {
		t.Fatalf("status %d, header %v", rec.Code, rec.Header())
	}
	if n != 1 {
		t.Errorf("an admitted request allocates %v times, want 1 (the RateLimit value)", n)
	}
}
