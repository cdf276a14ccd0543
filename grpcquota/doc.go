// Package grpcquota rate limits a gRPC server with a
// [leasequota.Limiter]: unary and stream server interceptors keyed by the
// peer's IP address (default), a request metadata key (an API key, say),
// or any function of the call.
//
// It is a module of its own, github.com/leasequota/leasequota/grpcquota,
// so that users of leasequota who do not use gRPC do not depend on it.
//
// The key of a call is its tenant, passed as it is to the Limiter: the
// string leasequota.WithQuotaFunc receives and Limiter.SetQuota and
// Limiter.GetQuota take. With WithMetadataKey("x-tenant"), a call carrying
// "x-tenant: acme" counts against tenant "acme". A call without a key (no
// such metadata, or a KeyFunc that returns "") is never limited under a
// key a client could name: it ends with codes.InvalidArgument, unless
// [WithMissingKeyError] decides it otherwise or [WithPeerFallback] limits
// it by peer address under a key prefix that no other key may start with.
//
// Several policies limit a call at once with [WithPolicy] (a KeyFunc per
// policy) and [WithPeerPolicy] (by peer address under a key prefix), for
// example per peer and per tenant: the keys of all of them are decided by
// one [leasequota.Limiter.AllowAllWithin], which admits only if every key
// admits and, when one refuses, spends nothing from any of them. Keys of
// different policies must differ (prefix them, "tenant:"+id), and
// leasequota.WithQuotaFunc gives each its quota. A call without its key
// for one policy ends with codes.InvalidArgument naming the policy.
//
// As with the HTTP middleware (package middleware), each call is decided
// locally from the tokens this instance has leased; when the lease is
// exhausted the call may wait up to [WithMaxWait] (default 100 ms) for a
// fresh one, when the Limiter estimates that it can come in time. A stream
// is charged once, when it opens.
//
// A refused call ends with status codes.ResourceExhausted, whose details
// carry an errdetails.RetryInfo (the estimated wait) and an
// errdetails.QuotaFailure naming the policy (with several, the one that
// refused). [WithDenialHandler] replaces the ResourceExhausted and
// Unavailable answers with an error of your own. Other outcomes:
//
//   - cost above the key's Burst, never admissible: ResourceExhausted with
//     QuotaFailure and no RetryInfo;
//   - no key, or a key that starts with the peer fallback's (or a peer
//     policy's) prefix: codes.InvalidArgument (see above), not counted;
//   - the same key for two policies: codes.Internal;
//   - cost 0: the call is exempt; a negative cost, or an invalid quota for
//     the key: codes.Internal (in shadow mode the call proceeds);
//   - Redis unreachable: the Limiter's failure mode decides first; a call
//     it admits without a lease proceeds (the rate limit metadata then has
//     no "ratelimit"), a refusal by the local fallback bucket is
//     ResourceExhausted as above;
//   - Redis unreachable in fail-closed mode, or the Limiter closed: per
//     [WithDegradedMode], codes.Unavailable with RetryInfo (the default),
//     or the call proceeds;
//   - the Limiter tracking too many keys to take a new one:
//     codes.Unavailable with RetryInfo;
//   - shadow mode ([WithShadow]): counted, never refused.
//
// With [WithRateLimitMetadata] the server also sends the header metadata
// "ratelimit-policy" and "ratelimit", with the values the HTTP middleware
// gives the fields of draft-ietf-httpapi-ratelimit-headers: with several
// policies, "ratelimit-policy" lists every policy whose key's quota is
// known and "ratelimit" is the deciding policy's (the one that refused,
// or when admitted the one with the least remaining). Its r is the
// fleet-wide estimate Decision.FleetRemaining, as in the HTTP field: the
// tokens this instance holds for the key plus those its last lease call
// left in the global bucket, at most q.
package grpcquota
