package grpcquota

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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
// a key; a call with a longer value has no key (see WithKeyFunc).
const MaxMetadataKeyLen = 256

// Metadata keys of the rate limit header metadata (WithRateLimitMetadata).
const (
	MetadataPolicy    = "ratelimit-policy"
	MetadataRateLimit = "ratelimit"
)

// A KeyFunc returns the key a call is limited by, its tenant: the string
// the Limiter limits, leasequota.WithQuotaFunc receives and SetQuota and
// GetQuota take. An empty key means the call has none: see WithKeyFunc
// for what it gets.
type KeyFunc func(ctx context.Context, fullMethod string) string

// DegradedMode says what to do when the Limiter cannot decide: its
// failure mode is FailClosed, Redis is unavailable and the key's lease is
// spent (Reason unavailable), or the Limiter is closed (Reason closed).
// With FailLocal (the Limiter's default) or FailOpen, that mode decides
// a call the lease cannot cover, whatever the DegradedMode.
type DegradedMode uint8

const (
	// DegradedDeny ends the call with codes.Unavailable and RetryInfo. It
	// is the default.
	DegradedDeny DegradedMode = iota
	// DegradedAllow lets the call proceed (fail open).
	DegradedAllow
)

// An Option configures the interceptors. The constructors panic on an
// invalid option, as it is a programming error found at start-up, with an
// error that wraps ErrInvalidOption.
type Option func(*config)

// ErrInvalidOption is wrapped by the error the interceptor constructors
// panic with when an option is invalid (or two cannot be combined).
var ErrInvalidOption = errors.New("grpcquota: invalid option")

type config struct {
	keyFunc      KeyFunc
	keyName      string // the metadata key of WithMetadataKey, named in the error for calls without it
	peerFallback string // the key prefix of WithPeerFallback; "" when off
	missingKey   func(ctx context.Context, fullMethod string) error
	cost         func(ctx context.Context, fullMethod string) int64
	maxWait      time.Duration
	shadow       bool
	degraded     DegradedMode
	policy       string
	policyNamed  bool         // WithPolicyName was given
	policies     []policySpec // WithPolicy, WithPeerPolicy, in order
	denial       func(ctx context.Context, fullMethod string, d Denial) error
	metadata     bool
	hook         func(ctx context.Context, fullMethod, key string, d leasequota.Decision)
	err          error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithMetadataKey keys calls by the first value of request metadata key
// name (an API key, say), as it is: a call with "x-tenant: acme" counts
// against tenant "acme", the string to give leasequota.WithQuotaFunc,
// SetQuota and GetQuota. Calls without it, or whose value is empty or
// longer than MaxMetadataKeyLen bytes, have no key: see WithKeyFunc.
func WithMetadataKey(name string) Option {
	return func(c *config) {
		if name == "" {
			c.fail("WithMetadataKey(\"\")")
			return
		}
		c.keyName = lowerASCII(name)
		c.keyFunc = MetadataKey(name)
	}
}

// lowerASCII lowercases an ASCII metadata key, as gRPC stores them.
func lowerASCII(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

// WithKeyFunc keys calls by f: f's key is the tenant, passed as it is to
// the Limiter (so to leasequota.WithQuotaFunc, and the name to give
// SetQuota and GetQuota) and to the decision hook. Where f returns "", the
// call has no key: it ends with codes.InvalidArgument, unless
// WithMissingKeyError says otherwise or, with WithPeerFallback, it is
// limited by its peer address under the fallback's prefix. It is never
// limited under a key f could return.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithKeyFunc(nil)")
			return
		}
		c.keyFunc, c.keyName = f, ""
	}
}

// WithMissingKeyError decides the calls that have no key (see WithKeyFunc)
// with f instead of ending them with codes.InvalidArgument: f's error
// (a status error, such as one with codes.Unauthenticated) ends the call,
// and a nil error lets it proceed, unlimited. It cannot be combined with
// WithPeerFallback.
func WithMissingKeyError(f func(ctx context.Context, fullMethod string) error) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithMissingKeyError(nil)")
			return
		}
		c.missingKey = f
	}
}

