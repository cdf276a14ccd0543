package syncer

import (
	"time"

	"github.com/leasequota/leasequota/lease"
)

// Limits is the quota the syncer applies to one tenant, with every default
// resolved: the global bucket's rate and burst, and how leases of it are cut.
type Limits struct {
	Rate     float64       // tokens per second added to the global bucket
	Burst    int64         // capacity of the global bucket
	MinLease int64         // smallest lease asked for when the tenant is active, >= 1
	MaxLease int64         // largest lease asked for, MinLease <= MaxLease <= Burst
	LeaseTTL time.Duration // how long leased tokens may be held before they go back
	// Mode is the caller's failure mode for the tenant, carried for it and
	// not interpreted here.
	Mode uint8

	// Set by the syncer on the limits of an override: the tenant's base
	// limits and the override they were resolved from.
	base     *Limits
	override *lease.Override
}

// baseOf returns the base limits behind l: l itself unless l is an
// override's.
func (l *Limits) baseOf() *Limits {
	if l.base != nil {
		return l.base
	}
	return l
}

// Bucket returns the global bucket's parameters, as the lease protocol
// takes them.
func (l Limits) Bucket() lease.Limits {
	return lease.Limits{Rate: l.Rate, Burst: l.Burst}
}

// ResolveOverride returns the limits of a quota override for a tenant whose
// base limits are base: Rate and Burst from o; zero lease fields take their
// defaults (MinLease 1, MaxLease Burst/2, LeaseTTL and Mode from base); the
// lease sizes are clamped into 1 <= MinLease <= MaxLease <= Burst and the
// LeaseTTL raised to minTTL (twice the refresh interval: a lease is renewed
// up to two intervals before it expires).
func ResolveOverride(base *Limits, o *lease.Override, minTTL time.Duration) *Limits {
	l := &Limits{Rate: o.Rate, Burst: o.Burst, MinLease: o.MinLease, MaxLease: o.MaxLease, LeaseTTL: o.LeaseTTL, Mode: o.Mode}
	if l.MinLease <= 0 {
		l.MinLease = 1
	}
	l.MinLease = min(l.MinLease, l.Burst)
	if l.MaxLease <= 0 {
		l.MaxLease = max(l.Burst/2, l.MinLease, 1)
	}
	l.MaxLease = clamp(l.MaxLease, l.MinLease, l.Burst)
	if l.LeaseTTL <= 0 {
		l.LeaseTTL = base.LeaseTTL
	}
	l.LeaseTTL = max(l.LeaseTTL, minTTL)
	if l.Mode == 0 {
		l.Mode = base.Mode
	}
	return l
}
