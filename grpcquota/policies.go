package grpcquota

import (
	"context"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/sfield"
	"github.com/leasequota/leasequota/middleware"
)

// policySpec is a policy of WithPolicy or WithPeerPolicy.
type policySpec struct {
	name       string
	key        KeyFunc // WithPolicy
	peer       bool    // WithPeerPolicy
	peerPrefix string
}

// MetadataKey returns a KeyFunc that keys calls by the first value of
// request metadata key name (matched without regard to ASCII case), as it
// is; "" (no key) when the call has none, or its value is empty or longer
// than MaxMetadataKeyLen bytes. WithMetadataKey(name) keys the one policy
// of the interceptors with it; give WithPolicy a function around it that
// prefixes the value, so that keys of different policies stay apart.
func MetadataKey(name string) KeyFunc {
	name = lowerASCII(name)
	return func(ctx context.Context, _ string) string {
		md, _ := metadata.FromIncomingContext(ctx)
		v := md.Get(name)
		if len(v) == 0 || len(v[0]) > MaxMetadataKeyLen {
			return ""
		}
		return v[0]
	}
}

// WithPolicy adds a policy named name (1 to 64 printable ASCII
// characters: the name in the rate limit metadata and in the QuotaFailure
// of a refusal) that limits each call by the key f returns. Give it once
// per policy: a call is limited by every policy at once, with one
// Limiter.AllowAllWithin call over the keys of all of them, which admits
// only if every key admits and, when it refuses, spends nothing from any
// of them. The wait for a fresh lease is that of WithMaxWait.
//
// f's key is passed as it is to the Limiter, whose WithQuotaFunc gives
// each key its quota. Keys of different policies must never be equal:
// prefix them (for example "tenant:"+id). A call with the same key for
// two policies ends with codes.Internal, as a server error. Where f
// returns "", the call has no key for the policy: it is not limited by
// any policy and ends with codes.InvalidArgument naming the policy,
// unless WithMissingKeyError decides it; in shadow mode it proceeds.
//
// With WithPolicy or WithPeerPolicy, the policies are exactly those
// given, in order: they cannot be combined with WithKeyFunc,
// WithMetadataKey, WithPeerFallback or WithPolicyName, which configure
// the one policy of interceptors without them. The constructors panic
// with an error wrapping ErrInvalidOption on an invalid or duplicate name
// or a nil f.
func WithPolicy(name string, f KeyFunc) Option {
	return func(c *config) {
		switch err := middleware.ValidatePolicyName(name); {
		case err != nil:
			c.fail("WithPolicy(%q): %v", name, err)
			return
		case f == nil:
			c.fail("WithPolicy(%q, nil)", name)
			return
		}
		c.policies = append(c.policies, policySpec{name: name, key: f})
	}
}

// WithPeerPolicy adds a policy named name (see WithPolicy) that limits
// each call by its peer address (see PeerKey) under the key prefix +
// address: with prefix "peer:", a call from 192.0.2.1 counts against
// tenant "peer:192.0.2.1". prefix must not be empty, and keys of the
// other policies (WithPolicy) must not start with it: a call whose key
// for another policy does ends with codes.InvalidArgument, so that no
// client can name, and spend, another client's peer quota. Nor may the
// prefix of another WithPeerPolicy start with it (building the
// interceptor panics): under "peer" and "peer2", peer 21:db8::1 of the one
// and peer 1:db8::1 of the other would share the key "peer21:db8::1". A
// call without a peer (in-process) has no key: see WithPolicy.
func WithPeerPolicy(name, prefix string) Option {
	return func(c *config) {
		switch err := middleware.ValidatePolicyName(name); {
		case err != nil:
			c.fail("WithPeerPolicy(%q): %v", name, err)
			return
		case prefix == "":
			c.fail("WithPeerPolicy(%q, \"\"): a prefix is needed to keep peer addresses apart from other keys", name)
			return
		}
		c.policies = append(c.policies, policySpec{name: name, peer: true, peerPrefix: prefix})
	}
}

