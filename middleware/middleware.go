package middleware

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leasequota/leasequota/internal/sfield"

	"github.com/leasequota/leasequota"
)

// Canonical names of the header fields the middleware writes. They are
// stored in http.Header under these keys (Header.Get("RateLimit-Policy")
// finds them).
const (
	headerPolicy          = "Ratelimit-Policy"
	headerRateLimit       = "Ratelimit"
	headerLegacyLimit     = "X-Ratelimit-Limit"
	headerLegacyRemaining = "X-Ratelimit-Remaining"
	headerLegacyReset     = "X-Ratelimit-Reset"
	headerRetryAfter      = "Retry-After"
)

// Problem types of the refusals (RFC 9457), as defined by
// draft-ietf-httpapi-ratelimit-headers.
const (
	ProblemQuotaExceeded            = "https://iana.org/assignments/http-problem-types#quota-exceeded"
	ProblemTemporaryReducedCapacity = "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
)

// maxSFInteger is the largest RFC 9651 Integer.
const maxSFInteger = sfield.MaxInteger

// New returns middleware that limits each request by its key (the client
// IP unless an option says otherwise) with l, or by the keys of the
// policies of WithPolicy and WithClientIPPolicy, all at once. See the
// package documentation for the responses. It panics when l is nil or an
// option is invalid.
func New(l *leasequota.Limiter, opts ...Option) func(http.Handler) http.Handler {
	if l == nil {
		panic("middleware: New: nil Limiter")
	}
	cfg := config{maxWait: DefaultMaxWait, policy: DefaultPolicyName}
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
	var pols []*policyState
	if len(cfg.policies) == 0 {
		pols = []*policyState{newPolicyState(policySpec{name: cfg.policy})}
	} else {
		for _, sp := range cfg.policies {
			ps := newPolicyState(sp)
			if sp.ip {
				ps.missing = fmt.Sprintf("The request's client address is unknown: it cannot be limited by policy %q.", sp.name)
			} else {
				ps.missing = fmt.Sprintf("The request does not name its key for policy %q.", sp.name)
			}
			pols = append(pols, ps)
		}
	}
	missing, reserved := keyProblems(&cfg)
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("middleware: nil http.Handler")
		}
		h := &handler{l: l, cfg: cfg, next: next, pols: pols, multi: len(cfg.policies) > 0, wait: cfg.maxWait,
			missingDetail: missing, reservedDetail: reserved,
			ipv4Key: len(cfg.policies) == 0 && cfg.keyFunc == nil && len(cfg.trusted) == 0}
		if cfg.shadow {
			h.wait = 0 // never delay a request
		}
		return h
	}
}

// keyProblems returns the details of the 400 answers to a request without
// a key and to one whose key starts with the client IP fallback's prefix,
// for a middleware of one policy.
func keyProblems(cfg *config) (missing, reserved string) {
	switch {
	case cfg.keyHeader != "":
		missing = fmt.Sprintf("The request needs the %s header (1 to %d bytes) that names the quota it counts against.",
			cfg.keyHeader, MaxHeaderKeyLen)
		reserved = fmt.Sprintf("The %s header must not start with %q, reserved for requests without one.",
			cfg.keyHeader, cfg.ipFallback)
	case cfg.keyFunc != nil:
		missing = "The request does not name the quota it counts against."
		reserved = fmt.Sprintf("The request's key must not start with %q, reserved for requests without one.", cfg.ipFallback)
	default:
		missing = "The request's client address is unknown: it cannot be limited."
	}
	return missing, reserved
}

// handler is the middleware around one http.Handler.
type handler struct {
	l     *leasequota.Limiter
	cfg   config
	next  http.Handler
	pols  []*policyState // the one policy of today's options, or those of WithPolicy and WithClientIPPolicy
	multi bool           // pols are those of WithPolicy and WithClientIPPolicy
	wait  time.Duration  // the bound on a request's wait for a lease: WithMaxWait, 0 in shadow mode
	// One policy by client IP without trusted proxies: an IPv4
	// RemoteAddr's host is the key (ipv4Host), as ipKey says.
	ipv4Key bool

	missingDetail, reservedDetail string // of the 400 answers of one policy, see keyProblems

	list atomic.Pointer[listValue] // several policies: RateLimit-Policy for the last quotas seen
}

