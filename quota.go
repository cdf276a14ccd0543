package leasequota

import (
	"github.com/leasequota/leasequota/quota"
)

// MaxLeaseTTL is the longest lease lifetime a Quota or WithLeaseTTL may
// set. Leases that lived longer would only strand tokens (and lifetimes
// are kept in int64 nanoseconds of wall time, which end in 2262).
const MaxLeaseTTL = quota.MaxLeaseTTL

// Quota is one tenant's limit: a global token bucket in Redis that holds at
// most Burst tokens and gains Rate tokens per second; how this instance
// cuts leases from it (MinLease, MaxLease, LeaseTTL); and what its
// requests get when Redis cannot be reached (FailureMode).
//
// Rate and Burst are required. Each lease field left zero takes its
// default, resolved per tenant: MinLease 1, MaxLease Burst/2 (at least
// MinLease), LeaseTTL that of WithLeaseTTL, FailureMode that of
// WithFailureMode. Validate checks a Quota; New and SetQuota also check
// that a LeaseTTL that is set is at least twice the refresh interval.
//
// Quota is defined in package quota, so that the limiter and its syncer
// share one type; its fields are documented there.
type Quota = quota.Quota
