package grpcquota_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
	"go.uber.org/goleak"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
	"github.com/leasequota/leasequota/internal/redisserver"
)

func TestMain(m *testing.M) { redisserver.Main(m) }

// leakCheck starts the shared Redis (its goroutines live for the whole
// package), then fails the test if goroutines started during it outlive
// it. Call it first: its check runs after every other cleanup.
func leakCheck(t *testing.T) {
	t.Helper()
	redisserver.Shared(t)
	ignore := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, ignore) })
}

// testLog passes each line written to it to t.Log, until the test's
// cleanups are done (a limiter's goroutines may log until it is closed).
type testLog struct {
	mu   sync.Mutex
	t    testing.TB
	done bool
}

func (w *testLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimSuffix(string(p), "\n"))
	}
	return len(p), nil
}

// testLogger returns a logger that writes to t.Log, for leasequota.WithLogger.
// Create it before the limiter, so that it outlives the limiter's Close in
// the cleanups.
func testLogger(t testing.TB) *slog.Logger {
	w := &testLog{t: t}
	t.Cleanup(func() {
		w.mu.Lock()
		w.done = true
		w.mu.Unlock()
	})
	return slog.New(slog.NewTextHandler(w, nil))
}

// newLimiter returns a Limiter on the shared Redis with a key prefix of
// its own, logging to t.Log, closed when the test ends.
func newLimiter(t *testing.T, opts ...leasequota.Option) *leasequota.Limiter {
	t.Helper()
	logger := testLogger(t)
	c := redisserver.Client(t)
	opts = append([]leasequota.Option{leasequota.WithKeyPrefix(redisserver.Prefix(t)), leasequota.WithLogger(logger)}, opts...)
	l, err := leasequota.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := l.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return l
}

// deadLimiter returns a Limiter with quota q and failure mode mode on a
// Redis that is down for good, closed when the test ends.
func deadLimiter(t *testing.T, q leasequota.Quota, mode leasequota.FailureMode) *leasequota.Limiter {
	t.Helper()
	logger := testLogger(t)
	s := redisserver.StartServer(t)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	rc := s.Client()
	t.Cleanup(func() { rc.Close() })
	l, err := leasequota.New(rc, leasequota.WithDefaultQuota(q), leasequota.WithRedisTimeout(20*time.Millisecond),
		leasequota.WithFailureMode(mode), leasequota.WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		l.Close(ctx) // nothing to return to a dead Redis
	})
	return l
}

// hookLog records the interceptors' decisions.
type hookLog struct {
	mu   sync.Mutex
	keys []string
	all  []leasequota.Decision
}

func (h *hookLog) option() grpcquota.Option {
	return grpcquota.WithDecisionHook(func(_ context.Context, _, key string, d leasequota.Decision) {
		h.mu.Lock()
		h.keys = append(h.keys, key)
		h.all = append(h.all, d)
		h.mu.Unlock()
	})
}

func (h *hookLog) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.all)
}

func (h *hookLog) last(t *testing.T) (string, leasequota.Decision) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.all) == 0 {
		t.Fatal("no decision reported")
	}
	return h.keys[len(h.keys)-1], h.all[len(h.all)-1]
}

// serve runs a gRPC health server with both interceptors on a loopback
// port and returns a client of it; both end with the test.
func serve(t *testing.T, l *leasequota.Limiter, opts ...grpcquota.Option) healthpb.HealthClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(
		grpc.UnaryInterceptor(grpcquota.UnaryServerInterceptor(l, opts...)),
		grpc.StreamInterceptor(grpcquota.StreamServerInterceptor(l, opts...)),
	)
	healthpb.RegisterHealthServer(srv, health.NewServer())
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-served; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return healthpb.NewHealthClient(conn)
}

// check makes a unary call with the given metadata pairs.
func check(t *testing.T, c healthpb.HealthClient, md ...string) (metadata.MD, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if len(md) > 0 {
		ctx = metadata.AppendToOutgoingContext(ctx, md...)
	}
	var header metadata.MD
	_, err := c.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
	return header, err
}