// policyState is a policy as the handler uses it.
type policyState struct {
	policySpec
	quoted   string        // the name as an sf-string
	rPrefix  sfield.Prefix // the RateLimit value up to r's digits: quoted;r=
	violated []string      // the problem's "violated-policies"
	missing  string        // with several policies: the detail of the 400 answer to a request without its key

	value sfield.Member // the RateLimit-Policy member of the last quota seen
}

func newPolicyState(sp policySpec) *policyState {
	quoted := quoteString(sp.name)
	return &policyState{policySpec: sp, quoted: quoted, rPrefix: sfield.NewPrefix(quoted + ";r="), violated: []string{sp.name}}
}

// member returns the RateLimit-Policy member of p for quota q, a
// one-value slice shared by the responses that carry it (never written).
func (p *policyState) member(q *leasequota.Quota) []string {
	if f := p.value.Cached(q.Burst, q.Rate); f != nil {
		return f // without Field's closure and call: member and Field 43 -> 27 instructions (callgrind)
	}
	return p.value.Field(q.Burst, q.Rate, func() string { return string(appendPolicy(nil, p.quoted, *q)) })
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cost := int64(1)
	if h.cfg.cost != nil {
		cost = h.cfg.cost(r)
		switch {
		case cost == 0:
			h.next.ServeHTTP(w, r)
			return
		case cost < 0 && h.cfg.shadow:
			// Shadow mode never refuses: a WithCost on trial with a
			// bug must not fail real traffic.
			h.next.ServeHTTP(w, r)
			return
		case cost < 0:
			writeInternalError(w)
			return
		}
	}
	if h.multi {
		h.serveMulti(w, r, cost)
		return
	}
	// By client IP without trusted proxies, an IPv4 RemoteAddr's host is
	// the key: key's and ipKey's common path, without their two calls
	// (23 instructions less, callgrind).
	key, ok := "", false
	if h.ipv4Key {
		key, _, ok = ipv4Host(r.RemoteAddr)
	}
	if !ok {
		var problem keyProblem
		if key, problem = h.key(r); problem != keyOK {
			h.noKey(w, r, problem, h.missingDetail, h.reservedDetail)
			return
		}
	}
	// With a wait of 0 (shadow mode), AllowNWithin is AllowN.
	d := h.l.AllowNWithin(r.Context(), key, cost, h.wait)
	if h.cfg.hook != nil {
		h.cfg.hook(r, key, d)
	}
	if d.Allowed && d.Mode == leasequota.FailDefault && !h.cfg.legacy {
		// What answer and setFields do for an admission from a lease
		// without the legacy fields, written out for the one policy:
		// the request path of almost every request. Through answer and
		// setFields, with their cases of several policies and refusals,
		// it cost about 70 instructions more (callgrind,
		// BenchmarkInProcessOverhead/one-policy).
		if q := &d.Quota; q.Burst > 0 && q.Rate > 0 {
			p := h.pols[0]
			hdr := w.Header()
			pol := p.value.Cached(q.Burst, q.Rate) // member's look-up, inlined
			if pol == nil {
				pol = p.member(q)
			}
			hdr[headerPolicy] = pol
			hdr[headerRateLimit] = p.rPrefix.RateLimit(Remaining(&d), 0)
		}
		h.next.ServeHTTP(w, r)
		return
	}
	h.answer(w, r, &d, cost, nil, 0, key)
}

// noKey answers a request without a key (problem keyMissing) or with a
// reserved one (keyReserved).
func (h *handler) noKey(w http.ResponseWriter, r *http.Request, problem keyProblem, missing, reserved string) {
	switch {
	case h.cfg.shadow:
		h.next.ServeHTTP(w, r)
	case problem == keyMissing && h.cfg.missingKey != nil:
		h.cfg.missingKey.ServeHTTP(w, r)
	case problem == keyMissing:
		writeBadRequest(w, missing)
	default:
		writeBadRequest(w, reserved)
	}
}

// maxStackKeys is how many policies' keys a request holds without
// allocating their slice (AllowAll allocates nothing for up to four).
const maxStackKeys = 4

