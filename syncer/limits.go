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
}

// Bucket returns the global bucket's parameters, as the lease protocol
// takes them.
func (l Limits) Bucket() lease.Limits {
	return lease.Limits{Rate: l.Rate, Burst: l.Burst}
}
