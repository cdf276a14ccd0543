package leasequota

import (
	"fmt"
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/syncer"
)

// MaxLeaseTTL is the longest lease lifetime a Quota or WithLeaseTTL may
// set. Leases that lived longer would only strand tokens (and lifetimes
// are kept in int64 nanoseconds of wall time, which end in 2262).
const MaxLeaseTTL = 24 * time.Hour

// Quota is one tenant's limit: a global token bucket in Redis that holds at
// most Burst tokens and gains Rate tokens per second, and how this
// instance cuts leases from it.
//
// Rate and Burst are required. The lease fields may be left zero: each
// zero field takes the default documented on it, resolved per tenant.
type Quota struct {
	// Rate is the number of tokens added to the tenant's global bucket per
	// second. It must be finite, > 0 and <= 1e12.
	Rate float64
	// Burst is the capacity of the tenant's global bucket, 1..1<<40. It is
	// also the largest n a single request may ask for.
	Burst int64

	// MinLease is the smallest lease asked for while the tenant is active.
	// Zero means 1.
	MinLease int64
	// MaxLease is the largest lease one instance holds at once. Zero means
	// half of Burst (at least 1). It must be >= MinLease and <= Burst.
	MaxLease int64
	// LeaseTTL is how long leased tokens may be held before they expire:
	// unspent ones are then taken back and returned to Redis as an aged
	// return, credited only with what the bucket would hold had they never
	// been leased (Stats.Expired counts them; Stats.Returned what Redis
	// credited, Stats.Forfeited the rest). With one syncer tick it is L in
	// the window bound B + r(W + L). Zero means the limiter's default
	// (WithLeaseTTL); else at least twice the refresh interval.
	LeaseTTL time.Duration
	// FailureMode is what the tenant's requests get when Redis cannot be
	// reached and its lease is spent. FailDefault (zero) means the
	// limiter's mode (WithFailureMode).
	FailureMode FailureMode
}

// Validate reports whether q is a usable quota. Errors wrap
// ErrInvalidQuota and name the field.
func (q Quota) Validate() error {
	if math.IsNaN(q.Rate) || math.IsInf(q.Rate, 0) || q.Rate <= 0 || q.Rate > lease.MaxRate {
		return fmt.Errorf("%w: Rate is %v, want a finite number in (0, %g]", ErrInvalidQuota, q.Rate, float64(lease.MaxRate))
	}
	if q.Burst < 1 || q.Burst > lease.MaxBurst {
		return fmt.Errorf("%w: Burst is %d, want 1..%d", ErrInvalidQuota, q.Burst, int64(lease.MaxBurst))
	}
	if q.MinLease < 0 {
		return fmt.Errorf("%w: MinLease is %d, want >= 0 (0 means 1)", ErrInvalidQuota, q.MinLease)
	}
	if q.MaxLease < 0 {
		return fmt.Errorf("%w: MaxLease is %d, want >= 0 (0 means Burst/2)", ErrInvalidQuota, q.MaxLease)
	}
	if q.MaxLease > q.Burst {
		return fmt.Errorf("%w: MaxLease %d is above Burst %d", ErrInvalidQuota, q.MaxLease, q.Burst)
	}
	if q.MinLease > q.Burst {
		return fmt.Errorf("%w: MinLease %d is above Burst %d", ErrInvalidQuota, q.MinLease, q.Burst)
	}
	if q.MaxLease != 0 && q.MinLease > q.MaxLease {
		return fmt.Errorf("%w: MinLease %d is above MaxLease %d", ErrInvalidQuota, q.MinLease, q.MaxLease)
	}
	if !q.FailureMode.valid() {
		return fmt.Errorf("%w: FailureMode is %d, want one of the FailureMode constants", ErrInvalidQuota, q.FailureMode)
	}
	if q.LeaseTTL > MaxLeaseTTL {
		return fmt.Errorf("%w: LeaseTTL is %v, want at most %v", ErrInvalidQuota, q.LeaseTTL, MaxLeaseTTL)
	}
	if q.LeaseTTL < 0 {
		return fmt.Errorf("%w: LeaseTTL is %v, want >= 0 (0 means the limiter's default)", ErrInvalidQuota, q.LeaseTTL)
	}
	return nil
}

// resolve returns q with zero lease fields replaced by their defaults. q
// must be valid.
func (q Quota) resolve(defaultTTL time.Duration, defaultMode FailureMode) Quota {
	if q.FailureMode == FailDefault {
		q.FailureMode = defaultMode
	}
	if q.MinLease == 0 {
		q.MinLease = 1
	}
	if q.MaxLease == 0 {
		q.MaxLease = max(q.Burst/2, q.MinLease, 1)
	}
	if q.LeaseTTL == 0 {
		q.LeaseTTL = defaultTTL
	}
	return q
}

// limits converts a resolved quota for the syncer.
func (q Quota) limits() *syncer.Limits {
	return &syncer.Limits{
		Rate:     q.Rate,
		Burst:    q.Burst,
		MinLease: q.MinLease,
		MaxLease: q.MaxLease,
		LeaseTTL: q.LeaseTTL,
		Mode:     uint8(q.FailureMode),
	}
}

// quotaOfLimits is the inverse of limits.
func quotaOfLimits(l *syncer.Limits) Quota {
	return Quota{
		Rate:        l.Rate,
		Burst:       l.Burst,
		MinLease:    l.MinLease,
		MaxLease:    l.MaxLease,
		LeaseTTL:    l.LeaseTTL,
		FailureMode: FailureMode(l.Mode),
	}
}