// serveMulti limits a request by every policy of WithPolicy and
// WithClientIPPolicy, with one AllowAll.
func (h *handler) serveMulti(w http.ResponseWriter, r *http.Request, cost int64) {
	var buf [maxStackKeys]string
	keys := buf[:0]
	if len(h.pols) > len(buf) {
		keys = make([]string, 0, len(h.pols))
	}
	for _, p := range h.pols {
		var k string
		if p.ip {
			if ip := h.ipKey(r); ip != "" {
				k = p.ipPrefix + ip
			}
		} else {
			k = p.key(r)
			if k != "" && h.reservedKey(k) {
				h.noKey(w, r, keyReserved, "", fmt.Sprintf(
					"The request's key for policy %q must not start with a prefix reserved for client IPs.", p.name))
				return
			}
		}
		if k == "" {
			h.noKey(w, r, keyMissing, p.missing, "")
			return
		}
		keys = append(keys, k)
	}
	// With a wait of 0 (shadow mode), AllowAllWithin is AllowAll.
	d := h.l.AllowAllWithin(r.Context(), cost, h.wait, keys...)
	dec := -1 // the deciding policy
	for i, k := range keys {
		if k == d.Tenant {
			dec = i
			break
		}
	}
	key := d.Tenant
	if h.cfg.hook != nil {
		h.cfg.hook(r, key, d)
	}
	h.answer(w, r, &d, cost, keys, dec, key)
}

// reservedKey reports whether k, the key of a WithPolicy policy, starts
// with the prefix of a WithClientIPPolicy policy.
func (h *handler) reservedKey(k string) bool {
	for _, p := range h.pols {
		if p.ip && strings.HasPrefix(k, p.ipPrefix) {
			return true
		}
	}
	return false
}

// answer serves or refuses a request that d decided. keys are the keys of
// every policy (nil for a middleware of one policy), dec the index of the
// deciding one among them (-1 when none decided, 0 with one policy), key
// the deciding key.
func (h *handler) answer(w http.ResponseWriter, r *http.Request, d *leasequota.Decision, cost int64, keys []string, dec int, key string) {
	if d.Allowed {
		if d.Mode != leasequota.FailDefault {
			// Admitted by a failure mode, without a lease: nothing is
			// known of the remaining quota.
			h.setFields(w.Header(), d, keys, dec, false, -1)
		} else {
			h.setFields(w.Header(), d, keys, dec, true, 0)
		}
		h.next.ServeHTTP(w, r)
		return
	}
	if h.cfg.shadow {
		switch d.Reason {
		case leasequota.ReasonInvalidQuota, leasequota.ReasonDuplicateTenant:
		case leasequota.ReasonInvalidN:
			h.setFields(w.Header(), d, keys, dec, true, -1)
		case leasequota.ReasonUnavailable, leasequota.ReasonClosed, leasequota.ReasonTooManyTenants:
			h.setFields(w.Header(), d, keys, dec, false, -1)
		default:
			h.setFields(w.Header(), d, keys, dec, true, retrySeconds(d.RetryAfter))
		}
		h.next.ServeHTTP(w, r)
		return
	}
	var p *policyState
	if dec >= 0 {
		p = h.pols[dec]
	}
	switch d.Reason {
	case leasequota.ReasonExhausted, leasequota.ReasonColdStart, leasequota.ReasonFallback:
		if p == nil { // cannot happen: these decisions name their tenant
			writeInternalError(w)
			return
		}
		t := retrySeconds(d.RetryAfter)
		hdr := w.Header()
		h.setFields(hdr, d, keys, dec, true, t)
		hdr[headerRetryAfter] = []string{strconv.FormatInt(t, 10)}
		h.deny(w, r, Denial{Status: http.StatusTooManyRequests, Policy: p.name, Key: key, Decision: *d,
			Detail: fmt.Sprintf("The quota of policy %q is exhausted; retry after %d s.", p.name, t)}, p.violated)
	case leasequota.ReasonInvalidN:
		if p == nil {
			writeInternalError(w)
			return
		}
		h.setFields(w.Header(), d, keys, dec, true, -1)
		h.deny(w, r, Denial{Status: http.StatusTooManyRequests, Policy: p.name, Key: key, Decision: *d,
			Detail: fmt.Sprintf("This request costs %d quota units, more than the whole quota of %d of policy %q: it can never be admitted.",
				cost, d.Quota.Burst, p.name)}, p.violated)
	case leasequota.ReasonUnavailable, leasequota.ReasonClosed:
		if h.cfg.degraded == DegradedAllow {
			h.setFields(w.Header(), d, keys, dec, false, -1)
			h.next.ServeHTTP(w, r)
			return
		}
		h.unavailable(w, r, d, key, "The rate limiter is unavailable")
	case leasequota.ReasonTooManyTenants:
		h.unavailable(w, r, d, key, "The rate limiter tracks too many clients")
	default: // ReasonInvalidQuota, ReasonDuplicateTenant, or a reason this version does not know
		writeInternalError(w)
	}
}

