package middleware_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// tenantKey keys requests by their X-Tenant header under "tenant:".
func tenantKey(r *http.Request) string {
	if v := r.Header.Get("X-Tenant"); v != "" {
		return "tenant:" + v
	}
	return ""
}

// stackedQuotas gives "ip:" keys ip and "tenant:" keys tenant.
func stackedQuotas(ip, tenant leasequota.Quota) leasequota.Option {
	return leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
		if strings.HasPrefix(key, "ip:") {
			return ip
		}
		return tenant
	})
}

// stacked is the options of a per-IP policy "ip" and a per-tenant policy
// "tenant", in that order.
func stacked(opts ...middleware.Option) []middleware.Option {
	return append([]middleware.Option{
		middleware.WithClientIPPolicy("ip", "ip:"),
		middleware.WithPolicy("tenant", tenantKey),
	}, opts...)
}

// parsePolicies parses RateLimit-Policy as an sf-list of policies.
func parsePolicies(t testing.TB, h http.Header) []policy {
	t.Helper()
	list, err := httpsfv.UnmarshalList(h.Values("RateLimit-Policy"))
	if err != nil {
		t.Fatalf("RateLimit-Policy %q: %v", h.Values("RateLimit-Policy"), err)
	}
	var ps []policy
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		if !ok {
			t.Fatalf("RateLimit-Policy member %T, want an Item", m)
		}
		name, _ := item.Value.(string)
		q, _ := item.Params.Get("q")
		w, _ := item.Params.Get("w")
		qi, _ := q.(int64)
		wi, _ := w.(int64)
		ps = append(ps, policy{name, qi, wi})
	}
	return ps
}

func checkPolicies(t testing.TB, res result, want ...policy) {
	t.Helper()
	got := parsePolicies(t, res.header)
	if len(got) != len(want) {
		t.Fatalf("RateLimit-Policy %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("RateLimit-Policy %+v, want %+v", got, want)
		}
	}
}

// TestPoliciesStacked limits by client IP and tenant at once: one
// RateLimit-Policy lists both, RateLimit is the deciding policy's, and a
// refusal names the policy that refused.
func TestPoliciesStacked(t *testing.T) {
	leakCheck(t)
	ipQ, tenantQ := leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 2, MaxLease: 2}
	l := newLimiter(t, stackedQuotas(ipQ, tenantQ))
	var hook hookLog
	srv := serve(t, l, stacked(hook.option())...)
	ipP, tenantP := policy{"ip", 5, 500}, policy{"tenant", 2, 200}

	for i := 0; i < 2; i++ {
		res := get(t, srv, "X-Tenant", "acme")
		if res.status != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200", i, res.status)
		}
		checkPolicies(t, res, ipP, tenantP)
		rl := parseRateLimit(t, res.header)
		d := hook.last(t)
		want := map[string]policy{"ip:127.0.0.1": ipP, "tenant:acme": tenantP}[d.key]
		if want.name == "" || rl.name != want.name || !rl.hasT || rl.t != 0 || rl.r != d.d.FleetRemaining {
			t.Fatalf("RateLimit %+v, hook %q %+v: want the deciding policy's, t=0", rl, d.key, d.d)
		}
	}
	res := get(t, srv, "X-Tenant", "acme")
	check429Policy(t, res, tenantP, ipP, tenantP)
	if d := hook.last(t); d.key != "tenant:acme" || d.d.Reason != leasequota.ReasonExhausted {
		t.Fatalf("hook saw %q %+v, want tenant:acme exhausted", d.key, d.d)
	}
}

// check429Policy checks a 429 refused by policy by: problem, Retry-After
// equal to t, RateLimit of by, RateLimit-Policy listing all.
func check429Policy(t testing.TB, res result, by policy, all ...policy) {
	t.Helper()
	p := checkProblem(t, res, http.StatusTooManyRequests, middleware.ProblemQuotaExceeded)
	if len(p.ViolatedPolicies) != 1 || p.ViolatedPolicies[0] != by.name || !strings.Contains(p.Detail, strconv.Quote(by.name)) {
		t.Fatalf("violated-policies %q, detail %q, want [%q]", p.ViolatedPolicies, p.Detail, by.name)
	}
	checkPolicies(t, res, all...)
	rl := parseRateLimit(t, res.header)
	if rl.name != by.name || !rl.hasT || rl.t < 1 || rl.r > by.q {
		t.Fatalf("RateLimit %+v, want policy %q with t >= 1", rl, by.name)
	}
	if ra := res.header.Get("Retry-After"); ra != strconv.FormatInt(rl.t, 10) {
		t.Fatalf("Retry-After %q, RateLimit t %d: want them equal", ra, rl.t)
	}
}

