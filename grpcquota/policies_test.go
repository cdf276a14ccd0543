package grpcquota_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// tenantKey keys calls by their x-tenant metadata under "tenant:".
func tenantKey(ctx context.Context, method string) string {
	if v := grpcquota.MetadataKey("x-tenant")(ctx, method); v != "" {
		return "tenant:" + v
	}
	return ""
}

// stackedQuotas gives "peer:" keys peer and the others tenant.
func stackedQuotas(peer, tenant leasequota.Quota) leasequota.Option {
	return leasequota.WithQuotaFunc(func(key string) leasequota.Quota {
		if strings.HasPrefix(key, "peer:") {
			return peer
		}
		return tenant
	})
}

// stacked is the options of a per-peer policy "peer" and a per-tenant
// policy "tenant", in that order.
func stacked(opts ...grpcquota.Option) []grpcquota.Option {
	return append([]grpcquota.Option{
		grpcquota.WithPeerPolicy("peer", "peer:"),
		grpcquota.WithPolicy("tenant", tenantKey),
	}, opts...)
}

// member is a parsed member of "ratelimit-policy".
type member struct {
	name string
	q, w int64
}

// policies parses the "ratelimit-policy" metadata as an sf-list.
func policies(t *testing.T, md metadata.MD) []member {
	t.Helper()
	list, err := httpsfv.UnmarshalList(md.Get(grpcquota.MetadataPolicy))
	if err != nil {
		t.Fatalf("ratelimit-policy %q: %v", md.Get(grpcquota.MetadataPolicy), err)
	}
	var ms []member
	for _, m := range list {
		item, ok := m.(httpsfv.Item)
		name, isString := item.Value.(string)
		q, _ := item.Params.Get("q")
		w, _ := item.Params.Get("w")
		qi, qok := q.(int64)
		wi, wok := w.(int64)
		if !ok || !isString || !qok || !wok || len(item.Params.Names()) != 2 {
			t.Fatalf("ratelimit-policy %q: member %v, want a String with Integers q and w", md.Get(grpcquota.MetadataPolicy), m)
		}
		ms = append(ms, member{name, qi, wi})
	}
	return ms
}

func checkPolicies(t *testing.T, md metadata.MD, want ...member) {
	t.Helper()
	got := policies(t, md)
	if len(got) != len(want) {
		t.Fatalf("ratelimit-policy %+v, want %+v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("ratelimit-policy %+v, want %+v", got, want)
		}
	}
}

// checkRefusedBy checks a refusal by policy by: ResourceExhausted with a
// QuotaFailure naming it and RetryInfo, "ratelimit" of by with t the
// RetryInfo's delay in whole seconds, "ratelimit-policy" listing all.
func checkRefusedBy(t *testing.T, md metadata.MD, err error, by member, all ...member) {
	t.Helper()
	delay := refusal(t, err, by.name)
	if delay <= 0 {
		t.Fatalf("%v: no RetryInfo", err)
	}
	checkPolicies(t, md, all...)
	name, p := sfItem(t, md, grpcquota.MetadataRateLimit)
	if want := int64((delay + time.Second - 1) / time.Second); name != by.name || p["t"] != want || p["r"] > by.q {
		t.Fatalf("ratelimit %q with RetryInfo %v, want policy %q, t=%d", md.Get(grpcquota.MetadataRateLimit), delay, by.name, want)
	}
}