// deny answers a refusal: with the WithDenialHandler, else the default
// problem.
func (h *handler) deny(w http.ResponseWriter, r *http.Request, dn Denial, violated []string) {
	if h.cfg.denial != nil {
		h.cfg.denial(w, r, dn)
		return
	}
	typ, title := ProblemQuotaExceeded, titleQuotaExceeded
	if dn.Status == http.StatusServiceUnavailable {
		typ, title = ProblemTemporaryReducedCapacity, titleUnavailable
	}
	writeProblem(w, dn.Status, typ, title, dn.Detail, violated)
}

// unavailable answers 503 with Retry-After, the limiter being unable to
// decide.
func (h *handler) unavailable(w http.ResponseWriter, r *http.Request, d *leasequota.Decision, key, what string) {
	t := retrySeconds(d.RetryAfter)
	w.Header()[headerRetryAfter] = []string{strconv.FormatInt(t, 10)}
	h.deny(w, r, Denial{Status: http.StatusServiceUnavailable, Key: key, Decision: *d,
		Detail: fmt.Sprintf("%s; retry after %d s.", what, t)}, nil)
}

// keyProblem says why a request has no key to be limited by.
type keyProblem uint8

const (
	keyOK       keyProblem = iota
	keyMissing             // no key: the KeyFunc's is "", and no fallback applies
	keyReserved            // the KeyFunc's key starts with the client IP fallback's prefix
)

// key returns the request's key: the KeyFunc's, else (WithClientIPFallback)
// the fallback's prefix and the client IP; the client IP when there is no
// KeyFunc.
func (h *handler) key(r *http.Request) (string, keyProblem) {
	if h.cfg.keyFunc == nil {
		if k := h.ipKey(r); k != "" {
			return k, keyOK
		}
		return "", keyMissing
	}
	k := h.cfg.keyFunc(r)
	switch prefix := h.cfg.ipFallback; {
	case k != "" && prefix != "" && strings.HasPrefix(k, prefix):
		return "", keyReserved
	case k != "":
		return k, keyOK
	case prefix != "":
		if ip := h.ipKey(r); ip != "" {
			return prefix + ip, keyOK
		}
	}
	return "", keyMissing
}

// ipKey returns the client IP as a key. On the common path (an IPv4
// RemoteAddr that is not a trusted proxy) it is a substring of RemoteAddr
// and costs no allocation. A RemoteAddr that is not an IP is its own key.
func (h *handler) ipKey(r *http.Request) string {
	if host, a4, ok := ipv4Host(r.RemoteAddr); ok && (len(h.cfg.trusted) == 0 || !contains(h.cfg.trusted, netip.AddrFrom4(a4))) {
		return host
	}
	host := remoteHost(r.RemoteAddr)
	a, err := netip.ParseAddr(host)
	if err != nil {
		return r.RemoteAddr
	}
	if a.Is4() && !contains(h.cfg.trusted, a) {
		return host // netip.ParseAddr accepts only the canonical IPv4 form
	}
	a = a.Unmap().WithZone("")
	if contains(h.cfg.trusted, a) {
		if c, ok := fromHeader(r.Header, h.cfg.proxyHeader, h.cfg.trusted); ok {
			a = c
		}
	}
	if a.Is6() && h.cfg.ipv6Bits > 0 {
		p, _ := a.Prefix(h.cfg.ipv6Bits)
		return p.String()
	}
	return a.String()
}