// refusal checks err is a ResourceExhausted status with a QuotaFailure
// on policy, and returns its RetryInfo's delay (0 when it has none).
func refusal(t *testing.T, err error, policy string) time.Duration {
	t.Helper()
	st, ok := status.FromError(err)
	if !ok || st.Code() != codes.ResourceExhausted {
		t.Fatalf("error %v, want ResourceExhausted", err)
	}
	var delay time.Duration
	quota := false
	for _, d := range st.Details() {
		switch d := d.(type) {
		case *errdetails.RetryInfo:
			delay = d.GetRetryDelay().AsDuration()
			if delay <= 0 {
				t.Fatalf("RetryInfo delay %v, want > 0", delay)
			}
		case *errdetails.QuotaFailure:
			v := d.GetViolations()
			if len(v) != 1 || v[0].GetSubject() != "policy:"+policy || v[0].GetDescription() == "" {
				t.Fatalf("QuotaFailure %v", d)
			}
			quota = true
		default:
			t.Fatalf("unexpected detail %T", d)
		}
	}
	if !quota {
		t.Fatalf("%v: no QuotaFailure", err)
	}
	return delay
}

// exhaust calls until the key is refused; the burst must end within 50.
func exhaust(t *testing.T, c healthpb.HealthClient, md ...string) error {
	t.Helper()
	for i := 0; i < 50; i++ {
		if _, err := check(t, c, md...); err != nil {
			return err
		}
	}
	t.Fatal("still admitted after 50 calls")
	return nil
}

// TestUnaryPerPeer: a burst admitted, then ResourceExhausted with
// RetryInfo, then admitted again after the refill.
func TestUnaryPerPeer(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 2, Burst: 5}
	l := newLimiter(t, leasequota.WithDefaultQuota(q))
	var hook hookLog
	c := serve(t, l, hook.option())
	start := time.Now()
	admitted := 0
	var err error
	for ; admitted < 50; admitted++ {
		if _, err = check(t, c); err != nil {
			break
		}
	}
	elapsed := time.Since(start)
	if most := int(q.Burst) + int(q.Rate*elapsed.Seconds()) + 1; admitted < int(q.Burst) || admitted > most {
		t.Fatalf("%d admitted before the first refusal in %v, want %d..%d", admitted, elapsed, q.Burst, most)
	}
	delay := refusal(t, err, "default")
	if delay <= 0 || delay > 3*time.Second {
		t.Fatalf("RetryInfo delay %v, want in (0, 3s]", delay)
	}
	if key, d := hook.last(t); key != "127.0.0.1" || d.Reason != leasequota.ReasonExhausted {
		t.Fatalf("hook saw key %q reason %v, want 127.0.0.1 exhausted", key, d.Reason)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err := check(t, c)
		if err == nil {
			break
		}
		refusal(t, err, "default")
		if time.Now().After(deadline) {
			t.Fatal("still refused 5 s after the first refusal")
		}
		time.Sleep(20 * time.Millisecond) // pace the polling of a real refill
	}
}

// TestStream charges a stream once, when it opens.
func TestStream(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 1}))
	var hook hookLog
	c := serve(t, l, hook.option())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if resp, err := first.Recv(); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("first stream: %v, %v", resp, err)
	}
	second, err := c.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = second.Recv()
	if delay := refusal(t, err, "default"); delay < time.Second || delay > 2*time.Second {
		t.Fatalf("RetryInfo delay %v, want 1..2 s (1 token at 0.5/s)", delay)
	}
	if key, _ := hook.last(t); key != "127.0.0.1" {
		t.Fatalf("key %q, want 127.0.0.1", key)
	}
	cancel()
	if _, err := first.Recv(); status.Code(err) != codes.Canceled {
		t.Fatalf("first stream after cancel: %v", err)
	}
}

// TestMetadataKey keys calls by an API key in the metadata, as it is. A
// call without one, or with an empty one or one too long, has no key: it
// ends with InvalidArgument, naming the metadata key, and is not decided.
func TestMetadataKey(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	var hook hookLog
	c := serve(t, l, hook.option(), grpcquota.WithMetadataKey("X-Api-Key"))
	refusal(t, exhaust(t, c, "x-api-key", "alpha"), "default")
	if key, _ := hook.last(t); key != "alpha" {
		t.Fatalf("key %q, want the metadata value alpha", key)
	}
	if _, err := check(t, c, "x-api-key", "beta"); err != nil {
		t.Fatalf("another key: %v", err)
	}
	decided := hook.len()
	for _, md := range [][]string{nil, {"x-api-key", ""}, {"x-api-key", strings.Repeat("k", grpcquota.MaxMetadataKeyLen+1)}} {
		_, err := check(t, c, md...)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "x-api-key") {
			t.Fatalf("metadata %q: %v, want InvalidArgument naming x-api-key", md, err)
		}
	}
	if hook.len() != decided {
		t.Fatal("a call without a key was decided")
	}
	if _, err := check(t, c, "x-api-key", strings.Repeat("k", grpcquota.MaxMetadataKeyLen)); err != nil {
		t.Fatalf("key of %d bytes: %v", grpcquota.MaxMetadataKeyLen, err)
	}
}

