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
const maxSFInteger = 999_999_999_999_999

// New returns middleware that limits each request by its key (the client
// IP unless an option says otherwise) with l. See the package
// documentation for the responses. It panics when l is nil or an option
// is invalid.
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
	quoted := quoteString(cfg.policy)
	violated := []string{cfg.policy}
	missing, reserved := keyProblems(&cfg)
	return func(next http.Handler) http.Handler {
		if next == nil {
			panic("middleware: nil http.Handler")
		}
		return &handler{l: l, cfg: cfg, next: next, quoted: quoted, violated: violated,
			missingDetail: missing, reservedDetail: reserved}
	}
}

// keyProblems returns the details of the 400 answers to a request without
// a key and to one whose key starts with the client IP fallback's prefix.
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
	l        *leasequota.Limiter
	cfg      config
	next     http.Handler
	quoted   string   // the policy name as an sf-string
	violated []string // the problem's "violated-policies"

	missingDetail, reservedDetail string // of the 400 answers, see keyProblems

	// policy caches the RateLimit-Policy value of the last quota seen:
	// most services have one or a few quotas.
	policy atomic.Pointer[policyValue]
}

type policyValue struct {
	burst int64
	rate  float64
	value string
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	cost := int64(1)
	if h.cfg.cost != nil {
		cost = h.cfg.cost(r)
		switch {
		case cost == 0:
			h.next.ServeHTTP(w, r)
			return
		case cost < 0:
			writeInternalError(w)
			return
		}
	}
	key, problem := h.key(r)
	if problem != keyOK {
		switch {
		case h.cfg.shadow:
			h.next.ServeHTTP(w, r)
		case problem == keyMissing && h.cfg.missingKey != nil:
			h.cfg.missingKey.ServeHTTP(w, r)
		case problem == keyMissing:
			writeBadRequest(w, h.missingDetail)
		default:
			writeBadRequest(w, h.reservedDetail)
		}
		return
	}
	var d leasequota.Decision
	if h.cfg.shadow {
		d = h.l.AllowN(r.Context(), key, cost)
	} else {
		d = h.l.AllowNWithin(r.Context(), key, cost, h.cfg.maxWait)
	}
	if h.cfg.hook != nil {
		h.cfg.hook(r, key, d)
	}
	if d.Allowed {
		if d.Mode != leasequota.FailDefault {
			// Admitted by a failure mode, without a lease: nothing is
			// known of the remaining quota.
			h.setHeaders(w.Header(), d, false, -1)
		} else {
			h.setHeaders(w.Header(), d, true, 0)
		}
		h.next.ServeHTTP(w, r)
		return
	}
	if h.cfg.shadow {
		switch d.Reason {
		case leasequota.ReasonInvalidQuota:
		case leasequota.ReasonInvalidN:
			h.setHeaders(w.Header(), d, true, -1)
		case leasequota.ReasonUnavailable, leasequota.ReasonClosed, leasequota.ReasonTooManyTenants:
			h.setHeaders(w.Header(), d, false, -1)
		default:
			h.setHeaders(w.Header(), d, true, retrySeconds(d.RetryAfter))
		}
		h.next.ServeHTTP(w, r)
		return
	}
	switch d.Reason {
	case leasequota.ReasonExhausted, leasequota.ReasonColdStart, leasequota.ReasonFallback:
		t := retrySeconds(d.RetryAfter)
		hdr := w.Header()
		h.setHeaders(hdr, d, true, t)
		hdr[headerRetryAfter] = []string{strconv.FormatInt(t, 10)}
		writeProblem(w, http.StatusTooManyRequests, ProblemQuotaExceeded, titleQuotaExceeded,
			fmt.Sprintf("The quota of policy %q is exhausted; retry after %d s.", h.cfg.policy, t), h.violated)
	case leasequota.ReasonInvalidN:
		h.setHeaders(w.Header(), d, true, -1)
		writeProblem(w, http.StatusTooManyRequests, ProblemQuotaExceeded, titleQuotaExceeded,
			fmt.Sprintf("This request costs %d quota units, more than the whole quota of %d: it can never be admitted.",
				cost, d.Quota.Burst), h.violated)
	case leasequota.ReasonUnavailable, leasequota.ReasonClosed:
		if h.cfg.degraded == DegradedAllow {
			h.setHeaders(w.Header(), d, false, -1)
			h.next.ServeHTTP(w, r)
			return
		}
		writeUnavailable(w, d, "The rate limiter is unavailable")
	case leasequota.ReasonTooManyTenants:
		writeUnavailable(w, d, "The rate limiter tracks too many clients")
	default: // ReasonInvalidQuota, or a reason this version does not know
		writeInternalError(w)
	}
}