// setFields writes RateLimit-Policy for decision d and, when rate is
// true, RateLimit, with its t parameter unless t < 0 (and the legacy
// fields when enabled). With one policy (keys nil) it writes nothing when
// d carries no quota. With several, RateLimit-Policy lists every policy
// whose key's quota is known (the deciding one's from d, the others' as
// the Limiter tracks them), in order, and RateLimit and the legacy fields
// are the deciding policy's (keys[dec]); none when dec < 0.
//
// The fields are set by assigning their canonical keys in hdr, not with
// Header.Set. With one policy, RateLimit-Policy's value slice is cached
// with the policy's quota and shared by the responses that carry it (a
// handler may replace or delete the field, as Header.Set and Header.Del
// do, but must not write into the slice); RateLimit's value and its slice
// are one allocation (sfield).
func (h *handler) setFields(hdr http.Header, d *leasequota.Decision, keys []string, dec int, rate bool, t int64) {
	q := &d.Quota
	valid := q.Burst > 0 && q.Rate > 0
	var (
		policy []string
		p      *policyState
	)
	if keys == nil {
		if !valid {
			return
		}
		p = h.pols[0]
		policy = p.member(q)
	} else {
		if policy = h.policyList(d, keys, dec); policy == nil {
			return
		}
		if dec < 0 || !valid {
			rate, valid = false, false
		} else {
			p = h.pols[dec]
		}
	}
	hdr[headerPolicy] = policy
	if !h.cfg.legacy {
		if rate {
			hdr[headerRateLimit] = p.rPrefix.RateLimit(Remaining(d), t)
		}
		return
	}
	if !valid {
		return
	}
	// The legacy fields: one allocation for their value slices.
	n := 1
	if rate {
		n++
		if t >= 0 {
			n++
		}
	}
	vals := make([]string, n)
	vals[0] = strconv.FormatInt(min(q.Burst, maxSFInteger), 10)
	hdr[headerLegacyLimit] = vals[0:1:1]
	if !rate {
		return
	}
	r := Remaining(d)
	hdr[headerRateLimit] = p.rPrefix.RateLimit(r, t)
	vals[1] = strconv.FormatInt(r, 10)
	hdr[headerLegacyRemaining] = vals[1:2:2]
	if t >= 0 {
		vals[2] = strconv.FormatInt(t, 10)
		hdr[headerLegacyReset] = vals[2:3:3]
	}
}

// Remaining returns RateLimit's r for decision d, whose quota is valid:
// d.FleetRemaining, at least 0 and at most q, the quota's Burst (and the
// largest structured-field integer). FleetRemaining is above Burst when
// this instance holds more tokens than that (leased before SetQuota
// lowered it, or a rate share's). The gRPC interceptors' ratelimit
// metadata uses it too.
func Remaining(d *leasequota.Decision) int64 {
	return min(max(d.FleetRemaining, 0), d.Quota.Burst, maxSFInteger)
}

// policyList returns the RateLimit-Policy field value of several
// policies: the member of each whose key's quota is known, in order; nil
// when none is. For up to maxStackKeys policies the value slice of the
// last combination of quotas is cached and shared, as a policy's member
// is.
func (h *handler) policyList(d *leasequota.Decision, keys []string, dec int) []string {
	var qs [maxStackKeys]quotaKey
	cacheable := len(h.pols) <= len(qs)
	quota := func(i int) (leasequota.Quota, bool) {
		q, ok := d.Quota, true
		if i != dec {
			q, ok = h.l.TrackedQuota(keys[i])
		}
		return q, ok && q.Burst > 0 && q.Rate > 0
	}
	if cacheable {
		for i := range h.pols {
			if q, ok := quota(i); ok {
				qs[i] = quotaKey{q.Burst, q.Rate}
			}
		}
		if lv := h.list.Load(); lv != nil && lv.qs == qs {
			return lv.field
		}
	}
	var buf [256]byte
	b := buf[:0]
	for i, p := range h.pols {
		var q leasequota.Quota
		if cacheable {
			if qs[i].burst == 0 {
				continue
			}
			q.Burst, q.Rate = qs[i].burst, qs[i].rate
		} else {
			var ok bool
			if q, ok = quota(i); !ok {
				continue
			}
		}
		if len(b) > 0 {
			b = append(b, ", "...)
		}
		b = append(b, p.member(&q)[0]...)
	}
	if len(b) == 0 {
		return nil
	}
	field := []string{string(b)}
	if cacheable {
		h.list.Store(&listValue{qs: qs, field: field})
	}
	return field
}

// quotaKey is what a policy's RateLimit-Policy member depends on of its
// quota; zero when the quota is unknown or invalid.
type quotaKey struct {
	burst int64
	rate  float64
}

