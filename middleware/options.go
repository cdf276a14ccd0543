package middleware

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"
	"time"

	"github.com/leasequota/leasequota"
)

// DefaultMaxWait is how long a request whose key's local lease is
// exhausted may wait for a fresh lease, unless WithMaxWait says otherwise.
const DefaultMaxWait = 100 * time.Millisecond

// DefaultPolicyName names the quota policy in the header fields unless
// WithPolicyName says otherwise.
const DefaultPolicyName = "default"

// DegradedMode says what the middleware does when the Limiter cannot
// decide: Redis is unavailable, the key's lease is spent and the Limiter's
// failure mode is fail-closed (Reason unavailable), or the Limiter is
// closed. (The Limiter's FailOpen and FailLocal modes decide by
// themselves.)
type DegradedMode uint8

const (
	// DegradedDeny answers 503 Service Unavailable with Retry-After: the
	// Limiter's refusal stands. It is the default.
	DegradedDeny DegradedMode = iota
	// DegradedAllow passes the request on (fail open).
	DegradedAllow
)

// An Option configures the middleware built by New. New panics on an
// invalid option, as it is a programming error found at start-up, with an
// error that wraps ErrInvalidOption.
type Option func(*config)

// ErrInvalidOption is wrapped by the error New panics with when an option
// is invalid (or two cannot be combined).
var ErrInvalidOption = errors.New("middleware: invalid option")

type config struct {
	proxyHeader ProxyHeader
	trusted     []netip.Prefix
	ipv6Bits    int // 0: whole address
	keyFunc     KeyFunc
	keyHeader   string       // the header of WithHeaderKey, named in the answer to requests without it
	ipFallback  string       // the key prefix of WithClientIPFallback; "" when off
	missingKey  http.Handler // WithMissingKeyHandler
	cost        func(*http.Request) int64
	maxWait     time.Duration
	shadow      bool
	degraded    DegradedMode
	policy      string
	policyNamed bool         // WithPolicyName was given
	policies    []policySpec // WithPolicy, WithClientIPPolicy, in order
	denial      func(w http.ResponseWriter, r *http.Request, d Denial)
	legacy      bool
	hook        func(r *http.Request, key string, d leasequota.Decision)
	err         error
}

func (c *config) fail(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithTrustedProxies trusts header h (Forwarded or X-Forwarded-For) on
// requests whose RemoteAddr is in one of the proxies' prefixes, and skips
// those proxies when walking the header; see ClientIP. Name the one header
// your proxies write: a header they do not write passes through them
// unchanged, under the client's control.
//
// Client addresses are compared in IPv4 form (IPv4-mapped IPv6 addresses
// are unmapped), so a prefix given in IPv4-mapped form, as
// ::ffff:10.0.0.0/104, is taken as its IPv4 prefix, 10.0.0.0/8.
func WithTrustedProxies(h ProxyHeader, proxies ...netip.Prefix) Option {
	return func(c *config) {
		if h != Forwarded && h != XForwardedFor {
			c.fail("WithTrustedProxies: unknown header %d", h)
			return
		}
		for _, p := range proxies {
			if !p.IsValid() {
				c.fail("WithTrustedProxies: invalid prefix %v", p)
				return
			}
			p = p.Masked()
			if p.Addr().Is4In6() { // masked, so at least /96
				p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
			}
			c.trusted = append(c.trusted, p)
		}
		c.proxyHeader = h
	}
}

// WithIPv6Prefix keys IPv6 clients by their network of the given prefix
// length (e.g. 64, a typical subscriber allocation) rather than by
// address, so that a client cannot escape its quota by hopping addresses.
// The key is then the prefix, as in "2001:db8:1:2::/64". 0 (the default)
// or 128 keys by the whole address.
func WithIPv6Prefix(bits int) Option {
	return func(c *config) {
		if bits < 0 || bits > 128 {
			c.fail("WithIPv6Prefix(%d): want 0..128", bits)
			return
		}
		if bits == 128 {
			bits = 0
		}
		c.ipv6Bits = bits
	}
}

// WithKeyFunc keys requests by f: f's key is the tenant, passed as it is
// to the Limiter (so to leasequota.WithQuotaFunc, and the name to give
// SetQuota and GetQuota) and to the decision hook. Where f returns "", the
// request has no key: it gets the answer of WithMissingKeyHandler (by
// default 400 Bad Request), or, with WithClientIPFallback, is limited by
// its client IP under the fallback's prefix. It is never limited under a
// key f could return.
func WithKeyFunc(f KeyFunc) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithKeyFunc(nil)")
			return
		}
		c.keyFunc, c.keyHeader = f, ""
	}
}