// TestPeerFallback limits calls without a key by peer address, under the
// fallback's prefix, which no call may claim as its own key.
func TestPeerFallback(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		if strings.HasPrefix(tenant, "peer:") {
			return leasequota.Quota{Rate: 0.5, Burst: 2}
		}
		return leasequota.Quota{Rate: 0.5, Burst: 3}
	}))
	var hook hookLog
	c := serve(t, l, hook.option(), grpcquota.WithMetadataKey("x-tenant"), grpcquota.WithPeerFallback("peer:"))
	refusal(t, exhaust(t, c), "default")
	if key, d := hook.last(t); key != "peer:127.0.0.1" || d.Quota.Burst != 2 {
		t.Fatalf("key %q with Burst %d without a tenant, want peer:127.0.0.1 with Burst 2", key, d.Quota.Burst)
	}
	// A tenant named like the peer has its own quota.
	if _, err := check(t, c, "x-tenant", "127.0.0.1"); err != nil {
		t.Fatalf("tenant 127.0.0.1: %v", err)
	}
	// No call can name a fallback key.
	decided := hook.len()
	_, err := check(t, c, "x-tenant", "peer:127.0.0.1")
	if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), `"peer:"`) {
		t.Fatalf("reserved key: %v, want InvalidArgument naming the prefix", err)
	}
	if hook.len() != decided {
		t.Fatal("a call with a reserved key was decided")
	}
}

