package leasequota

// FailureMode says what a tenant's requests get once Redis cannot be
// reached and the tokens leased before the failure are spent.
//
// Leases already held are always spent first: a failure mode applies only
// to requests the lease cannot cover while the tenant's lease calls fail.
// Admissions in FailLocal and FailOpen are outside the global bound (no
// token was debited from Redis for them); they are counted separately
// (Stats, and the Decision's Mode).
type FailureMode uint8

const (
	// FailDefault, in a Quota, means the limiter's mode (WithFailureMode,
	// FailLocal unless set). In a Decision it means no failure mode was
	// involved: the decision was made from a lease, normally.
	FailDefault FailureMode = iota
	// FailLocal admits from a local token bucket whose rate starts at this
	// instance's recent granted share of the tenant's Rate and decays
	// toward Rate divided by the number of instances Redis last counted on
	// the tenant, so that a fleet-wide outage admits about the quota, not
	// the quota times the instances. The default.
	FailLocal
	// FailClosed denies (ReasonUnavailable).
	FailClosed
	// FailOpen admits every request.
	FailOpen
)

var failureModeNames = [...]string{
	FailDefault: "default",
	FailLocal:   "fail_local",
	FailClosed:  "fail_closed",
	FailOpen:    "fail_open",
}

// String returns the mode in snake case, as used in metrics and logs.
func (m FailureMode) String() string {
	if int(m) < len(failureModeNames) {
		return failureModeNames[m]
	}
	return "unknown"
}

func (m FailureMode) valid() bool { return m <= FailOpen }
