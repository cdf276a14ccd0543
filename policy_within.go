package leasequota

import (
	"context"
	"time"

	"github.com/leasequota/leasequota/syncer"
)

// AllowAllWithin is AllowAll with AllowNWithin's bounded wait: a denial
// that waiting could turn into an admission (Reason.Waitable) with a
// RetryAfter of at most maxWait waits for it, as WaitAll does, for up to
// maxWait (and ctx). A wait that fails returns the fresh denial it ended
// with. When it denies, it spends nothing from any tenant's lease,
// waiting or not (a token that a tenant's FailLocal fallback bucket gave
// a turn is not given back, as for AllowAll: docs/policies.md). It is
// what a request handler with a latency budget and several policies
// wants: the HTTP middleware and the gRPC interceptors use it. With one
// tenant it is AllowNWithin.
func (l *Limiter) AllowAllWithin(ctx context.Context, n int64, maxWait time.Duration, tenants ...string) Decision {
	// The entry the denial noted the request's miss on: the wait does not
	// note it again, and takes it back when it admits, so that the request
	// counts once in that tenant's demand (TestAllowAllWithinCountsOnceInDemand).
	var missed *syncer.Tenant
	d, _ := l.decideAll(ctx, n, tenants, false, &missed)
	if d.Allowed || maxWait <= 0 || !d.Reason.Waitable() || d.RetryAfter > maxWait {
		return d
	}
	wctx, cancel := context.WithTimeout(ctx, maxWait)
	defer cancel()
	if wd, err := l.decideAll(wctx, n, tenants, true, &missed); err == nil || wd.Reason != 0 { // WaitAll's
		l.uncount(d) // the wait's decision replaces AllowAll's (allowNWait)
		return wd
	}
	return d
}

// TrackedQuota returns the quota applied now to a tenant this instance
// tracks, defaults resolved, and false when it tracks none by that name.
// Unlike Tenant it takes no lock and allocates nothing: it is for the
// request path, such as the HTTP middleware listing the quota of every
// policy of an AllowAll decision (Decision.Quota is the deciding
// tenant's only).
func (l *Limiter) TrackedQuota(tenant string) (Quota, bool) {
	e := l.sync.Tenant(tenant)
	if e == nil || e.Evicted() {
		return Quota{}, false
	}
	return quotaOf(e), true
}