// WithPeerFallback limits the calls that have no key (the KeyFunc of
// WithKeyFunc or WithMetadataKey returned "") by their peer address (see
// PeerKey), under the key prefix + address: with prefix "peer:", a call
// from 192.0.2.1 without an API key counts against tenant
// "peer:192.0.2.1" (give such tenants their quota in
// leasequota.WithQuotaFunc by that prefix). The prefix keeps the two kinds
// of keys apart: a call whose own key starts with prefix ends with
// codes.InvalidArgument, so that no client can name, and spend, another
// client's peer quota. prefix must not be empty. It needs WithKeyFunc or
// WithMetadataKey (without them every call is keyed by peer, unprefixed),
// and cannot be combined with WithMissingKeyError.
func WithPeerFallback(prefix string) Option {
	return func(c *config) {
		if prefix == "" {
			c.fail("WithPeerFallback(\"\"): a prefix is needed to keep peer addresses apart from other keys")
			return
		}
		c.peerFallback = prefix
	}
}

// check reports what the options allow only together.
func (c *config) check() {
	c.checkPolicies()
	switch {
	case c.peerFallback != "" && c.keyFunc == nil:
		c.fail("WithPeerFallback(%q) needs WithKeyFunc or WithMetadataKey: every call is keyed by peer already", c.peerFallback)
	case c.peerFallback != "" && c.missingKey != nil:
		c.fail("WithPeerFallback(%q) and WithMissingKeyError: calls without a key get one or the other", c.peerFallback)
	}
}

// WithCost sets the cost of each call (default 1). A cost of 0 exempts the
// call; a negative cost ends it with codes.Internal (in shadow mode it
// proceeds, uncounted).
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

// WithShadow counts calls against their quota but never refuses them, nor
// holds them for WithMaxWait's wait. The Limiter's own waits still come
// first, as for AllowN: a key's call that finds no lease kept for it on
// this instance (its first here, or a sparse key's) waits for one, up to
// leasequota.WithColdStartWait (100 ms by default), and a Limiter built
// WithMaxWait waits up to that long for a fresh lease, so that the
// decision is the one enforcing would make. Use it with WithDecisionHook.
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
// With several policies (WithPolicy), each is named by its own option.
func WithPolicyName(name string) Option {
	return func(c *config) {
		if err := middleware.ValidatePolicyName(name); err != nil {
			c.fail("WithPolicyName(%q): %v", name, err)
			return
		}
		c.policy, c.policyNamed = name, true
	}
}

// WithRateLimitMetadata sends the header metadata "ratelimit-policy" and
// "ratelimit" (RFC 9651 values, as the HTTP fields of
// draft-ietf-httpapi-ratelimit-headers; see package middleware) on
// admitted and refused calls. With several policies (WithPolicy),
// "ratelimit-policy" lists every policy whose key's quota is known, in
// order, and "ratelimit" is the deciding policy's (the one that refused,
// or when admitted the one with the least remaining), as the middleware's
// RateLimit-Policy and RateLimit fields.
func WithRateLimitMetadata() Option { return func(c *config) { c.metadata = true } }

// WithDecisionHook calls f with every decision, after any wait: for
// metrics and logs, or to watch shadow mode. key is the key the call was
// limited by; with several policies (WithPolicy), the deciding one's
// (Decision.Tenant), "" when none decided (the Limiter closed). It must be fast and safe for concurrent use. Calls exempted
// by a cost of 0, and calls without a key (see WithKeyFunc), are not
// decided and not reported.
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
	l     *leasequota.Limiter
	cfg   config
	pols  []policy // the one policy of today's options, or those of WithPolicy and WithPeerPolicy
	multi bool     // pols are those of WithPolicy and WithPeerPolicy
	// wait bounds a call's wait for a lease: WithMaxWait, 0 in shadow
	// mode (AllowNWithin and AllowAllWithin with a wait of 0 are AllowN
	// and AllowAll).
	wait time.Duration
	// peers holds the keys of recent IPv4 peers (PeerKey's).
	peers peerKeys

	missingErr, reservedErr error // end calls without a key (one policy), see keyErrors
}

func newLimiter(l *leasequota.Limiter, opts []Option) *limiter {
	if l == nil {
		panic("grpcquota: nil Limiter")
	}
	cfg := config{maxWait: DefaultMaxWait, policy: middleware.DefaultPolicyName}
	for _, o := range opts {
		if o == nil {
			cfg.fail("nil Option")
			continue
		}
		o(&cfg)
	}
	cfg.check()
	if cfg.err != nil {
		panic(cfg.err)
	}
	missing, reserved := keyErrors(&cfg)
	lim := &limiter{l: l, cfg: cfg, pols: newPolicies(&cfg), multi: len(cfg.policies) > 0, wait: cfg.maxWait,
		missingErr: missing, reservedErr: reserved}
	if cfg.shadow {
		lim.wait = 0 // never delay a call
	}
	return lim
}