// checkPolicies reports what WithPolicy and WithPeerPolicy allow only
// together.
func (c *config) checkPolicies() {
	if len(c.policies) == 0 {
		return
	}
	switch {
	case c.keyFunc != nil:
		c.fail("WithPolicy or WithPeerPolicy cannot be combined with WithKeyFunc or WithMetadataKey: give each policy its key")
	case c.peerFallback != "":
		c.fail("WithPolicy or WithPeerPolicy cannot be combined with WithPeerFallback(%q): use WithPeerPolicy", c.peerFallback)
	case c.policyNamed:
		c.fail("WithPolicy or WithPeerPolicy cannot be combined with WithPolicyName: each policy is named")
	}
	for i, p := range c.policies {
		for _, o := range c.policies[:i] {
			switch {
			case p.name == o.name:
				c.fail("policy name %q given twice", p.name)
			case p.peer && o.peer && p.peerPrefix == o.peerPrefix:
				c.fail("WithPeerPolicy prefix %q given twice (policies %q and %q)", p.peerPrefix, o.name, p.name)
			case p.peer && o.peer && (strings.HasPrefix(p.peerPrefix, o.peerPrefix) || strings.HasPrefix(o.peerPrefix, p.peerPrefix)):
				// Keys of two prefixes meet only where one prefix starts
				// with the other: "peer"+"21:db8::1" is
				// "peer2"+"1:db8::1", two peers in one bucket.
				c.fail("WithPeerPolicy prefixes %q and %q (policies %q and %q): one starts with the other, so two peers could share a key", o.peerPrefix, p.peerPrefix, o.name, p.name)
			}
		}
	}
}

// A Denial describes a call the interceptors refuse, for the function of
// WithDenialHandler.
type Denial struct {
	// Code is the code of the default answer: codes.ResourceExhausted
	// when a policy's quota refused the call (its cost cannot be admitted
	// in time, or ever), codes.Unavailable when the Limiter could not
	// decide (Redis unreachable in fail-closed mode, or the Limiter
	// closed, with DegradedDeny; or the Limiter tracking too many keys).
	Code codes.Code
	// Policy names the policy that refused the call; "" for
	// codes.Unavailable.
	Policy string
	// Key is the key the call was limited by: with one policy the call's
	// key; with several, the deciding one's (Decision.Tenant), "" when
	// none decided (the Limiter closed).
	Key string
	// Decision is the Limiter's decision.
	Decision leasequota.Decision
	// Status is the default answer: Code, its message, and its details
	// (errdetails.RetryInfo unless the cost can never be admitted, and
	// errdetails.QuotaFailure naming the policy for ResourceExhausted).
	Status *status.Status
}

// WithDenialHandler ends the calls the interceptors refuse (see Denial)
// with the error f returns, instead of Denial.Status: a status error
// (status.Error, or a status.Status with details of your own), whose
// code, message and details the client gets. A nil error, or one whose
// code is codes.OK, ends the call with Denial.Status, never lets it
// proceed (WithShadow and WithDegradedMode do that). When f is called,
// the rate limit metadata (WithRateLimitMetadata) is set already. f runs
// on the call's goroutine and must be safe for concurrent use. Calls
// without a key (WithMissingKeyError) and the codes.Internal answers to
// server-side errors do not reach f.
func WithDenialHandler(f func(ctx context.Context, fullMethod string, d Denial) error) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithDenialHandler(nil)")
			return
		}
		c.denial = f
	}
}

// policy is a policy as the interceptors use it: the one of today's
// options (name only), or one of WithPolicy and WithPeerPolicy.
type policy struct {
	policySpec
	missingErr  error         // with several policies: ends a call without its key
	reservedErr error         // with several policies: ends a call whose key starts with a peer policy's prefix
	rPrefix     sfield.Prefix // the "ratelimit" value up to r's digits: "name";r=

	value sfield.Member // the "ratelimit-policy" member of the last quota seen
}

// member returns the "ratelimit-policy" member of p for quota q, a
// one-value slice shared by the calls that send it (never written).
func (p *policy) member(q *leasequota.Quota) []string {
	if f := p.value.Cached(q.Burst, q.Rate); f != nil {
		return f // without Field's closure
	}
	return p.value.Field(q.Burst, q.Rate, func() string { return middleware.PolicyValue(p.name, *q) })
}