// TestPoliciesStacked limits by peer and tenant at once: the metadata
// lists both policies, "ratelimit" is the deciding policy's, and a
// refusal names the policy that refused.
func TestPoliciesStacked(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 2, MaxLease: 2}))
	var hook hookLog
	c := serve(t, l, stacked(hook.option(), grpcquota.WithRateLimitMetadata())...)
	peerP, tenantP := member{"peer", 5, 500}, member{"tenant", 2, 200}

	for i := 0; i < 2; i++ {
		md, err := check(t, c, "x-tenant", "acme")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		checkPolicies(t, md, peerP, tenantP)
		key, d := hook.last(t)
		want := map[string]member{"peer:127.0.0.1": peerP, "tenant:acme": tenantP}[key]
		name, p := sfItem(t, md, grpcquota.MetadataRateLimit)
		if want.name == "" || key != d.Tenant || name != want.name || p["r"] != d.FleetRemaining || p["t"] != 0 {
			t.Fatalf("ratelimit %q, hook %q %+v: want the deciding policy's, t=0", md.Get(grpcquota.MetadataRateLimit), key, d)
		}
	}
	md, err := check(t, c, "x-tenant", "acme")
	checkRefusedBy(t, md, err, tenantP, peerP, tenantP)
	if key, d := hook.last(t); key != "tenant:acme" || d.Reason != leasequota.ReasonExhausted {
		t.Fatalf("hook saw %q %+v, want tenant:acme exhausted", key, d)
	}
}

// TestPoliciesNothingSpentWhenDenied: a peer's token is not spent when
// the tenant policy refuses. The peer's burst of 5 (refilling 0.01/s)
// admits exactly 5 calls over three tenants of 2, whatever the tenant
// refusals in between; then the peer policy refuses.
func TestPoliciesNothingSpentWhenDenied(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 2, MaxLease: 2}))
	var hook hookLog
	c := serve(t, l, stacked(hook.option(), grpcquota.WithRateLimitMetadata())...)
	peerP, tenantP := member{"peer", 5, 500}, member{"tenant", 2, 200}

	admitted := 0
	for _, tenant := range []string{"a", "b"} {
		for i := 0; i < 2; i++ {
			if _, err := check(t, c, "x-tenant", tenant); err != nil {
				t.Fatalf("tenant %s call %d: %v", tenant, i, err)
			}
			admitted++
		}
		for i := 0; i < 5; i++ { // refused by the tenant: must not spend the peer's tokens
			md, err := check(t, c, "x-tenant", tenant)
			checkRefusedBy(t, md, err, tenantP, peerP, tenantP)
		}
	}
	if _, err := check(t, c, "x-tenant", "c"); err != nil {
		t.Fatalf("the peer's 5th token: %v (peer tokens were spent by refused calls)", err)
	}
	admitted++
	md, err := check(t, c, "x-tenant", "c")
	checkRefusedBy(t, md, err, peerP, peerP, tenantP)
	if key, _ := hook.last(t); key != "peer:127.0.0.1" {
		t.Fatalf("deciding key %q, want peer:127.0.0.1", key)
	}
	if admitted != 5 {
		t.Fatalf("%d admitted, want 5", admitted)
	}
}

// watch opens a health Watch stream with the given metadata pairs and
// returns its header metadata and the error of its first Recv (nil when
// the stream was admitted and served).
func watch(t *testing.T, ctx context.Context, c healthpb.HealthClient, md ...string) (metadata.MD, error) {
	t.Helper()
	s, err := c.Watch(metadata.AppendToOutgoingContext(ctx, md...), &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err == nil && resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("stream served %v", resp)
	}
	header, herr := s.Header()
	if herr != nil && err == nil {
		t.Fatalf("header of an admitted stream: %v", herr)
	}
	return header, err
}