// TestMissingKeyError decides calls without a key with the given function;
// shadow mode lets them proceed.
func TestMissingKeyError(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	t.Run("error", func(t *testing.T) {
		var hook hookLog
		c := serve(t, l, hook.option(), grpcquota.WithMetadataKey("x-api-key"),
			grpcquota.WithMissingKeyError(func(ctx context.Context, method string) error {
				return status.Errorf(codes.Unauthenticated, "%s needs an API key", method)
			}))
		if _, err := check(t, c); status.Code(err) != codes.Unauthenticated {
			t.Fatalf("no key: %v, want the function's Unauthenticated", err)
		}
		if hook.len() != 0 {
			t.Fatal("a call without a key was decided")
		}
		if _, err := check(t, c, "x-api-key", "k1"); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("unlimited", func(t *testing.T) {
		c := serve(t, l, grpcquota.WithMetadataKey("x-api-key"),
			grpcquota.WithMissingKeyError(func(context.Context, string) error { return nil }))
		for i := 0; i < 5; i++ { // more than Burst
			if _, err := check(t, c); err != nil {
				t.Fatalf("call %d without a key: %v, want it unlimited", i, err)
			}
		}
	})
	t.Run("no peer", func(t *testing.T) {
		// Keyed by peer, a call without one (in-process) has no key either.
		var hook hookLog
		intercept := grpcquota.UnaryServerInterceptor(l, hook.option())
		called := false
		_, err := intercept(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: "/s/M"},
			func(context.Context, any) (any, error) { called = true; return nil, nil })
		if status.Code(err) != codes.InvalidArgument || called || hook.len() != 0 {
			t.Fatalf("no peer: %v, handler called %v, %d decisions; want InvalidArgument, neither", err, called, hook.len())
		}
	})
	t.Run("shadow", func(t *testing.T) {
		var hook hookLog
		c := serve(t, l, hook.option(), grpcquota.WithMetadataKey("x-api-key"), grpcquota.WithShadow())
		if _, err := check(t, c); err != nil || hook.len() != 0 {
			t.Fatalf("no key in shadow mode: %v, %d decisions; want to proceed undecided", err, hook.len())
		}
	})
}

// sfItem parses a metadata value as an RFC 9651 List of one String Item
// with Integer parameters.
func sfItem(t *testing.T, md metadata.MD, key string) (string, map[string]int64) {
	t.Helper()
	list, err := httpsfv.UnmarshalList(md.Get(key))
	if err != nil || len(list) != 1 {
		t.Fatalf("%s: %q: %v", key, md.Get(key), err)
	}
	item, ok := list[0].(httpsfv.Item)
	name, isString := item.Value.(string)
	if !ok || !isString {
		t.Fatalf("%s: %q: want a String Item", key, md.Get(key))
	}
	params := map[string]int64{}
	for _, k := range item.Params.Names() {
		v, _ := item.Params.Get(k)
		n, ok := v.(int64)
		if !ok {
			t.Fatalf("%s: %q: %s is %T, want an Integer", key, md.Get(key), k, v)
		}
		params[k] = n
	}
	return name, params
}

// TestRateLimitMetadata sends the draft's fields as header metadata.
func TestRateLimitMetadata(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
	c := serve(t, l, grpcquota.WithRateLimitMetadata(), grpcquota.WithPolicyName("per-peer"))
	md, err := check(t, c)
	if err != nil {
		t.Fatal(err)
	}
	name, p := sfItem(t, md, grpcquota.MetadataPolicy)
	if name != "per-peer" || len(p) != 2 || p["q"] != 2 || p["w"] != 4 {
		t.Fatalf("ratelimit-policy %q", md.Get(grpcquota.MetadataPolicy))
	}
	name, p = sfItem(t, md, grpcquota.MetadataRateLimit)
	if _, hasR := p["r"]; name != "per-peer" || len(p) != 2 || !hasR || p["r"] > 2 || p["t"] != 0 {
		t.Fatalf("ratelimit %q", md.Get(grpcquota.MetadataRateLimit))
	}
	for i := 0; ; i++ {
		if i == 50 {
			t.Fatal("never refused")
		}
		if md, err = check(t, c); err != nil {
			break
		}
	}
	delay := refusal(t, err, "per-peer")
	name, p = sfItem(t, md, grpcquota.MetadataRateLimit)
	if want := int64((delay + time.Second - 1) / time.Second); name != "per-peer" || p["t"] != want {
		t.Fatalf("ratelimit %q on a refusal with RetryInfo %v, want t=%d", md.Get(grpcquota.MetadataRateLimit), delay, want)
	}
}

// TestOutcomes covers costs, shadow mode, invalid quotas and the degraded
// modes.
func TestOutcomes(t *testing.T) {
	leakCheck(t)
	costs := grpcquota.WithCost(func(ctx context.Context, _ string) int64 {
		md, _ := metadata.FromIncomingContext(ctx)
		switch v := md.Get("cost"); {
		case len(v) == 0:
			return 1
		case v[0] == "0":
			return 0
		case v[0] == "-1":
			return -1
		default:
			return 100
		}
	})
	t.Run("costs", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
		var hook hookLog
		c := serve(t, l, hook.option(), costs)
		_, err := check(t, c, "cost", "100")
		if delay := refusal(t, err, "default"); delay != 0 {
			t.Fatalf("RetryInfo %v for a cost above Burst, want none", delay)
		}
		if _, d := hook.last(t); d.Reason != leasequota.ReasonInvalidN {
			t.Fatalf("reason %v, want invalid_n", d.Reason)
		}
		exhaust(t, c)
		if _, err := check(t, c, "cost", "0"); err != nil {
			t.Fatalf("cost 0 on an exhausted key: %v, want exempt", err)
		}
		if _, err := check(t, c, "cost", "-1"); status.Code(err) != codes.Internal {
			t.Fatalf("negative cost: %v, want Internal", err)
		}
	})
	t.Run("shadow", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 0.5, Burst: 2}))
		var hook hookLog
		c := serve(t, l, hook.option(), grpcquota.WithShadow(), costs)
		// A negative cost is a server bug, which shadow mode does not
		// refuse either.
		if _, err := check(t, c, "cost", "-1"); err != nil {
			t.Fatalf("shadow mode, a negative cost: %v, want the call to proceed", err)
		}
		denied := 0
		for i := 0; i < 6; i++ {
			if _, err := check(t, c); err != nil {
				t.Fatalf("shadow mode refused: %v", err)
			}
			if _, d := hook.last(t); !d.Allowed {
				denied++
			}
		}
		if denied < 3 {
			t.Fatalf("%d of 6 would have been refused, want >= 3", denied)
		}
	})
	t.Run("invalid quota", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithQuotaFunc(func(string) leasequota.Quota { return leasequota.Quota{Rate: 1} }))
		c := serve(t, l)
		if _, err := check(t, c); status.Code(err) != codes.Internal {
			t.Fatalf("invalid quota: %v, want Internal", err)
		}
	})
	deadRedis := func(t *testing.T, mode leasequota.FailureMode) *leasequota.Limiter {
		return deadLimiter(t, leasequota.Quota{Rate: 10, Burst: 10}, mode)
	}
	t.Run("degraded deny", func(t *testing.T) {
		c := serve(t, deadRedis(t, leasequota.FailClosed))
		_, err := check(t, c)
		st, _ := status.FromError(err)
		if st.Code() != codes.Unavailable {
			t.Fatalf("Redis down: %v, want Unavailable", err)
		}
		var retry bool
		for _, d := range st.Details() {
			_, retry = d.(*errdetails.RetryInfo)
		}
		if !retry {
			t.Fatalf("%v: no RetryInfo", err)
		}
	})
	t.Run("degraded allow", func(t *testing.T) {
		var hook hookLog
		c := serve(t, deadRedis(t, leasequota.FailClosed), hook.option(), grpcquota.WithDegradedMode(grpcquota.DegradedAllow))
		if _, err := check(t, c); err != nil {
			t.Fatalf("Redis down, degraded allow: %v", err)
		}
		if _, d := hook.last(t); d.Reason != leasequota.ReasonUnavailable {
			t.Fatalf("reason %v, want unavailable", d.Reason)
		}
	})
	t.Run("limiter fails open", func(t *testing.T) {
		var hook hookLog
		c := serve(t, deadRedis(t, leasequota.FailOpen), hook.option(), grpcquota.WithRateLimitMetadata())
		md, err := check(t, c)
		if err != nil {
			t.Fatalf("Redis down, limiter failing open: %v", err)
		}
		if _, d := hook.last(t); d.Reason != leasequota.ReasonFailOpen {
			t.Fatalf("reason %v, want fail_open", d.Reason)
		}
		if len(md.Get(grpcquota.MetadataPolicy)) != 1 || len(md.Get(grpcquota.MetadataRateLimit)) != 0 {
			t.Fatalf("metadata %v, want ratelimit-policy only", md)
		}
	})
	t.Run("closed", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
		c := serve(t, l)
		if _, err := check(t, c); err != nil {
			t.Fatal(err)
		}
		if err := l.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, err := check(t, c); status.Code(err) != codes.Unavailable {
			t.Fatalf("closed limiter: %v, want Unavailable", err)
		}
	})
}