// writeUnavailable answers 503 with Retry-After, the limiter being unable
// to decide.
func writeUnavailable(w http.ResponseWriter, d leasequota.Decision, what string) {
	t := retrySeconds(d.RetryAfter)
	w.Header()[headerRetryAfter] = []string{strconv.FormatInt(t, 10)}
	writeProblem(w, http.StatusServiceUnavailable, ProblemTemporaryReducedCapacity,
		"Request cannot be satisfied due to temporary reduced capacity",
		fmt.Sprintf("%s; retry after %d s.", what, t), nil)
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

// setHeaders writes RateLimit-Policy for decision d and, when rate is
// true, RateLimit, with its t parameter unless t < 0 (and the legacy
// fields when enabled). It writes nothing when d carries no quota.
func (h *handler) setHeaders(hdr http.Header, d leasequota.Decision, rate bool, t int64) {
	q := d.Quota
	if q.Burst <= 0 || q.Rate <= 0 {
		return
	}
	pv := h.policy.Load()
	if pv == nil || pv.burst != q.Burst || pv.rate != q.Rate {
		pv = &policyValue{burst: q.Burst, rate: q.Rate, value: h.policyValue(q)}
		h.policy.Store(pv)
	}
	n := 1
	if rate {
		n++
	}
	if h.cfg.legacy {
		n++
		if rate {
			n += 2
		}
	}
	// One allocation for the value slices of every field.
	vals := make([]string, n)
	vals[0] = pv.value
	hdr[headerPolicy] = vals[0:1:1]
	if !rate {
		if h.cfg.legacy {
			vals[1] = strconv.FormatInt(min(q.Burst, maxSFInteger), 10)
			hdr[headerLegacyLimit] = vals[1:2:2]
		}
		return
	}
	r := min(max(d.Remaining, 0), maxSFInteger)
	var buf [96]byte
	b := append(buf[:0], h.quoted...)
	b = append(b, ";r="...)
	b = strconv.AppendInt(b, r, 10)
	if t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, t, 10)
	}
	vals[1] = string(b)
	hdr[headerRateLimit] = vals[1:2:2]
	if h.cfg.legacy {
		vals[2] = strconv.FormatInt(min(q.Burst, maxSFInteger), 10)
		hdr[headerLegacyLimit] = vals[2:3:3]
		vals[3] = strconv.FormatInt(r, 10)
		hdr[headerLegacyRemaining] = vals[3:4:4]
		if t >= 0 {
			vals[4] = strconv.FormatInt(t, 10)
			hdr[headerLegacyReset] = vals[4:5:5]
		}
	}
}

// policyValue formats the RateLimit-Policy value of quota q.
func (h *handler) policyValue(q leasequota.Quota) string {
	return string(appendPolicy(nil, h.quoted, q))
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
	b := append([]byte(quoteString(name)), ";r="...)
	b = strconv.AppendInt(b, min(max(remaining, 0), maxSFInteger), 10)
	if t >= 0 {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, min(t, maxSFInteger), 10)
	}
	return string(b)
}

// RetrySeconds rounds a wait up to the whole seconds of Retry-After and
// of RateLimit's t: at least 1, as a refusal is never "retry now".
func RetrySeconds(d time.Duration) int64 { return retrySeconds(d) }

// Window returns the window, in whole seconds, that the w parameter of
// RateLimit-Policy advertises for quota q: the time its bucket takes to
// refill from empty, ceil(Burst/Rate), at least 1.
func Window(q leasequota.Quota) int64 {
	w := math.Ceil(float64(q.Burst) / q.Rate)
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

const titleQuotaExceeded = "Request cannot be satisfied as assigned quota has been exceeded"

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