// TestPoliciesNothingSpentWhenDenied is the bug of #17: a per-IP token
// must not be spent when the tenant policy refuses. The IP's burst of 5
// (refilling 0.01/s) admits exactly 5 requests over three tenants of 2,
// whatever the tenant refusals in between; then the IP policy refuses.
func TestPoliciesNothingSpentWhenDenied(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 2, MaxLease: 2}))
	var hook hookLog
	srv := serve(t, l, stacked(hook.option())...)
	ipP, tenantP := policy{"ip", 5, 500}, policy{"tenant", 2, 200}

	admitted := 0
	for _, tenant := range []string{"a", "b"} {
		for i := 0; i < 2; i++ {
			if res := get(t, srv, "X-Tenant", tenant); res.status != http.StatusOK {
				t.Fatalf("tenant %s request %d: status %d, want 200", tenant, i, res.status)
			}
			admitted++
		}
		for i := 0; i < 5; i++ { // refused by the tenant: must not spend the IP's tokens
			check429Policy(t, get(t, srv, "X-Tenant", tenant), tenantP, ipP, tenantP)
		}
	}
	if res := get(t, srv, "X-Tenant", "c"); res.status != http.StatusOK {
		t.Fatalf("the IP's 5th token: status %d, want 200 (IP tokens were spent by refused requests)", res.status)
	}
	admitted++
	check429Policy(t, get(t, srv, "X-Tenant", "c"), ipP, ipP, tenantP)
	if d := hook.last(t); d.key != "ip:127.0.0.1" {
		t.Fatalf("deciding key %q, want ip:127.0.0.1", d.key)
	}
	if admitted != 5 {
		t.Fatalf("%d admitted, want 5", admitted)
	}
}

// TestPoliciesWait waits, for several keys, for a refill that comes
// within the max wait.
func TestPoliciesWait(t *testing.T) {
	leakCheck(t)
	tenantQ := leasequota.Quota{Rate: 20, Burst: 2}
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 100, Burst: 100}, tenantQ))
	srv := serve(t, l, stacked(middleware.WithMaxWait(time.Second))...)
	const n = 8
	start := time.Now()
	for i := 0; i < n; i++ {
		if res := get(t, srv, "X-Tenant", "acme"); res.status != http.StatusOK {
			t.Fatalf("request %d: status %d, want 200 after a wait within 1 s", i, res.status)
		}
	}
	// The tenant's bound: n <= Burst + Rate*T.
	if least := time.Duration(float64(n-tenantQ.Burst) / tenantQ.Rate * float64(time.Second)); time.Since(start) < least*9/10 {
		t.Fatalf("%d admitted in %v, the tenant's quota allows that in no less than %v", n, time.Since(start), least)
	}
}

// TestPoliciesLegacy gives the legacy fields of the deciding policy.
func TestPoliciesLegacy(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
	srv := serve(t, l, stacked(middleware.WithLegacyHeaders())...)
	get(t, srv, "X-Tenant", "acme")
	res := get(t, srv, "X-Tenant", "acme")
	check429Policy(t, res, policy{"tenant", 1, 100}, policy{"ip", 5, 500}, policy{"tenant", 1, 100})
	if res.header.Get("X-RateLimit-Limit") != "1" || res.header.Get("X-RateLimit-Reset") != res.header.Get("Retry-After") ||
		res.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("legacy fields %v, want the tenant policy's", res.header)
	}
}

