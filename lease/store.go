package lease

import (
	"context"
	"iter"
)

// Store is what a syncer needs of the tenants' global buckets: acquires and
// releases in batches, the quota overrides, and the quota version that
// tells when an override changed. It is the seam between an instance and
// the shared state: *Client implements it on Redis, and package
// lease/memstore implements it in process with the same semantics, for
// unit tests, single-process programs and deterministic simulations.
//
// A Store value is one instance's view of the buckets. What identifies the
// instance (its id in the instance registry, the window within which it
// counts as active, the ids its releases carry) belongs to the view:
// WithInstance for a Client, memstore.Store.Instance in process.
//
// The methods behave as Client's do, which documents them in full:
//
//   - AcquireMany: each request refills the tenant's bucket from the
//     store's clock, caps it at Burst and grants min(Want, whole tokens),
//     further capped by the instance's fair-share credit while the
//     bucket is scarce; results[i] is the outcome of reqs[i]; the returned
//     error is non-nil only when no request got an answer. A single
//     acquire is AcquireMany of one request.
//   - ReleaseMany: each request credits what the bucket would hold had the
//     returned tokens never been granted (aged returns); one result per
//     request.
//   - GetOverride, SetOverride, DeleteOverride: the tenant's quota
//     override, which replaces the rate and burst callers pass; a change
//     keeps the bucket consistent and raises the quota version.
//   - ListOverrides: every stored override with its tenant, in no
//     particular order; see Client.ListOverrides for the errors it
//     yields.
//   - QuotaVersion: a counter raised by every SetOverride and
//     DeleteOverride, 0 before any.
//
// An invalid argument fails with an error wrapping ErrBadRequest and
// changes nothing. Implementations are safe for concurrent use.
type Store interface {
	AcquireMany(ctx context.Context, reqs []Request, results []Result) ([]Result, error)
	ReleaseMany(ctx context.Context, reqs []ReleaseRequest) []ReleaseResult
	GetOverride(ctx context.Context, tenant string) (*Override, error)
	SetOverride(ctx context.Context, tenant string, base Limits, o Override) (float64, error)
	DeleteOverride(ctx context.Context, tenant string, base Limits) (float64, error)
	ListOverrides(ctx context.Context) iter.Seq2[ListedOverride, error]
	QuotaVersion(ctx context.Context) (int64, error)
}

// *Client is the Redis Store.
var _ Store = (*Client)(nil)