// keyErrors returns the InvalidArgument errors that end a call without a
// key and one whose key starts with the peer fallback's prefix.
func keyErrors(cfg *config) (missing, reserved error) {
	switch {
	case cfg.keyName != "":
		missing = status.Errorf(codes.InvalidArgument,
			"grpcquota: the call needs the %s metadata (1 to %d bytes) that names the quota it counts against",
			cfg.keyName, MaxMetadataKeyLen)
		reserved = status.Errorf(codes.InvalidArgument,
			"grpcquota: the %s metadata must not start with %q, reserved for calls without it", cfg.keyName, cfg.peerFallback)
	case cfg.keyFunc != nil:
		missing = status.Error(codes.InvalidArgument, "grpcquota: the call does not name the quota it counts against")
		reserved = status.Errorf(codes.InvalidArgument,
			"grpcquota: the call's key must not start with %q, reserved for calls without one", cfg.peerFallback)
	default:
		missing = status.Error(codes.InvalidArgument, "grpcquota: the call's peer address is unknown: it cannot be limited")
	}
	return missing, reserved
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
		case cost < 0 && lim.cfg.shadow:
			return nil // shadow mode never refuses, a buggy cost neither
		case cost < 0:
			return internalError
		}
	}
	if lim.multi {
		return lim.admitAll(ctx, method, cost, setHeader)
	}
	key, problem := lim.key(ctx, method)
	if problem != keyOK {
		return lim.noKey(ctx, method, problem, lim.missingErr, lim.reservedErr)
	}
	// One call, its Decision written where it stays: answer takes it by
	// pointer, as copies of it were a good part of an admission's cost.
	d := lim.l.AllowNWithin(ctx, key, cost, lim.wait)
	if lim.cfg.hook != nil {
		lim.cfg.hook(ctx, method, key, d)
	}
	return lim.answer(ctx, method, &d, cost, nil, 0, key, setHeader)
}

// noKey ends a call without a key (problem keyMissing) or with a reserved
// one (keyReserved): with missing or reserved, or as WithMissingKeyError
// and WithShadow say.
func (lim *limiter) noKey(ctx context.Context, method string, problem keyProblem, missing, reserved error) error {
	switch {
	case lim.cfg.shadow:
		return nil
	case problem == keyMissing && lim.cfg.missingKey != nil:
		return lim.cfg.missingKey(ctx, method)
	case problem == keyMissing:
		return missing
	}
	return reserved
}

// answer returns the error that ends a call d decided, or nil to let it
// proceed, and sets the rate limit metadata. keys are the keys of every
// policy (nil with one policy), dec the index of the deciding one among
// lim.pols (-1 when none decided, 0 with one policy), key the deciding
// key.
func (lim *limiter) answer(ctx context.Context, method string, d *leasequota.Decision, cost int64, keys []string,
	dec int, key string, setHeader func(context.Context, metadata.MD) error) error {
	var p *policy
	if dec >= 0 {
		p = &lim.pols[dec]
	}
	if d.Allowed {
		// Returned before dn is declared: zeroing a Denial, a Decision
		// within, is no small part of an admission's cost. Admitted by a
		// failure mode, without a lease, nothing is known of the remaining
		// quota: no "ratelimit".
		if lim.cfg.metadata {
			lim.setMetadata(ctx, d, keys, dec, d.Mode == leasequota.FailDefault, 0, setHeader)
		}
		return nil
	}
	rate, t := true, int64(0) // what the rate limit metadata says
	var dn Denial
	switch {
	case d.Reason.Waitable() && p != nil:
		t = middleware.RetrySeconds(d.RetryAfter)
		dn = Denial{Code: codes.ResourceExhausted, Policy: p.name, Key: key, Decision: *d,
			Status: exhausted(d, p.name, fmt.Sprintf("quota of policy %q exhausted; retry after %v", p.name, roundUp(d.RetryAfter)), true)}
	case d.Reason == leasequota.ReasonInvalidN && p != nil:
		t = -1
		dn = Denial{Code: codes.ResourceExhausted, Policy: p.name, Key: key, Decision: *d,
			Status: exhausted(d, p.name, fmt.Sprintf("cost %d exceeds the whole quota of %d of policy %q: never admissible",
				cost, d.Quota.Burst, p.name), false)}
	case d.Reason == leasequota.ReasonUnavailable || d.Reason == leasequota.ReasonClosed:
		rate = false
		if lim.cfg.degraded == DegradedDeny {
			dn = Denial{Code: codes.Unavailable, Key: key, Decision: *d, Status: unavailable(d, "rate limiter unavailable")}
		}
	case d.Reason == leasequota.ReasonTooManyTenants:
		rate = false
		dn = Denial{Code: codes.Unavailable, Key: key, Decision: *d, Status: unavailable(d, "rate limiter tracks too many clients")}
	default:
		// ReasonInvalidQuota, ReasonDuplicateTenant (two policies gave
		// one key), a refusal that names no policy (cannot happen), or a
		// reason this version does not know.
		if lim.cfg.shadow {
			return nil
		}
		return internalError
	}
	if lim.cfg.metadata {
		lim.setMetadata(ctx, d, keys, dec, rate, t, setHeader)
	}
	if lim.cfg.shadow || dn.Status == nil {
		return nil
	}
	return lim.deny(ctx, method, dn)
}