// TestPoliciesMissingKey answers a request without a key for one policy
// as a request without a key: 400 naming the policy (or the missing-key
// handler), nothing decided nor spent; a key with the client IP policy's
// prefix is refused; two policies with one key are a server error.
func TestPoliciesMissingKey(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}, leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}))
	var hook hookLog
	srv := serve(t, l, stacked(hook.option())...)
	if p := checkProblem(t, get(t, srv), http.StatusBadRequest, "about:blank"); !strings.Contains(p.Detail, `"tenant"`) {
		t.Fatalf("detail %q does not name the policy", p.Detail)
	}
	// A key with the client IP policy's prefix is refused.
	reserved := serve(t, l, hook.option(), middleware.WithClientIPPolicy("ip", "ip:"),
		middleware.WithPolicy("tenant", middleware.HeaderKey("X-Tenant")))
	if p := checkProblem(t, get(t, reserved, "X-Tenant", "ip:127.0.0.1"), http.StatusBadRequest, "about:blank"); !strings.Contains(p.Detail, `"tenant"`) {
		t.Fatalf("detail %q does not name the policy", p.Detail)
	}
	if hook.len() != 0 {
		t.Fatal("a request without a key was decided")
	}
	// The IP's one token is still there.
	if res := get(t, srv, "X-Tenant", "acme"); res.status != http.StatusOK {
		t.Fatalf("status %d, want 200: a request without a key spent the IP's token", res.status)
	}

	t.Run("handler", func(t *testing.T) {
		srv := serve(t, l, stacked(middleware.WithMissingKeyHandler(http.NotFoundHandler()))...)
		if res := get(t, srv); res.status != http.StatusNotFound {
			t.Fatalf("status %d, want the handler's 404", res.status)
		}
	})
	t.Run("same key twice", func(t *testing.T) {
		srv := serve(t, l, middleware.WithPolicy("a", tenantKey), middleware.WithPolicy("b", tenantKey))
		checkProblem(t, get(t, srv, "X-Tenant", "x"), http.StatusInternalServerError, "about:blank")
	})
}

// TestDenialHandler answers refusals with the user's handler, the header
// fields set before it runs.
func TestDenialHandler(t *testing.T) {
	leakCheck(t)
	var got []middleware.Denial
	deny := middleware.WithDenialHandler(func(w http.ResponseWriter, r *http.Request, d middleware.Denial) {
		got = append(got, d)
		if w.Header().Get("Retry-After") == "" && d.Status == http.StatusTooManyRequests {
			t.Error("Retry-After not set before the denial handler")
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(http.StatusTeapot)
		io.WriteString(w, "slow down")
	})
	t.Run("several policies", func(t *testing.T) {
		got = nil
		l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
		srv := serve(t, l, stacked(deny)...)
		get(t, srv, "X-Tenant", "acme")
		res := get(t, srv, "X-Tenant", "acme")
		if res.status != http.StatusTeapot || string(res.body) != "slow down" {
			t.Fatalf("status %d body %q, want the handler's 418", res.status, res.body)
		}
		if rl := parseRateLimit(t, res.header); rl.name != "tenant" || rl.t < 1 {
			t.Fatalf("RateLimit %+v, want the tenant's with t", rl)
		}
		if len(got) != 1 || got[0].Status != http.StatusTooManyRequests || got[0].Policy != "tenant" ||
			got[0].Key != "tenant:acme" || got[0].Decision.Allowed || got[0].Detail == "" {
			t.Fatalf("denials %+v, want one 429 of policy tenant, key tenant:acme", got)
		}
	})
	t.Run("one policy", func(t *testing.T) {
		got = nil
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
		srv := serve(t, l, deny)
		check200(t, get(t, srv), policy{"default", 1, 100})
		if res := get(t, srv); res.status != http.StatusTeapot {
			t.Fatalf("status %d, want 418", res.status)
		}
		if len(got) != 1 || got[0].Policy != "default" || got[0].Key != "127.0.0.1" {
			t.Fatalf("denials %+v", got)
		}
	})
	t.Run("unavailable", func(t *testing.T) {
		got = nil
		srv := serve(t, deadLimiter(t, leasequota.Quota{Rate: 10, Burst: 10}, leasequota.FailClosed), stacked(deny)...)
		if res := get(t, srv, "X-Tenant", "acme"); res.status != http.StatusTeapot {
			t.Fatalf("status %d, want 418", res.status)
		}
		if len(got) != 1 || got[0].Status != http.StatusServiceUnavailable || got[0].Policy != "" ||
			got[0].Decision.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("denials %+v, want one 503", got)
		}
	})
}