// WithHeaderKey keys requests by the value of header name, an API key for
// instance; see HeaderKey. Requests without it have no key: see
// WithKeyFunc. It is WithKeyFunc(HeaderKey(name)), except that the answer
// to requests without a key names the header.
func WithHeaderKey(name string) Option {
	return func(c *config) {
		if name == "" {
			c.fail("WithHeaderKey(\"\")")
			return
		}
		c.keyFunc, c.keyHeader = HeaderKey(name), textproto.CanonicalMIMEHeaderKey(name)
	}
}

// WithMissingKeyHandler answers the requests that have no key (the
// KeyFunc of WithKeyFunc or WithHeaderKey returned "") with h, instead of
// the default 400 Bad Request with an application/problem+json body. h
// may refuse them otherwise (401 with a challenge, say) or serve them
// unlimited. It cannot be combined with WithClientIPFallback.
func WithMissingKeyHandler(h http.Handler) Option {
	return func(c *config) {
		if h == nil {
			c.fail("WithMissingKeyHandler(nil)")
			return
		}
		c.missingKey = h
	}
}

// WithClientIPFallback limits the requests that have no key (the KeyFunc
// of WithKeyFunc or WithHeaderKey returned "") by their client IP, under
// the key prefix + IP: with prefix "ip:", a request from 192.0.2.1 without
// an API key counts against tenant "ip:192.0.2.1" (give such tenants their
// quota in leasequota.WithQuotaFunc by that prefix). The prefix keeps the
// two kinds of keys apart: a request whose own key starts with prefix is
// refused with 400 Bad Request, so that no client can name, and spend,
// another client's IP quota. prefix must not be empty. It needs
// WithKeyFunc or WithHeaderKey (without them every request is keyed by
// client IP, unprefixed), and cannot be combined with
// WithMissingKeyHandler.
func WithClientIPFallback(prefix string) Option {
	return func(c *config) {
		if prefix == "" {
			c.fail("WithClientIPFallback(\"\"): a prefix is needed to keep client IPs apart from other keys")
			return
		}
		c.ipFallback = prefix
	}
}

// check reports what the options allow only together.
func (c *config) check() {
	if len(c.policies) > 0 {
		switch {
		case c.keyFunc != nil:
			c.fail("WithPolicy or WithClientIPPolicy cannot be combined with WithKeyFunc or WithHeaderKey: give each policy its key")
		case c.ipFallback != "":
			c.fail("WithPolicy or WithClientIPPolicy cannot be combined with WithClientIPFallback(%q): use WithClientIPPolicy", c.ipFallback)
		case c.policyNamed:
			c.fail("WithPolicy or WithClientIPPolicy cannot be combined with WithPolicyName: each policy is named")
		}
		for i, p := range c.policies {
			for _, o := range c.policies[:i] {
				switch {
				case p.name == o.name:
					c.fail("policy name %q given twice", p.name)
				case p.ip && o.ip && p.ipPrefix == o.ipPrefix:
					c.fail("WithClientIPPolicy prefix %q given twice (policies %q and %q)", p.ipPrefix, o.name, p.name)
				case p.ip && o.ip && (strings.HasPrefix(p.ipPrefix, o.ipPrefix) || strings.HasPrefix(o.ipPrefix, p.ipPrefix)):
					// Keys of two prefixes meet only where one prefix
					// starts with the other: "ip"+"21:db8::1" is
					// "ip2"+"1:db8::1", two clients in one bucket.
					c.fail("WithClientIPPolicy prefixes %q and %q (policies %q and %q): one starts with the other, so two clients could share a key", o.ipPrefix, p.ipPrefix, o.name, p.name)
				}
			}
		}
	}
	switch {
	case c.ipFallback != "" && c.keyFunc == nil:
		c.fail("WithClientIPFallback(%q) needs WithKeyFunc or WithHeaderKey: every request is keyed by client IP already", c.ipFallback)
	case c.ipFallback != "" && c.missingKey != nil:
		c.fail("WithClientIPFallback(%q) and WithMissingKeyHandler: requests without a key get one or the other", c.ipFallback)
	}
}