// TestPoliciesStream charges a stream once to every policy when it opens,
// and spends nothing when one refuses it.
func TestPoliciesStream(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 2, MaxLease: 2}, leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
	var hook hookLog
	c := serve(t, l, stacked(hook.option(), grpcquota.WithRateLimitMetadata())...)
	peerP, tenantP := member{"peer", 2, 200}, member{"tenant", 1, 100}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	md, err := watch(t, ctx, c, "x-tenant", "a")
	if err != nil {
		t.Fatalf("first stream: %v", err)
	}
	checkPolicies(t, md, peerP, tenantP)
	// The tenant has no token left here nor in its bucket (its Burst of 1
	// leased): least remaining.
	if key, d := hook.last(t); key != d.Tenant || d.Remaining != 0 || d.FleetRemaining != 0 {
		t.Fatalf("hook saw %q %+v, want the deciding key with 0 remaining", key, d)
	} else if name, p := sfItem(t, md, grpcquota.MetadataRateLimit); name != map[string]string{"peer:127.0.0.1": "peer", "tenant:a": "tenant"}[key] ||
		p["r"] != 0 || p["t"] != 0 {
		t.Fatalf("ratelimit %q, deciding key %q: want its policy, r=0, t=0", md.Get(grpcquota.MetadataRateLimit), key)
	}
	md, err = watch(t, ctx, c, "x-tenant", "a")
	checkRefusedBy(t, md, err, tenantP, peerP, tenantP)
	if _, err := watch(t, ctx, c, "x-tenant", "b"); err != nil {
		t.Fatalf("tenant b: %v (the refused stream spent the peer's token)", err)
	}
	md, err = watch(t, ctx, c, "x-tenant", "c")
	checkRefusedBy(t, md, err, peerP, peerP, tenantP)
	if key, d := hook.last(t); key != "peer:127.0.0.1" || d.Reason != leasequota.ReasonExhausted {
		t.Fatalf("hook saw %q %+v, want peer:127.0.0.1 exhausted", key, d)
	}
}

// TestPoliciesWait waits, for several keys, for a refill that comes
// within the max wait, and refuses at once without one.
func TestPoliciesWait(t *testing.T) {
	leakCheck(t)
	tenantQ := leasequota.Quota{Rate: 20, Burst: 2}
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 100, Burst: 100}, tenantQ))
	c := serve(t, l, stacked(grpcquota.WithMaxWait(time.Second))...)
	const n = 8
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := check(t, c, "x-tenant", "acme"); err != nil {
			t.Fatalf("call %d: %v, want it admitted after a wait within 1 s", i, err)
		}
	}
	// The tenant's bound: n <= Burst + Rate*T.
	if least := time.Duration(float64(n-tenantQ.Burst) / tenantQ.Rate * float64(time.Second)); time.Since(start) < least*9/10 {
		t.Fatalf("%d admitted in %v, the tenant's quota allows that in no less than %v", n, time.Since(start), least)
	}

	c = serve(t, l, stacked(grpcquota.WithMaxWait(0))...)
	var err error
	for i := 0; err == nil; i++ {
		if i == 50 {
			t.Fatal("no refusal in 50 calls without a wait")
		}
		_, err = check(t, c, "x-tenant", "other")
	}
	refusal(t, err, "tenant")
}