// setMetadata sends the rate limit metadata of decision d: "ratelimit-policy"
// and, when rate is true, "ratelimit", with its t parameter unless t < 0.
// With one policy (keys nil) it sends nothing when d carries no quota.
// With several, "ratelimit-policy" lists every policy whose key's quota
// is known, and "ratelimit" is the deciding policy's (lim.pols[dec]); none
// when dec < 0. With one policy, the value slice of "ratelimit-policy" is
// cached with the quota and shared by the calls that send it (gRPC copies
// header metadata it is given into its own).
func (lim *limiter) setMetadata(ctx context.Context, d *leasequota.Decision, keys []string, dec int, rate bool, t int64,
	setHeader func(context.Context, metadata.MD) error) {
	valid := d.Quota.Burst > 0 && d.Quota.Rate > 0
	var policy []string
	if keys == nil {
		if !valid {
			return
		}
		policy = lim.pols[0].member(&d.Quota)
	} else if value := lim.policyList(d, keys, dec); value != "" {
		policy = []string{value}
	} else {
		return
	}
	md := make(metadata.MD, 2)
	md[MetadataPolicy] = policy
	if rate && valid && dec >= 0 {
		md[MetadataRateLimit] = lim.pols[dec].rPrefix.RateLimit(middleware.Remaining(d), t)
	}
	_ = setHeader(ctx, md) // fails only when headers were sent: not yet
}

// keyProblem says why a call has no key to be limited by.
type keyProblem uint8

const (
	keyOK       keyProblem = iota
	keyMissing             // no key: the KeyFunc's is "", and no fallback applies
	keyReserved            // the KeyFunc's key starts with the peer fallback's prefix
)

// key returns the call's key: the KeyFunc's, else (WithPeerFallback) the
// fallback's prefix and the peer's address; the peer's address when there
// is no KeyFunc.
func (lim *limiter) key(ctx context.Context, method string) (string, keyProblem) {
	if lim.cfg.keyFunc == nil {
		if k := peerKey(ctx, &lim.peers); k != "" {
			return k, keyOK
		}
		return "", keyMissing
	}
	k := lim.cfg.keyFunc(ctx, method)
	switch prefix := lim.cfg.peerFallback; {
	case k != "" && prefix != "" && strings.HasPrefix(k, prefix):
		return "", keyReserved
	case k != "":
		return k, keyOK
	case prefix != "":
		if p := peerKey(ctx, &lim.peers); p != "" {
			return prefix + p, keyOK
		}
	}
	return "", keyMissing
}

// unavailable returns the Unavailable status of a limiter that cannot
// decide.
func unavailable(d *leasequota.Decision, msg string) *status.Status {
	st := status.New(codes.Unavailable, "grpcquota: "+msg)
	if withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(roundUp(d.RetryAfter))}); err == nil {
		st = withDetails
	}
	return st
}

// exhausted returns the ResourceExhausted status of a refusal by the
// policy named policy.
func exhausted(d *leasequota.Decision, policy, msg string, retry bool) *status.Status {
	st := status.New(codes.ResourceExhausted, "grpcquota: "+msg)
	details := []protoadapt.MessageV1{&errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{
		Subject:     "policy:" + policy,
		Description: msg,
	}}}}
	if retry {
		details = append([]protoadapt.MessageV1{&errdetails.RetryInfo{RetryDelay: durationpb.New(roundUp(d.RetryAfter))}}, details...)
	}
	if withDetails, err := st.WithDetails(details...); err == nil {
		st = withDetails
	}
	return st
}

// roundUp rounds a wait up to the millisecond, at least 1 ms, saturating:
// a wait of centuries (Tenant.RetryAfter saturates at math.MaxInt64 for a
// rate of 1e-10) overflowed the sum, and clients were told to retry in
// 1 ms.
func roundUp(d time.Duration) time.Duration {
	if d > math.MaxInt64-time.Millisecond {
		return time.Duration(math.MaxInt64).Truncate(time.Millisecond)
	}
	return max((d + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
}