// WithCost sets the cost (weight) of each request in quota units (default
// 1). A cost of 0 exempts the request from limiting; a negative cost is
// answered 500 (passed on, uncounted, in shadow mode).
func WithCost(f func(r *http.Request) int64) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithCost(nil)")
			return
		}
		c.cost = f
	}
}

// WithMaxWait bounds how long a request may wait for a fresh lease when
// its key's local lease is exhausted (default DefaultMaxWait; 0 refuses at
// once). A request waits only when the Limiter's estimate of the wait is
// within d, so a request that cannot be admitted in time is refused at
// once. The request's context bounds the wait too. If the Limiter itself
// was built WithMaxWait, its wait comes first and adds to this one.
func WithMaxWait(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithMaxWait(%v): want >= 0", d)
			return
		}
		c.maxWait = d
	}
}

// WithShadow turns on shadow mode: requests are counted against their
// quota and given the header fields, but never refused, and never held
// for WithMaxWait's wait. The Limiter's own waits still come first, as
// for AllowN: a key's request that finds no lease kept for it on this
// instance (its first here, or a sparse key's) waits for one, up to
// leasequota.WithColdStartWait (100 ms by default), and a Limiter built
// WithMaxWait waits up to that long for a fresh lease; so that the
// decision is the one enforcing would make (without them, a shadow
// decision of a new key would be a cold_start denial that enforcing
// would not make). Use it with WithDecisionHook to see what enforcing
// would do.
func WithShadow() Option {
	return func(c *config) { c.shadow = true }
}

// WithDegradedMode says what to do when the Limiter cannot decide: its
// failure mode is FailClosed, Redis is unavailable and the key's lease is
// spent (Reason unavailable), or the Limiter is closed (Reason closed).
// The Limiter's failure mode decides first: with FailLocal (its default)
// or FailOpen a request the lease cannot cover is admitted or refused
// (429) by that mode, whatever this option says. The default is
// DegradedDeny.
func WithDegradedMode(m DegradedMode) Option {
	return func(c *config) {
		if m != DegradedDeny && m != DegradedAllow {
			c.fail("WithDegradedMode(%d): unknown mode", m)
			return
		}
		c.degraded = m
	}
}

// ValidatePolicyName reports whether name can name a quota policy in the
// RateLimit headers (and the gRPC metadata of grpcquota): 1 to 64
// printable ASCII characters.
func ValidatePolicyName(name string) error {
	if name == "" || len(name) > 64 {
		return errors.New("want 1..64 characters")
	}
	for i := 0; i < len(name); i++ {
		if name[i] < 0x20 || name[i] > 0x7e {
			return errors.New("want printable ASCII")
		}
	}
	return nil
}

// WithPolicyName names the quota policy in RateLimit-Policy and RateLimit
// (default DefaultPolicyName). It must be 1 to 64 printable ASCII
// characters.
func WithPolicyName(name string) Option {
	return func(c *config) {
		if err := ValidatePolicyName(name); err != nil {
			c.fail("WithPolicyName(%q): %v", name, err)
			return
		}
		c.policy, c.policyNamed = name, true
	}
}

// policySpec is a policy of WithPolicy or WithClientIPPolicy.
type policySpec struct {
	name     string
	key      KeyFunc // WithPolicy
	ip       bool    // WithClientIPPolicy
	ipPrefix string
}

