// Package middleware rate limits a net/http service with a
// [leasequota.Limiter]: per client IP by default, or per API key or any
// key a function derives from the request.
//
// Each request is decided locally from the tokens this instance has leased
// for the key (one atomic operation, no network I/O). Only when the local
// lease is exhausted does the request wait, at most [WithMaxWait] (default
// 100 ms), for a fresh lease from Redis; when none can come in time it is
// answered 429 Too Many Requests.
//
// # Keys
//
// Each request is limited by a key, its tenant in the Limiter: by default
// its client IP (see Client IP below); with [WithHeaderKey] the value of a
// header, as it is; with [WithKeyFunc] any string a function derives from
// the request. The key is passed as it is to the Limiter: it is the tenant
// that leasequota.WithQuotaFunc receives, that Limiter.SetQuota and
// Limiter.GetQuota take, and that the decision hook sees. Behind
// WithHeaderKey("X-Tenant"), SetQuota(ctx, "acme", q) sets the quota of
// the requests that carry "X-Tenant: acme".
//
// A request for which the function returns "" (no header, say) has no key,
// and is never limited under a key that a client could name. By default it
// is answered 400 Bad Request with an application/problem+json body of
// type "about:blank" that says what is missing. [WithMissingKeyHandler]
// answers it otherwise (or serves it unlimited). [WithClientIPFallback]
// limits it by client IP instead, under a key prefix of your choice, which
// the other keys may not use: a request whose own key starts with it is
// answered 400. Requests exempted by a cost of 0 need no key; in shadow
// mode a request without a key is passed on, neither counted nor refused,
// and not reported to the decision hook.
//
// # Several policies
//
// [WithPolicy] and [WithClientIPPolicy], given once per policy, limit
// each request by several keys at once: per client IP 10/s and per
// tenant by its plan, say. The keys of all policies are decided by one
// Limiter.AllowAllWithin call (AllowAll with the bounded wait of
// [WithMaxWait]): the request is admitted only if every key admits, and
// when one refuses nothing is spent from any of them, so a request the
// tenant policy refuses does not spend its IP's quota. Each key keeps its
// own quota (leasequota.WithQuotaFunc resolves it; tell keys of different
// policies apart by a prefix such as "tenant:"). A request without a key
// for one of the policies (its KeyFunc returned "", or its client IP is
// unknown) is answered as a request without a key above, for every
// policy: 400 naming the policy (or [WithMissingKeyHandler]), nothing
// decided nor spent. These options replace [WithKeyFunc], [WithHeaderKey],
// [WithClientIPFallback] and [WithPolicyName], which configure the single
// policy of a middleware without them; combining them panics.
//
// With several policies, RateLimit-Policy lists every policy whose key's
// quota is known, in the order given, and RateLimit (and the legacy
// fields) are those of the deciding policy: the one that refused, or,
// when admitted, the one with the least quota remaining here (of those,
// the least remaining in the fleet; Decision.Tenant, which is also the
// key the decision hook receives):
//
//	RateLimit-Policy: "ip";q=10;w=1, "tenant";q=1000;w=60
//	RateLimit: "tenant";r=0;t=3
//
// A refusal's "violated-policies" names the deciding policy. Two policies
// with the same key for one request is a server error: 500.
//
// # Refusals
//
// [WithDenialHandler] answers the 429 and 503 refusals instead of the
// default application/problem+json bodies described here; it receives a
// [Denial] (status, policy, key, decision), with the header fields already
// set on the response.
//
// # Response header fields
//
// Every limited response carries the fields of
// draft-ietf-httpapi-ratelimit-headers-10, serialized as RFC 9651
// structured fields, for the policy named by [WithPolicyName] (default
// "default"):
//
//	RateLimit-Policy: "default";q=5;w=1
//	RateLimit: "default";r=3;t=0
//
// The parameters mean:
//
//   - q, the quota: the key's Burst, the most quota units that can be
//     spent at once.
//   - w, the window in seconds: ceil(Burst/Rate), at least 1, the time the
//     key's bucket takes to refill from empty. q/w approximates the
//     sustained rate.
//   - r, the remaining quota units, an estimate for the whole fleet
//     (Decision.FleetRemaining): the tokens this instance holds for the key
//     right now plus the tokens its last lease call for the key left in the
//     global bucket in Redis, at most q. It is what this instance knows
//     without asking Redis: the bucket's refill since that call is not
//     added, and what other replicas leased since is not taken off, nor
//     are the tokens they hold counted. So it is neither a bound above nor
//     below; a client that paces itself by r slows down as the key's
//     quota, not this replica's lease, runs low. X-RateLimit-Remaining is
//     the same number.
//   - t, seconds until quota is available: 0 when the request was
//     admitted; when it was refused, the estimated wait for its cost,
//     rounded up to whole seconds (at least 1).
//
// A refused request gets 429 with Retry-After equal to t (integer seconds,
// never earlier than t) and an RFC 9457 application/problem+json body of
// the draft's problem type
// "https://iana.org/assignments/http-problem-types#quota-exceeded", with
// the extension member "violated-policies".
//
// [WithLegacyHeaders] adds X-RateLimit-Limit (q), X-RateLimit-Remaining (r)
// and X-RateLimit-Reset (t, as a delay in seconds, not a timestamp).
//
// The fields are set by assigning their canonical keys in the response's
// http.Header. RateLimit-Policy's value slice is cached with the quota it
// describes and shared by the responses that carry it: a handler may
// replace, add to or delete the field (Header.Set, Add, Del), but must
// not write into the slice. RateLimit's value and its slice are one
// allocation, the response's own (a value of more than 48 bytes, a policy
// name of more than about 20, takes two; the legacy fields of
// WithLegacyHeaders add one): an admitted request of one policy allocates
// once.
//
// # Other outcomes
//
//   - A request whose cost is above the key's Burst can never be admitted:
//     429 with the quota-exceeded problem, but without Retry-After and
//     without t, so that clients do not retry it.
//   - A cost of 0 (from [WithCost]) exempts the request: it is neither
//     counted nor given header fields. A negative cost is a bug: 500 (in
//     shadow mode the request is passed on, uncounted).
//   - An invalid quota for the key (from leasequota.WithQuotaFunc): 500
//     with an application/problem+json body of type "about:blank" (in
//     shadow mode the request is passed on, without header fields).
//   - Redis unreachable: the Limiter's failure mode (leasequota.WithFailureMode)
//     decides first. A request admitted by it (fail open, or the local
//     fallback bucket) is passed on with RateLimit-Policy but no RateLimit
//     field, as nothing is known of the remaining quota; a refusal by the
//     fallback bucket is a 429 like any other.
//   - Redis unreachable in fail-closed mode (Reason unavailable), or the
//     Limiter closed: as [WithDegradedMode] says. [DegradedDeny] (the
//     default) answers 503 Service Unavailable with Retry-After and the
//     draft's
//     "https://iana.org/assignments/http-problem-types#temporary-reduced-capacity"
//     problem; [DegradedAllow] passes the request on, without RateLimit
//     and with RateLimit-Policy where the key's quota is known: a closed
//     Limiter knows the quota of the keys it tracked before Close only (it
//     looks up no quota), so a key it never tracked gets no
//     RateLimit-Policy either.
//   - The Limiter tracking too many keys to take a new one (Reason
//     too_many_tenants): 503 as above, whatever the degraded mode.
//   - In shadow mode ([WithShadow]) every request with a key, a cost
//     above 0 and a valid quota is counted and given the header fields,
//     but none is refused or held for [WithMaxWait]; the Limiter's own
//     waits (a key's first lease here, up to leasequota.WithColdStartWait)
//     still apply.
//
// # Client IP
//
// The default key is the client IP taken from the request's RemoteAddr.
// Behind reverse proxies, [WithTrustedProxies] names the proxies (as
// netip.Prefix) and the header (Forwarded or X-Forwarded-For) they write;
// see [ClientIP] for how the chain is walked. IPv6 clients can be grouped
// by network with [WithIPv6Prefix].
package middleware
