package syncer

import (
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// limits is the quota in force on a tenant, resolved (Tenant.Limits
// returns it), and for the quota of an override that Redis reported, the
// tenant's base limits that the override replaces. Requests keep sending
// the base's rate and burst: Redis applies the override itself.
type limits struct {
	quota.Quota
	base *limits // nil for base limits
}

// baseOf returns the base limits behind l: l itself unless l is an
// override's.
func (l *limits) baseOf() *limits {
	if l.base != nil {
		return l.base
	}
	return l
}

// baseLimits returns the limits of base quota q: the ones last made when
// they hold the same quota, so that the tenants of one quota (a limiter's
// default quota) share one record instead of one each.
func (s *Syncer) baseLimits(q quota.Quota) *limits {
	if l := s.lastBase.Load(); l != nil && l.Quota == q {
		return l
	}
	l := &limits{Quota: q}
	s.lastBase.Store(l)
	return l
}

// bucket returns the global bucket that t's lease calls pass: its base
// quota's.
func (t *Tenant) bucket() lease.Limits { return quota.Bucket(t.limits.Load().baseOf().Quota) }