// TestPoliciesMissingKey ends a call without a key for one policy with
// InvalidArgument naming the policy (or WithMissingKeyError's answer),
// nothing decided nor spent; a key with the peer policy's prefix is
// refused; two policies with one key are a server error.
func TestPoliciesMissingKey(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}, leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}))
	var hook hookLog
	c := serve(t, l, stacked(hook.option())...)
	if _, err := check(t, c); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"tenant"`) {
		t.Fatalf("no tenant: %v, want InvalidArgument naming the policy", err)
	}
	// A key with the peer policy's prefix is refused.
	reserved := serve(t, l, hook.option(), grpcquota.WithPeerPolicy("peer", "peer:"),
		grpcquota.WithPolicy("tenant", grpcquota.MetadataKey("x-tenant")))
	if _, err := check(t, reserved, "x-tenant", "peer:127.0.0.1"); status.Code(err) != codes.InvalidArgument ||
		!strings.Contains(err.Error(), `"tenant"`) {
		t.Fatalf("reserved key: %v, want InvalidArgument naming the policy", err)
	}
	// Without a peer (in-process), the peer policy has no key.
	intercept := grpcquota.UnaryServerInterceptor(l, stacked(hook.option())...)
	called := false
	ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-tenant", "acme"))
	_, err := intercept(ctx, nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"},
		func(context.Context, any) (any, error) { called = true; return nil, nil })
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"peer"`) || called {
		t.Fatalf("no peer: %v, handler called %v; want InvalidArgument naming the policy", err, called)
	}
	if hook.len() != 0 {
		t.Fatal("a call without a key was decided")
	}
	// The peer's one token is still there.
	if _, err := check(t, c, "x-tenant", "acme"); err != nil {
		t.Fatalf("%v: a call without a key spent the peer's token", err)
	}

	t.Run("missing-key error", func(t *testing.T) {
		c := serve(t, l, stacked(grpcquota.WithMissingKeyError(func(context.Context, string) error {
			return status.Error(codes.Unauthenticated, "who are you")
		}))...)
		if _, err := check(t, c); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("no tenant: %v, want the function's Unauthenticated", err)
		}
	})
	t.Run("shadow", func(t *testing.T) {
		c := serve(t, l, stacked(grpcquota.WithShadow())...)
		if _, err := check(t, c); err != nil {
			t.Fatalf("no tenant in shadow mode: %v, want to proceed", err)
		}
	})
	t.Run("same key twice", func(t *testing.T) {
		var hook hookLog
		c := serve(t, l, hook.option(), grpcquota.WithPolicy("a", tenantKey), grpcquota.WithPolicy("b", tenantKey))
		if _, err := check(t, c, "x-tenant", "x"); status.Code(err) != codes.Internal {
			t.Fatalf("one key for two policies: %v, want Internal", err)
		}
		if _, d := hook.last(t); d.Reason != leasequota.ReasonDuplicateTenant {
			t.Fatalf("reason %v, want duplicate_tenant", d.Reason)
		}
	})
}

// denials records the denials a WithDenialHandler sees, and answers
// with err (nil: the default answer).
type denials struct {
	mu  sync.Mutex
	all []grpcquota.Denial
	err error
}

func (dn *denials) option() grpcquota.Option {
	return grpcquota.WithDenialHandler(func(_ context.Context, _ string, d grpcquota.Denial) error {
		dn.mu.Lock()
		defer dn.mu.Unlock()
		dn.all = append(dn.all, d)
		return dn.err
	})
}

func (dn *denials) only(t *testing.T) grpcquota.Denial {
	t.Helper()
	dn.mu.Lock()
	defer dn.mu.Unlock()
	if len(dn.all) != 1 {
		t.Fatalf("%d denials %+v, want 1", len(dn.all), dn.all)
	}
	return dn.all[0]
}

// checkDefault checks that st is the default answer to a refusal by
// policy: ResourceExhausted with RetryInfo and a QuotaFailure naming it.
func checkDefault(t *testing.T, st *status.Status, policy string) {
	t.Helper()
	if st == nil {
		t.Fatal("no default status")
	}
	refusal(t, st.Err(), policy)
	for _, d := range st.Details() {
		if _, ok := d.(*errdetails.RetryInfo); ok {
			return
		}
	}
	t.Fatalf("%v: no RetryInfo", st.Err())
}