// listValue is the RateLimit-Policy field value of several policies for
// their quotas qs.
type listValue struct {
	qs    [maxStackKeys]quotaKey
	field []string // shared by every response that carries it, never written
}

func appendPolicy(b []byte, quoted string, q leasequota.Quota) []byte {
	b = append(b, quoted...)
	b = append(b, ";q="...)
	b = strconv.AppendInt(b, min(max(q.Burst, 0), maxSFInteger), 10)
	b = append(b, ";w="...)
	return strconv.AppendInt(b, Window(q), 10)
}

// PolicyValue returns the RateLimit-Policy field value that describes
// quota q as the policy named name (printable ASCII), as the middleware
// writes it: "name";q=Burst;w=Window(q). It is for other transports and
// custom responses.
func PolicyValue(name string, q leasequota.Quota) string {
	return string(appendPolicy(nil, quoteString(name), q))
}

// RateLimitValue returns the RateLimit field value of the policy named
// name (printable ASCII): "name";r=remaining;t=t, without t when t < 0.
// Use RetrySeconds for t.
func RateLimitValue(name string, remaining, t int64) string {
	return sfield.RateLimit(quoteString(name)+";r=", remaining, t)[0]
}

// RetrySeconds rounds a wait up to the whole seconds of Retry-After and
// of RateLimit's t: at least 1, as a refusal is never "retry now".
func RetrySeconds(d time.Duration) int64 { return retrySeconds(d) }

// Window returns the window, in whole seconds, that the w parameter of
// RateLimit-Policy advertises for quota q: the time its bucket takes to
// refill from empty, ceil(Burst/Rate), at least 1.
func Window(q leasequota.Quota) int64 {
	x := float64(q.Burst) / q.Rate
	// A quotient a hair above a whole number is that number: the rate of
	// leasequota.Per(11, time.Minute), 11/60 rounded to a float64, gives
	// 60.00000000000001, which is 60 s, not 61.
	if r := math.Round(x); x > r && x-r <= r*1e-12 {
		x = r
	}
	w := math.Ceil(x)
	switch {
	case !(w >= 1): // also NaN
		return 1
	case w > maxSFInteger:
		return maxSFInteger
	}
	return int64(w)
}

// retrySeconds rounds a wait up to whole seconds, at least 1.
func retrySeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return min(max(s, 1), maxSFInteger)
}

// quoteString serializes s, printable ASCII, as an RFC 9651 String.
func quoteString(s string) string {
	b := make([]byte, 0, len(s)+2)
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if s[i] == '"' || s[i] == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return string(append(b, '"'))
}

const (
	titleQuotaExceeded = "Request cannot be satisfied as assigned quota has been exceeded"
	titleUnavailable   = "Request cannot be satisfied due to temporary reduced capacity"
)

// writeInternalError answers 500 when the limit cannot be applied: an
// invalid quota or cost, a server-side error whose details stay in the
// server.
func writeInternalError(w http.ResponseWriter) {
	writeProblem(w, http.StatusInternalServerError, "about:blank", "Internal Server Error",
		"The rate limit could not be applied.", nil)
}

// writeBadRequest answers 400 to a request without a key to be limited by.
func writeBadRequest(w http.ResponseWriter, detail string) {
	writeProblem(w, http.StatusBadRequest, "about:blank", "Bad Request", detail, nil)
}

// problem is an RFC 9457 problem detail.
type problem struct {
	Type             string   `json:"type"`
	Title            string   `json:"title"`
	Status           int      `json:"status"`
	Detail           string   `json:"detail,omitempty"`
	ViolatedPolicies []string `json:"violated-policies,omitempty"`
}

// writeProblem answers with status and an application/problem+json body.
func writeProblem(w http.ResponseWriter, status int, typ, title, detail string, violated []string) {
	body, err := json.Marshal(problem{Type: typ, Title: title, Status: status, Detail: detail, ViolatedPolicies: violated})
	if err != nil { // cannot happen: strings and an int
		body = []byte(`{"type":"about:blank","status":` + strconv.Itoa(status) + `}`)
	}
	hdr := w.Header()
	hdr["Content-Type"] = []string{"application/problem+json"}
	hdr["Content-Length"] = []string{strconv.Itoa(len(body))}
	hdr["X-Content-Type-Options"] = []string{"nosniff"}
	w.WriteHeader(status)
	_, _ = w.Write(body)
}