// WithPolicy adds a policy named name (as WithPolicyName: 1 to 64
// printable ASCII characters, the name in the header fields and in
// "violated-policies") that limits each request by the key f returns.
// Give it once per policy: a request is limited by every policy at once,
// with one Limiter.AllowAllWithin call over the keys of all of them, which
// admits only if every key admits and, when it refuses, spends nothing
// from any of them.
//
// f's key is passed as it is to the Limiter, whose WithQuotaFunc gives
// each key its quota. Keys of different policies must never be equal:
// prefix them (for example "tenant:"+id). A request with the same key for
// two policies is answered 500, as a server error. Where f returns "",
// the request has no key for the policy: it is not limited by any policy
// and gets the answer of WithMissingKeyHandler (by default 400 Bad
// Request naming the policy); in shadow mode it is passed on.
//
// With WithPolicy or WithClientIPPolicy, the policies are exactly those
// given, in order: they cannot be combined with WithKeyFunc,
// WithHeaderKey, WithClientIPFallback or WithPolicyName, which configure
// the one policy of a middleware without them. New panics with an error
// wrapping ErrInvalidOption on an invalid or duplicate name or a nil f.
func WithPolicy(name string, f KeyFunc) Option {
	return func(c *config) {
		switch err := ValidatePolicyName(name); {
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

// WithClientIPPolicy adds a policy named name (see WithPolicy) that limits
// each request by its client IP (as WithTrustedProxies and WithIPv6Prefix
// say) under the key prefix + IP: with prefix "ip:", a request from
// 192.0.2.1 counts against tenant "ip:192.0.2.1". prefix must not be
// empty, and keys of the other policies (WithPolicy) must not start with
// it: a request whose key for another policy does is refused with 400
// Bad Request, so that no client can name, and spend, another client's IP
// quota. Nor may the prefix of another WithClientIPPolicy start with it
// (New panics): under "ip" and "ip2", client 21:db8::1 of the one and
// client 1:db8::1 of the other would share the key "ip21:db8::1". A
// request whose client IP is unknown (RemoteAddr empty) has no key: see
// WithPolicy.
func WithClientIPPolicy(name, prefix string) Option {
	return func(c *config) {
		switch err := ValidatePolicyName(name); {
		case err != nil:
			c.fail("WithClientIPPolicy(%q): %v", name, err)
			return
		case prefix == "":
			c.fail("WithClientIPPolicy(%q, \"\"): a prefix is needed to keep client IPs apart from other keys", name)
			return
		}
		c.policies = append(c.policies, policySpec{name: name, ip: true, ipPrefix: prefix})
	}
}

// A Denial describes a request the middleware refuses, for the handler of
// WithDenialHandler.
type Denial struct {
	// Status is the status of the default answer: 429 Too Many Requests
	// when a policy's quota refused the request (Retry-After is set
	// unless its cost can never be admitted), 503 Service Unavailable
	// when the Limiter could not decide (Retry-After is set).
	Status int
	// Policy names the policy that refused the request; "" for a 503.
	Policy string
	// Key is the request's key for that policy (Decision.Tenant).
	Key string
	// Decision is the Limiter's decision.
	Decision leasequota.Decision
	// Detail is the human-readable detail of the default answer.
	Detail string
}

// WithDenialHandler answers the requests the middleware refuses (429 and
// 503, see Denial) with f instead of the default application/problem+json
// body. When f is called, the header fields of the refusal are set on
// w.Header() already (on a 429 RateLimit, RateLimit-Policy and
// Retry-After; on a 503, which knows no quota, Retry-After); f writes
// the status and the body, and may change the fields. f runs on the
// request's goroutine. Requests without a key (WithMissingKeyHandler)
// and the 500 answers to server-side errors do not reach f.
func WithDenialHandler(f func(w http.ResponseWriter, r *http.Request, d Denial)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithDenialHandler(nil)")
			return
		}
		c.denial = f
	}
}

// WithLegacyHeaders adds X-RateLimit-Limit, X-RateLimit-Remaining and
// X-RateLimit-Reset (a delay in seconds) to the draft's fields, for
// clients that know only those.
func WithLegacyHeaders() Option {
	return func(c *config) { c.legacy = true }
}

// WithDecisionHook calls f with every decision the middleware makes (after
// any wait), before it answers: for metrics, logs, or to watch shadow
// mode. key is the key the request was limited by. f runs on the request's
// goroutine and must be fast and safe for concurrent use. Requests
// exempted by a cost of 0, and requests without a key (see WithKeyFunc),
// are not decided and not reported.
func WithDecisionHook(f func(r *http.Request, key string, d leasequota.Decision)) Option {
	return func(c *config) {
		if f == nil {
			c.fail("WithDecisionHook(nil)")
			return
		}
		c.hook = f
	}
}