// TestDenialHandler ends refusals with the user's error, the metadata
// set before it; a nil error gives the default answer.
func TestDenialHandler(t *testing.T) {
	leakCheck(t)
	custom := status.Error(codes.PermissionDenied, "slow down")
	quotas := stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1})
	t.Run("several policies", func(t *testing.T) {
		l := newLimiter(t, quotas)
		dn := denials{err: custom}
		c := serve(t, l, stacked(dn.option(), grpcquota.WithRateLimitMetadata())...)
		if _, err := check(t, c, "x-tenant", "acme"); err != nil {
			t.Fatal(err)
		}
		md, err := check(t, c, "x-tenant", "acme")
		if st := status.Convert(err); st.Code() != codes.PermissionDenied || st.Message() != "slow down" {
			t.Fatalf("%v, want the handler's PermissionDenied", err)
		}
		if name, p := sfItem(t, md, grpcquota.MetadataRateLimit); name != "tenant" || p["t"] < 1 {
			t.Fatalf("ratelimit %q, want the tenant's with t >= 1", md.Get(grpcquota.MetadataRateLimit))
		}
		d := dn.only(t)
		if d.Code != codes.ResourceExhausted || d.Policy != "tenant" || d.Key != "tenant:acme" || d.Decision.Allowed ||
			d.Decision.Tenant != d.Key {
			t.Fatalf("denial %+v, want ResourceExhausted of policy tenant, key tenant:acme", d)
		}
		checkDefault(t, d.Status, "tenant")
	})
	t.Run("stream", func(t *testing.T) {
		l := newLimiter(t, quotas)
		dn := denials{err: custom}
		c := serve(t, l, stacked(dn.option())...)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		if _, err := watch(t, ctx, c, "x-tenant", "acme"); err != nil {
			t.Fatal(err)
		}
		if _, err := watch(t, ctx, c, "x-tenant", "acme"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v, want the handler's PermissionDenied", err)
		}
		if d := dn.only(t); d.Policy != "tenant" || d.Key != "tenant:acme" {
			t.Fatalf("denial %+v", d)
		}
	})
	t.Run("nil is the default", func(t *testing.T) {
		l := newLimiter(t, quotas)
		var dn denials
		c := serve(t, l, stacked(dn.option())...)
		check(t, c, "x-tenant", "acme")
		_, err := check(t, c, "x-tenant", "acme")
		refusal(t, err, "tenant")
		dn.only(t)
	})
	t.Run("one policy", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
		dn := denials{err: custom}
		c := serve(t, l, dn.option())
		if _, err := check(t, c); err != nil {
			t.Fatal(err)
		}
		if _, err := check(t, c); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v, want PermissionDenied", err)
		}
		d := dn.only(t)
		if d.Code != codes.ResourceExhausted || d.Policy != "default" || d.Key != "127.0.0.1" {
			t.Fatalf("denial %+v", d)
		}
		checkDefault(t, d.Status, "default")
	})
	t.Run("unavailable", func(t *testing.T) {
		dn := denials{err: custom}
		c := serve(t, deadLimiter(t, leasequota.Quota{Rate: 10, Burst: 10}, leasequota.FailClosed), stacked(dn.option())...)
		if _, err := check(t, c, "x-tenant", "acme"); status.Code(err) != codes.PermissionDenied {
			t.Fatalf("%v, want PermissionDenied", err)
		}
		d := dn.only(t)
		if d.Code != codes.Unavailable || d.Policy != "" || d.Decision.Reason != leasequota.ReasonUnavailable ||
			d.Status.Code() != codes.Unavailable {
			t.Fatalf("denial %+v, want one Unavailable", d)
		}
	})
	t.Run("not for missing keys", func(t *testing.T) {
		l := newLimiter(t, quotas)
		dn := denials{err: custom}
		c := serve(t, l, stacked(dn.option())...)
		if _, err := check(t, c); status.Code(err) != codes.InvalidArgument {
			t.Fatalf("%v, want InvalidArgument", err)
		}
		if len(dn.all) != 0 {
			t.Fatalf("denials %+v for a call without a key", dn.all)
		}
	})
}