// TestPoliciesDegraded covers Redis down with several keys.
func TestPoliciesDegraded(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 10, Burst: 10}
	both := []policy{{"ip", 10, 1}, {"tenant", 10, 1}}
	t.Run("deny", func(t *testing.T) {
		var hook hookLog
		srv := serve(t, deadLimiter(t, q, leasequota.FailClosed), stacked(hook.option())...)
		res := get(t, srv, "X-Tenant", "acme")
		checkProblem(t, res, http.StatusServiceUnavailable, middleware.ProblemTemporaryReducedCapacity)
		if d := hook.last(t).d; d.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("reason %v, want unavailable", d.Reason)
		}
		if ra, err := strconv.Atoi(res.header.Get("Retry-After")); err != nil || ra < 1 {
			t.Fatalf("Retry-After %q, want >= 1", res.header.Get("Retry-After"))
		}
	})
	t.Run("allow", func(t *testing.T) {
		srv := serve(t, deadLimiter(t, q, leasequota.FailClosed), stacked(middleware.WithDegradedMode(middleware.DegradedAllow))...)
		res := get(t, srv, "X-Tenant", "acme")
		if res.status != http.StatusOK {
			t.Fatalf("status %d, want 200", res.status)
		}
		checkPolicies(t, res, both...)
		if v := res.header.Values("RateLimit"); len(v) != 0 {
			t.Fatalf("RateLimit %q when degraded, want none", v)
		}
	})
	t.Run("closed", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		srv := serve(t, l, stacked()...)
		if res := get(t, srv, "X-Tenant", "acme"); res.status != http.StatusOK {
			t.Fatalf("status %d, want 200", res.status)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		checkProblem(t, get(t, srv, "X-Tenant", "acme"), http.StatusServiceUnavailable, middleware.ProblemTemporaryReducedCapacity)
	})
}

// TestPoliciesShadow counts several keys without refusing.
func TestPoliciesShadow(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
	var hook hookLog
	srv := serve(t, l, stacked(middleware.WithShadow(), hook.option())...)
	for i := 0; i < 3; i++ {
		if res := get(t, srv, "X-Tenant", "acme"); res.status != http.StatusOK {
			t.Fatalf("status %d in shadow mode", res.status)
		}
	}
	// The tenant's burst is 1: the third request at least would be refused.
	if d := hook.last(t).d; d.Allowed || d.Tenant == "" {
		t.Fatalf("hook saw %+v, want a refusal naming its key", d)
	}
}

// TestPolicyOptionsPanic checks the validation of several policies.
func TestPolicyOptionsPanic(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	for name, opts := range map[string][]middleware.Option{
		"duplicate name":     {middleware.WithPolicy("a", tenantKey), middleware.WithPolicy("a", tenantKey)},
		"duplicate ip name":  {middleware.WithClientIPPolicy("a", "ip:"), middleware.WithPolicy("a", tenantKey)},
		"duplicate prefix":   {middleware.WithClientIPPolicy("a", "ip:"), middleware.WithClientIPPolicy("b", "ip:")},
		"empty name":         {middleware.WithPolicy("", tenantKey)},
		"empty ip name":      {middleware.WithClientIPPolicy("", "ip:")},
		"non-ASCII name":     {middleware.WithPolicy("é", tenantKey)},
		"nil key func":       {middleware.WithPolicy("a", nil)},
		"empty ip prefix":    {middleware.WithClientIPPolicy("a", "")},
		"with header key":    {middleware.WithPolicy("a", tenantKey), middleware.WithHeaderKey("X-Api-Key")},
		"with key func":      {middleware.WithKeyFunc(tenantKey), middleware.WithClientIPPolicy("a", "ip:")},
		"with policy name":   {middleware.WithPolicy("a", tenantKey), middleware.WithPolicyName("b")},
		"nil denial handler": {middleware.WithDenialHandler(nil)},
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
	// Valid: today's single-policy options with a denial handler, and several policies.
	middleware.New(l, middleware.WithHeaderKey("X-Api-Key"), middleware.WithPolicyName("key"),
		middleware.WithDenialHandler(func(http.ResponseWriter, *http.Request, middleware.Denial) {}))
	middleware.New(l, stacked()...)(okHandler).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/", nil))
}
