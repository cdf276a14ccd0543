package grpcquota

import (
	"context"
	"fmt"
	"net"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// DefaultMaxWait is how long a call whose key's local lease is exhausted
// may wait for a fresh lease, unless WithMaxWait says otherwise.
const DefaultMaxWait = 100 * time.Millisecond

// MaxMetadataKeyLen is the longest metadata value WithMetadataKey uses as
// a key; longer values are ignored (the call is keyed by peer).
const MaxMetadataKeyLen = 256

// Metadata keys of the rate limit header metadata (WithRateLimitMetadata).
const (
	MetadataPolicy    = "ratelimit-policy"
	MetadataRateLimit = "ratelimit"
)

// A KeyFunc returns the key a call is limited by; "" means: by the peer's
// address (see PeerKey).
type KeyFunc func(ctx context.Context, fullMethod string) string

// DegradedMode says what to do when the Limiter cannot decide: Redis is
// unavailable and the key's lease is spent, or the Limiter is closed.
type DegradedMode uint8

const (
	// DegradedDeny ends the call with codes.Unavailable and RetryInfo. It
	// is the default.
	DegradedDeny DegradedMode = iota
	// DegradedAllow lets the call proceed (fail open).
	DegradedAllow
)

// An Option configures the interceptors. The constructors panic on an
// invalid option, as it is a programming error found at start-up.
type Option func(*config)

type config struct {
	keyFunc  KeyFunc
	cost     func(ctx context.Context, fullMethod string) int64
	maxWait  time.Duration
	shadow   bool
	degraded DegradedMode
	policy   string
	metadata bool
	hook     func(ctx context.Context, fullMethod, key string, d leasequota.Decision)
	err      error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("grpcquota: "+format, args...)
	}
}

// WithMetadataKey keys calls by the first value of request metadata key
// name, prefixed with the name and a colon ("x-api-key:abc123") so that
// such keys never collide with peer addresses. Calls without it are keyed
// by peer.
func WithMetadataKey(name string) Option {
	return func(c *config) {
		if name == "" {
			c.fail("WithMetadataKey(\"\")")
			return
		}
		name := metadataKey(name)
		prefix := name + ":"
		c.keyFunc = func(ctx context.Context, _ string) string {
			md, _ := metadata.FromIncomingContext(ctx)
			v := md.Get(name)
			if len(v) == 0 || v[0] == "" || len(v[0]) > MaxMetadataKeyLen {
				return ""
			}
			return prefix + v[0]
		}
	}
}

// metadataKey lowercases an ASCII metadata key, as gRPC stores them.
func metadataKey(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// WithKeyFunc keys calls by f; where f returns "", by peer. Keys share one
// namespace in the Limiter: make sure f's keys cannot collide with peer
// addresses.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithKeyFunc(nil)")
			return
		}
		c.keyFunc = f
	}
}

// WithCost sets the cost of each call (default 1). A cost of 0 exempts the
// call; a negative cost ends it with codes.Internal.
func WithCost(f func(ctx context.Context, fullMethod string) int64) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithCost(nil)")
			return
		}
		c.cost = f
	}
}

// WithMaxWait bounds how long a call may wait for a fresh lease when its
// key's local lease is exhausted (default DefaultMaxWait; 0 refuses at
// once). A call waits only when the Limiter's estimate of the wait is
// within d; the call's deadline bounds the wait too.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithMaxWait(%v): want >= 0", d)
			return
		}
		c.maxWait = d
	}
}

// WithShadow counts calls against their quota but never refuses or delays
// them. Use it with WithDecisionHook.
func WithShadow() Option { return func(c *config) { c.shadow = true } }

// WithDegradedMode says what to do when the Limiter cannot decide; the
// default is DegradedDeny.
func WithDegradedMode(m DegradedMode) Option {
	return func(c *config) {
		if m != DegradedDeny && m != DegradedAllow {
			c.fail("WithDegradedMode(%d): unknown mode", m)
			return
		}
		c.degraded = m
	}
}

// WithPolicyName names the quota policy in QuotaFailure and the rate
// limit metadata (default "default"); 1 to 64 printable ASCII characters.
func WithPolicyName(name string) Option {
	return func(c *config) {
		if err := middleware.ValidatePolicyName(name); err != nil {
			c.fail("WithPolicyName(%q): %v", name, err)
			return
		}
		c.policy = name
	}
}

// WithRateLimitMetadata sends the header metadata "ratelimit-policy" and
// "ratelimit" (RFC 9651 values, as the HTTP fields of
// draft-ietf-httpapi-ratelimit-headers; see package middleware) on
// admitted and refused calls.
func WithRateLimitMetadata() Option { return func(c *config) { c.metadata = true } }

// WithDecisionHook calls f with every decision, after any wait: for
// metrics and logs, or to watch shadow mode. It must be fast and safe for
// concurrent use.
func WithDecisionHook(f func(ctx context.Context, fullMethod, key string, d leasequota.Decision)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithDecisionHook(nil)")
			return
		}
		c.hook = f
	}
}

// limiter is the configured decision logic shared by both interceptors.
type limiter struct {
	l   *leasequota.Limiter
	cfg config
}

func newLimiter(l *leasequota.Limiter, opts []Option) *limiter {
	if l == nil {
		panic("grpcquota: nil Limiter")
	}
	cfg := config{maxWait: DefaultMaxWait, policy: middleware.DefaultPolicyName}
	for _, o := range opts {
		if o == nil {
			panic("grpcquota: nil Option")
		}
		o(&cfg)
	}
	if cfg.err != nil {
		panic(cfg.err)
	}
	return &limiter{l: l, cfg: cfg}
}