// TestPoliciesDegraded covers Redis down with several keys.
func TestPoliciesDegraded(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 10, Burst: 10}
	both := []member{{"peer", 10, 1}, {"tenant", 10, 1}}
	t.Run("deny", func(t *testing.T) {
		var hook hookLog
		c := serve(t, deadLimiter(t, q, leasequota.FailClosed), stacked(hook.option(), grpcquota.WithRateLimitMetadata())...)
		for _, call := range []func() (metadata.MD, error){
			func() (metadata.MD, error) { return check(t, c, "x-tenant", "acme") },
			func() (metadata.MD, error) { return watch(t, context.Background(), c, "x-tenant", "acme") },
		} {
			md, err := call()
			st := status.Convert(err)
			retry := false
			for _, d := range st.Details() {
				if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay().AsDuration() > 0 {
					retry = true
				}
			}
			if st.Code() != codes.Unavailable || !retry {
				t.Fatalf("Redis down: %v, want Unavailable with RetryInfo", err)
			}
			if key, d := hook.last(t); d.Reason != leasequota.ReasonUnavailable || (key != "peer:127.0.0.1" && key != "tenant:acme") {
				t.Fatalf("hook saw %q %v, want one of the keys unavailable", key, d.Reason)
			}
			checkPolicies(t, md, both...)
			if v := md.Get(grpcquota.MetadataRateLimit); len(v) != 0 {
				t.Fatalf("ratelimit %q when degraded, want none", v)
			}
		}
	})
	t.Run("allow", func(t *testing.T) {
		c := serve(t, deadLimiter(t, q, leasequota.FailClosed),
			stacked(grpcquota.WithDegradedMode(grpcquota.DegradedAllow), grpcquota.WithRateLimitMetadata())...)
		md, err := check(t, c, "x-tenant", "acme")
		if err != nil {
			t.Fatalf("Redis down, degraded allow: %v", err)
		}
		checkPolicies(t, md, both...)
		if v := md.Get(grpcquota.MetadataRateLimit); len(v) != 0 {
			t.Fatalf("ratelimit %q when degraded, want none", v)
		}
		if _, err := watch(t, context.Background(), c, "x-tenant", "acme"); err != nil {
			t.Fatalf("stream, Redis down, degraded allow: %v", err)
		}
	})
	t.Run("limiter fails open", func(t *testing.T) {
		var hook hookLog
		c := serve(t, deadLimiter(t, q, leasequota.FailOpen), stacked(hook.option(), grpcquota.WithRateLimitMetadata())...)
		for i := 0; i < 3; i++ {
			md, err := check(t, c, "x-tenant", "acme")
			if err != nil {
				t.Fatalf("call %d, Redis down, every key failing open: %v", i, err)
			}
			if _, d := hook.last(t); d.Reason != leasequota.ReasonFailOpen {
				t.Fatalf("reason %v, want fail_open", d.Reason)
			}
			checkPolicies(t, md, both...)
			if v := md.Get(grpcquota.MetadataRateLimit); len(v) != 0 {
				t.Fatalf("ratelimit %q when admitted without a lease, want none", v)
			}
		}
		if _, err := watch(t, context.Background(), c, "x-tenant", "acme"); err != nil {
			t.Fatalf("stream, Redis down, every key failing open: %v", err)
		}
	})
	t.Run("closed", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		var hook hookLog
		c := serve(t, l, stacked(hook.option())...)
		if _, err := check(t, c, "x-tenant", "acme"); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := check(t, c, "x-tenant", "acme"); status.Code(err) != codes.Unavailable {
			t.Fatalf("closed limiter: %v, want Unavailable", err)
		}
		if _, d := hook.last(t); d.Reason != leasequota.ReasonClosed {
			t.Fatalf("reason %v, want closed", d.Reason)
		}
	})
}