// init sets the fields of p that derive from its spec.
func (p *policy) init(sp policySpec) {
	p.policySpec = sp
	// RateLimitValue without t, less r's digit 0.
	v := middleware.RateLimitValue(sp.name, 0, -1)
	p.rPrefix = sfield.NewPrefix(v[:len(v)-1])
}

func newPolicies(cfg *config) []policy {
	if len(cfg.policies) == 0 {
		pols := make([]policy, 1)
		pols[0].init(policySpec{name: cfg.policy})
		return pols
	}
	pols := make([]policy, len(cfg.policies))
	for i, sp := range cfg.policies {
		p := &pols[i]
		p.init(sp)
		if sp.peer {
			p.missingErr = status.Errorf(codes.InvalidArgument,
				"grpcquota: the call's peer address is unknown: it cannot be limited by policy %q", sp.name)
		} else {
			p.missingErr = status.Errorf(codes.InvalidArgument,
				"grpcquota: the call does not name its key for policy %q", sp.name)
			p.reservedErr = status.Errorf(codes.InvalidArgument,
				"grpcquota: the call's key for policy %q must not start with a prefix reserved for peer addresses", sp.name)
		}
	}
	return pols
}

// maxStackKeys is how many policies' keys a call holds without allocating
// their slice (AllowAll allocates nothing for up to four).
const maxStackKeys = 4

// admitAll decides a call by every policy of WithPolicy and
// WithPeerPolicy, with one AllowAll.
func (lim *limiter) admitAll(ctx context.Context, method string, cost int64, setHeader func(context.Context, metadata.MD) error) error {
	var buf [maxStackKeys]string
	keys := buf[:0]
	if len(lim.pols) > len(buf) {
		keys = make([]string, 0, len(lim.pols))
	}
	for i := range lim.pols {
		p := &lim.pols[i]
		var k string
		if p.peer {
			if a := peerKey(ctx, &lim.peers); a != "" {
				k = p.peerPrefix + a
			}
		} else {
			k = p.key(ctx, method)
			if k != "" && lim.reservedKey(k) {
				return lim.noKey(ctx, method, keyReserved, nil, p.reservedErr)
			}
		}
		if k == "" {
			return lim.noKey(ctx, method, keyMissing, p.missingErr, nil)
		}
		keys = append(keys, k)
	}
	d := lim.l.AllowAllWithin(ctx, cost, lim.wait, keys...)
	dec := -1 // the deciding policy
	for i, k := range keys {
		if k == d.Tenant {
			dec = i
			break
		}
	}
	if lim.cfg.hook != nil {
		lim.cfg.hook(ctx, method, d.Tenant, d)
	}
	return lim.answer(ctx, method, &d, cost, keys, dec, d.Tenant, setHeader)
}

// reservedKey reports whether k, the key of a WithPolicy policy, starts
// with the prefix of a WithPeerPolicy policy.
func (lim *limiter) reservedKey(k string) bool {
	for i := range lim.pols {
		if p := &lim.pols[i]; p.peer && strings.HasPrefix(k, p.peerPrefix) {
			return true
		}
	}
	return false
}

// policyList returns the "ratelimit-policy" value of several policies:
// the member of each whose key's quota is known (the deciding one's from
// d, the others' as the Limiter tracks them), in order, "" when none is.
// It is the value the HTTP middleware gives RateLimit-Policy.
func (lim *limiter) policyList(d *leasequota.Decision, keys []string, dec int) string {
	var buf [256]byte
	b := buf[:0]
	for i := range lim.pols {
		q, ok := d.Quota, true
		if i != dec {
			q, ok = lim.l.TrackedQuota(keys[i])
		}
		if !ok || q.Burst <= 0 || q.Rate <= 0 {
			continue
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, lim.pols[i].member(&q)[0]...)
	}
	return string(b)
}

// deny ends a refused call: with the error of WithDenialHandler, else (or
// when it gives none) with the default status st.
func (lim *limiter) deny(ctx context.Context, method string, dn Denial) error {
	if lim.cfg.denial != nil {
		if err := lim.cfg.denial(ctx, method, dn); status.Code(err) != codes.OK {
			return err
		}
	}
	return dn.Status.Err()
}

// internalError ends a call whose limit cannot be applied.
var internalError = status.Error(codes.Internal, "grpcquota: the rate limit could not be applied")
