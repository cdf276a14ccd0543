package leasequota

import "github.com/leasequota/leasequota/quota"

// FailureMode says what a tenant's requests get once Redis cannot be
// reached and the tokens leased before the failure are spent. It is
// quota.FailureMode, the type of Quota.FailureMode.
//
// Leases already held are always spent first: a failure mode applies only
// to requests the lease cannot cover while the tenant's lease calls fail.
// Admissions in FailLocal and FailOpen are outside the global bound (no
// token was debited from Redis for them); they are counted separately
// (Stats, and the Decision's Mode).
type FailureMode = quota.FailureMode

const (
	// FailDefault, in a Quota, means the limiter's mode (WithFailureMode,
	// FailLocal unless set). In a Decision it means no failure mode was
	// involved: the decision was made from a lease, normally.
	FailDefault = quota.FailDefault
	// FailLocal admits from a local token bucket whose rate starts at this
	// instance's recent granted share of the tenant's Rate and decays
	// toward Rate divided by the number of instances Redis last counted on
	// the tenant, so that a fleet-wide outage admits about the quota, not
	// the quota times the instances. The default.
	FailLocal = quota.FailLocal
	// FailClosed denies (ReasonUnavailable).
	FailClosed = quota.FailClosed
	// FailOpen admits every request.
	FailOpen = quota.FailOpen
)