// TestPoliciesShadow counts several keys without refusing.
func TestPoliciesShadow(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, stackedQuotas(leasequota.Quota{Rate: 0.01, Burst: 5, MaxLease: 5}, leasequota.Quota{Rate: 0.01, Burst: 1, MaxLease: 1}))
	var hook hookLog
	dn := denials{err: status.Error(codes.PermissionDenied, "no")}
	c := serve(t, l, stacked(grpcquota.WithShadow(), hook.option(), dn.option())...)
	for i := 0; i < 3; i++ {
		if _, err := check(t, c, "x-tenant", "acme"); err != nil {
			t.Fatalf("shadow mode refused: %v", err)
		}
	}
	// The tenant's burst is 1: the second and third calls would be
	// refused (by the tenant, or by the peer when its first lease, which
	// shadow mode does not wait to refill, was smaller than its burst).
	hook.mu.Lock()
	defer hook.mu.Unlock()
	refused := 0
	for i, d := range hook.all {
		if !d.Allowed {
			refused++
			if k := hook.keys[i]; k != d.Tenant || (k != "tenant:acme" && k != "peer:127.0.0.1") {
				t.Fatalf("hook saw %q %+v, want a refusal naming one of the keys", k, d)
			}
		}
	}
	if len(hook.all) != 3 || refused < 2 {
		t.Fatalf("%d decisions, %d refused; want 3, at least 2 refused", len(hook.all), refused)
	}
	if len(dn.all) != 0 {
		t.Fatalf("denial handler called in shadow mode: %+v", dn.all)
	}
}

// TestPolicyOptionsPanic checks the validation of several policies.
func TestPolicyOptionsPanic(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	for name, opts := range map[string][]grpcquota.Option{
		"duplicate name":       {grpcquota.WithPolicy("a", tenantKey), grpcquota.WithPolicy("a", tenantKey)},
		"duplicate peer name":  {grpcquota.WithPeerPolicy("a", "peer:"), grpcquota.WithPolicy("a", tenantKey)},
		"duplicate prefix":     {grpcquota.WithPeerPolicy("a", "peer:"), grpcquota.WithPeerPolicy("b", "peer:")},
		"empty name":           {grpcquota.WithPolicy("", tenantKey)},
		"empty peer name":      {grpcquota.WithPeerPolicy("", "peer:")},
		"non-ASCII name":       {grpcquota.WithPolicy("é", tenantKey)},
		"nil key func":         {grpcquota.WithPolicy("a", nil)},
		"empty peer prefix":    {grpcquota.WithPeerPolicy("a", "")},
		"with metadata key":    {grpcquota.WithPolicy("a", tenantKey), grpcquota.WithMetadataKey("x-api-key")},
		"with key func":        {grpcquota.WithKeyFunc(tenantKey), grpcquota.WithPeerPolicy("a", "peer:")},
		"with policy name":     {grpcquota.WithPolicy("a", tenantKey), grpcquota.WithPolicyName("b")},
		"with peer fallback":   {grpcquota.WithPolicy("a", tenantKey), grpcquota.WithPeerFallback("peer:")},
		"nil denial handler":   {grpcquota.WithDenialHandler(nil)},
		"policy and nil after": {grpcquota.WithPolicy("a", tenantKey), nil},
	} {
		for _, build := range []func(){
			func() { grpcquota.UnaryServerInterceptor(l, opts...) },
			func() { grpcquota.StreamServerInterceptor(l, opts...) },
		} {
			func() {
				defer func() {
					switch err, _ := recover().(error); {
					case err == nil:
						t.Errorf("%s: no panic with an error", name)
					case !errors.Is(err, grpcquota.ErrInvalidOption):
						t.Errorf("%s: panicked with %v, want an error wrapping ErrInvalidOption", name, err)
					}
				}()
				build()
			}()
		}
	}
	// Valid: today's single-policy options with a denial handler, several
	// policies, and several policies with a missing-key error.
	deny := grpcquota.WithDenialHandler(func(context.Context, string, grpcquota.Denial) error { return nil })
	grpcquota.UnaryServerInterceptor(l, grpcquota.WithMetadataKey("x-api-key"), grpcquota.WithPolicyName("key"), deny)
	grpcquota.StreamServerInterceptor(l, stacked(deny)...)
	grpcquota.UnaryServerInterceptor(l, stacked(grpcquota.WithMissingKeyError(func(context.Context, string) error { return nil }))...)
}