// UnaryServerInterceptor returns an interceptor that limits each unary
// call with l. It panics when l is nil or an option is invalid.
func UnaryServerInterceptor(l *leasequota.Limiter, opts ...Option) grpc.UnaryServerInterceptor {
	lim := newLimiter(l, opts)
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := lim.admit(ctx, info.FullMethod, grpc.SetHeader); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// StreamServerInterceptor returns an interceptor that limits each stream
// with l, charging its cost once, when the stream opens. It panics when l
// is nil or an option is invalid.
func StreamServerInterceptor(l *leasequota.Limiter, opts ...Option) grpc.StreamServerInterceptor {
	lim := newLimiter(l, opts)
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		setHeader := func(_ context.Context, md metadata.MD) error { return ss.SetHeader(md) }
		if err := lim.admit(ss.Context(), info.FullMethod, setHeader); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// admit decides a call and returns the status error that ends it, or nil
// to let it proceed.
func (lim *limiter) admit(ctx context.Context, method string, setHeader func(context.Context, metadata.MD) error) error {
	cost := int64(1)
	if lim.cfg.cost != nil {
		cost = lim.cfg.cost(ctx, method)
		switch {
		case cost == 0:
			return nil
		case cost < 0:
			return status.Error(codes.Internal, "grpcquota: the rate limit could not be applied")
		}
	}
	key := ""
	if lim.cfg.keyFunc != nil {
		key = lim.cfg.keyFunc(ctx, method)
	}
	if key == "" {
		if key = PeerKey(ctx); key == "" {
			key = "unknown"
		}
	}
	var d leasequota.Decision
	if lim.cfg.shadow {
		d = lim.l.AllowN(ctx, key, cost)
	} else {
		d = lim.l.AllowNWithin(ctx, key, cost, lim.cfg.maxWait)
	}
	if lim.cfg.hook != nil {
		lim.cfg.hook(ctx, method, key, d)
	}

	rate, t := true, int64(0) // what the rate limit metadata says
	var err error
	switch {
	case d.Allowed:
		// Admitted by a failure mode, without a lease: nothing is known
		// of the remaining quota.
		rate = d.Mode == leasequota.FailDefault
	case d.Reason.Waitable():
		t = middleware.RetrySeconds(d.RetryAfter)
		err = lim.exhausted(d, fmt.Sprintf("quota of policy %q exhausted; retry after %v", lim.cfg.policy, roundUp(d.RetryAfter)), true)
	case d.Reason == leasequota.ReasonInvalidN:
		t = -1
		err = lim.exhausted(d, fmt.Sprintf("cost %d exceeds the whole quota of %d of policy %q: never admissible",
			cost, d.Quota.Burst, lim.cfg.policy), false)
	case d.Reason == leasequota.ReasonUnavailable || d.Reason == leasequota.ReasonClosed:
		rate = false
		if lim.cfg.degraded == DegradedDeny {
			err = unavailable(d, "rate limiter unavailable")
		}
	case d.Reason == leasequota.ReasonTooManyTenants:
		rate = false
		err = unavailable(d, "rate limiter tracks too many clients")
	default: // ReasonInvalidQuota, or a reason this version does not know
		if lim.cfg.shadow {
			return nil
		}
		return status.Error(codes.Internal, "grpcquota: the rate limit could not be applied")
	}
	if lim.cfg.metadata && d.Quota.Burst > 0 && d.Quota.Rate > 0 {
		md := metadata.MD{MetadataPolicy: {middleware.PolicyValue(lim.cfg.policy, d.Quota)}}
		if rate {
			md[MetadataRateLimit] = []string{middleware.RateLimitValue(lim.cfg.policy, d.Remaining, t)}
		}
		_ = setHeader(ctx, md) // fails only when headers were sent: not yet
	}
	if lim.cfg.shadow {
		return nil
	}
	return err
}

// unavailable returns the Unavailable status of a limiter that cannot
// decide.
func unavailable(d leasequota.Decision, msg string) error {
	st := status.New(codes.Unavailable, "grpcquota: "+msg)
	if withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(roundUp(d.RetryAfter))}); err == nil {
		st = withDetails
	}
	return st.Err()
}

// exhausted returns the ResourceExhausted status of a refusal.
func (lim *limiter) exhausted(d leasequota.Decision, msg string, retry bool) error {
	st := status.New(codes.ResourceExhausted, "grpcquota: "+msg)
	details := []protoadapt.MessageV1{&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "policy:" + lim.cfg.policy,
		Description: msg,
	}}}}
	if retry {
		details = append([]protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(roundUp(d.RetryAfter))}}, details...)
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st.Err()
}

// roundUp rounds a wait up to the millisecond, at least 1 ms.
func roundUp(d time.Duration) time.Duration {
	return max((d + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
}

// PeerKey returns the key of a call by its peer: the IP address of a TCP
// peer (IPv4-mapped addresses as IPv4), else the peer address's string,
// "" without a peer.
func PeerKey(ctx context.Context) string {
	p, ok := peer.FromContext(ctx)
	if !ok || p.Addr == nil {
		return ""
	}
	if a, ok := p.Addr.(*net.TCPAddr); ok {
		if ap := a.AddrPort(); ap.Addr().IsValid() {
			return ap.Addr().Unmap().WithZone("").String()
		}
	}
	return p.Addr.String()
}