func TestPanics(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1, Burst: 1}))
	for name, opts := range map[string][]grpcquota.Option{
		"nil option":      {nil},
		"negative wait":   {grpcquota.WithMaxWait(-1)},
		"empty md key":    {grpcquota.WithMetadataKey("")},
		"nil key func":    {grpcquota.WithKeyFunc(nil)},
		"nil cost":        {grpcquota.WithCost(nil)},
		"nil hook":        {grpcquota.WithDecisionHook(nil)},
		"bad policy":      {grpcquota.WithPolicyName("\n")},
		"bad degraded":    {grpcquota.WithDegradedMode(9)},
		"long policy":     {grpcquota.WithPolicyName(string(make([]byte, 65)))},
		"unknown options": {grpcquota.WithShadow(), nil},
		"nil missing-key": {grpcquota.WithMissingKeyError(nil)},
		"empty fallback":  {grpcquota.WithMetadataKey("x-api-key"), grpcquota.WithPeerFallback("")},
		"fallback alone":  {grpcquota.WithPeerFallback("peer:")},
		"fallback and missing-key error": {grpcquota.WithMetadataKey("x-api-key"), grpcquota.WithPeerFallback("peer:"),
			grpcquota.WithMissingKeyError(func(context.Context, string) error { return nil })},
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
	defer func() {
		if recover() == nil {
			t.Error("nil Limiter: no panic")
		}
	}()
	grpcquota.UnaryServerInterceptor(nil)
}

// TestAdmissionAllocations: an admitted call keyed by its IPv4 peer
// allocates nothing once the interceptor holds the peer's key. The count
// is an average over many calls, rounded down, so that the few
// allocations of the limiter's syncer, running meanwhile, do not make it
// fail.
func TestAdmissionAllocations(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e9, Burst: 1 << 40}))
	intercept := grpcquota.UnaryServerInterceptor(l)
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(192, 0, 2, 1), Port: 1234}})
	info := &grpc.UnaryServerInfo{FullMethod: "/test.Service/Call"}
	handler := func(context.Context, any) (any, error) { return nil, nil }
	if _, err := intercept(ctx, nil, info, handler); err != nil { // the key's first lease
		t.Fatal(err)
	}
	var err error
	n := testing.AllocsPerRun(1000, func() { _, err = intercept(ctx, nil, info, handler) })
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Errorf("an admitted call allocates %v times, want 0", n)
	}
}
