package leasequota

import (
	"math"

	"github.com/leasequota/leasequota/syncer"
)

// track returns the tenant, which the syncer tracks from now on; never an
// evicted one. When the tenant's quota is invalid it returns the quota and
// an error wrapping ErrInvalidQuota, and tracks nothing; when the syncer
// tracks too many tenants, syncer.ErrTooManyTenants.
func (l *Limiter) track(tenant string) (*syncer.Tenant, Quota, error) {
	if t := l.sync.Tenant(tenant); t != nil && !t.Evicted() {
		// (One evicted since the lookup is out of the registry already:
		// Track below makes the tenant anew.)
		return t, quotaOf(t), nil
	}
	gen := l.refresh.gen.Load()
	q, err := l.baseQuota(tenant)
	if err != nil {
		return nil, q, err
	}
	t, err := l.sync.Track(tenant, q)
	if err != nil {
		return nil, q, err
	}
	if l.refresh.gen.Load() != gen {
		// Invalidate was called while the quota was resolved (a slow
		// quota function), and may have found the tenant not tracked
		// yet: resolve it again, as it asked (TestInvalidateDuringFirstTrack).
		l.invalidate(tenant)
	}
	return t, quotaOf(t), nil
}

// fleetRemaining is Decision.FleetRemaining of a decision that left left
// tokens of a tenant's lease here, the tenant's global level as last seen
// being level (syncer.Tenant.Level, >= 0) and its Burst burst: level +
// left, at most burst, at least left.
func fleetRemaining(level, left, burst int64) int64 {
	f := level + left
	if f < left { // overflow
		f = math.MaxInt64
	}
	return max(min(f, burst), left)
}

// quotaOf returns the quota applied to t now, defaults resolved.
func quotaOf(t *syncer.Tenant) Quota { return *t.Limits() }

// baseQuota is tenant's configured quota, resolved: the default quota, or
// the one WithQuotaFunc gives, checked as New checks the default (an
// invalid one is returned as given, with an error wrapping
// ErrInvalidQuota).
func (l *Limiter) baseQuota(tenant string) (Quota, error) {
	if l.cfg.quotaFunc == nil {
		return l.defQuota, nil
	}
	q := l.cfg.quotaFunc(tenant)
	if err := l.defaults.Check(q); err != nil {
		return q, err
	}
	return l.defaults.Resolve(q), nil
}

// TenantInfo describes one tenant's lease on this instance.
type TenantInfo struct {
	Quota     Quota   // the quota applied, defaults resolved
	Tokens    int64   // leased tokens held now
	Lease     int64   // lease size the syncer aims for now
	Demand    float64 // estimated demand here, tokens per second
	Failures  int     // lease calls failed in a row (counted up to 255)
	Instances int     // instances active on the tenant, as Redis last counted
	// Slots is the number of per-P slots its tokens are kept in
	// (WithPerCPUTokens; a power of two), 0 while they are one count.
	Slots int
}

// Tenant returns what this instance knows of tenant's lease, and false if
// it does not track the tenant. It is for introspection (dashboards,
// simulations, tests), not for the request path: it takes the tenant's
// lock, which the syncer holds across the tenant's lease call, so it may
// wait for that call to answer.
// A tenant idle for a while, which the syncer keeps dormant (about 8 s
// without requests by default, docs/design.md "Memory per tenant"),
// reports its Quota and Tokens only: the rest is zero until its next
// request.
func (l *Limiter) Tenant(tenant string) (TenantInfo, bool) {
	e := l.sync.Tenant(tenant)
	if e == nil {
		return TenantInfo{}, false
	}
	s := l.sync.Snapshot(e)
	return TenantInfo{
		Quota:     quotaOf(e),
		Tokens:    s.Tokens,
		Lease:     s.Target,
		Demand:    s.Demand,
		Failures:  s.Failures,
		Instances: s.Instances,
		Slots:     s.Slots,
	}, true
}
