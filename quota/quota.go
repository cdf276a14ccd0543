// Package quota defines a tenant's quota: the one type that the limiter
// (package leasequota, which names it leasequota.Quota), its syncer and its
// admin calls share, the rule that validates it, and the rule that fills
// in the defaults of its zero fields. Most programs need only
// leasequota.Quota; this package exists so that the syncer, which the
// root package imports, can use the same type.
package quota

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// ErrInvalid is wrapped by errors about a Quota, naming the field. Package
// leasequota exports it as ErrInvalidQuota.
var ErrInvalid = errors.New("leasequota: invalid quota")

// MaxLeaseTTL is the longest lease lifetime a Quota or a limiter's default
// may set. Leases that lived longer would only strand tokens (and lifetimes
// are kept in int64 nanoseconds of wall time, which end in 2262).
const MaxLeaseTTL = 24 * time.Hour

// Quota is one tenant's limit: a global token bucket in Redis that holds at
// most Burst tokens and gains Rate tokens per second, and how an instance
// cuts leases from it.
//
// Rate and Burst are required. The lease fields may be left zero: each
// zero field takes the default documented on it, resolved per tenant
// (Defaults.Resolve).
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
	// MaxLease is the largest lease one instance asks for at once (a rate
	// share's accrued tokens come on top of it). Zero means half of Burst,
	// at least MinLease (and so at least 1). It must be >= MinLease and
	// <= Burst.
	MaxLease int64
	// LeaseTTL is how long leased tokens may be held before they expire:
	// unspent ones are then taken back and returned to Redis as an aged
	// return, credited only with what the bucket would hold had they never
	// been leased (leasequota.Stats.Expired counts them; Stats.Returned
	// what Redis credited, Stats.Forfeited the rest). With one syncer tick
	// it is L in the window bound B + r(W + L). Zero means the limiter's
	// default (leasequota.WithLeaseTTL); else at least twice the refresh
	// interval (MinLeaseTTL).
	LeaseTTL time.Duration
	// FailureMode is what the tenant's requests get when Redis cannot be
	// reached and its lease is spent. FailDefault (zero) means the
	// limiter's mode (leasequota.WithFailureMode).
	FailureMode FailureMode
}

// FailureMode says what a tenant's requests get once Redis cannot be
// reached and the tokens leased before the failure are spent. Package
// leasequota documents each mode.
type FailureMode uint8

// The failure modes, in the order of their values.
const (
	FailDefault FailureMode = iota // the limiter's mode; in a decision, no mode was involved
	FailLocal                      // a local token bucket at this instance's share of the rate
	FailClosed                     // deny
	FailOpen                       // admit
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

// Validate reports whether q is a usable quota. Errors wrap ErrInvalid and
// name the field. It cannot know the refresh interval that LeaseTTL must
// allow for: Defaults.Check adds that rule.
func (q Quota) Validate() error {
	if err := Bucket(q).Check(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if q.MinLease < 0 {
		return fmt.Errorf("%w: MinLease is %d, want >= 0 (0 means 1)", ErrInvalid, q.MinLease)
	}
	if q.MaxLease < 0 {
		return fmt.Errorf("%w: MaxLease is %d, want >= 0 (0 means Burst/2)", ErrInvalid, q.MaxLease)
	}
	if q.MaxLease > q.Burst {
		return fmt.Errorf("%w: MaxLease %d is above Burst %d", ErrInvalid, q.MaxLease, q.Burst)
	}
	if q.MinLease > q.Burst {
		return fmt.Errorf("%w: MinLease %d is above Burst %d", ErrInvalid, q.MinLease, q.Burst)
	}
	if q.MaxLease != 0 && q.MinLease > q.MaxLease {
		return fmt.Errorf("%w: MinLease %d is above MaxLease %d", ErrInvalid, q.MinLease, q.MaxLease)
	}
	if q.FailureMode > FailOpen {
		return fmt.Errorf("%w: FailureMode is %d, want one of the FailureMode constants", ErrInvalid, q.FailureMode)
	}
	if q.LeaseTTL > MaxLeaseTTL {
		return fmt.Errorf("%w: LeaseTTL is %v, want at most %v", ErrInvalid, q.LeaseTTL, MaxLeaseTTL)
	}
	if q.LeaseTTL < 0 {
		return fmt.Errorf("%w: LeaseTTL is %v, want >= 0 (0 means the limiter's default)", ErrInvalid, q.LeaseTTL)
	}
	return nil
}

// MinLeaseTTL returns the shortest LeaseTTL usable when leases are
// refreshed every interval: twice the interval. The syncer renews a lease
// up to two intervals before it expires, so a shorter lifetime would let
// leases expire before their renewal came due.
func MinLeaseTTL(interval time.Duration) time.Duration {
	if interval > math.MaxInt64/2 {
		return math.MaxInt64 // twice it does not fit: longer than any lease
	}
	return 2 * interval
}

// Defaults are a limiter's settings that stand in for a Quota's zero
// fields, and the refresh interval its LeaseTTL must allow for.
type Defaults struct {
	LeaseTTL    time.Duration // for a zero LeaseTTL
	FailureMode FailureMode   // for FailDefault
	Interval    time.Duration // how often leases are refreshed
}

// Check reports whether q can be a quota of a limiter with defaults d:
// valid (Quota.Validate), and a LeaseTTL that is set at least
// MinLeaseTTL(d.Interval). Errors wrap ErrInvalid and name the field.
func (d Defaults) Check(q Quota) error {
	if err := q.Validate(); err != nil {
		return err
	}
	if q.LeaseTTL != 0 && q.LeaseTTL < MinLeaseTTL(d.Interval) {
		return fmt.Errorf("%w: LeaseTTL %v is below twice the refresh interval %v", ErrInvalid, q.LeaseTTL, d.Interval)
	}
	return nil
}

// Resolve returns q as it is applied: each zero lease field replaced by
// its default (MinLease 1, MaxLease Burst/2 and at least MinLease,
// LeaseTTL and FailureMode from d). For a quota that Check accepts that is
// all. A quota it would refuse (a quota stored in Redis by another
// limiter, with another interval or version) is made usable rather than
// refused: MinLease is capped at Burst, MaxLease kept within MinLease and
// Burst, LeaseTTL within MinLeaseTTL(d.Interval) and MaxLeaseTTL, and an
// unknown FailureMode means d's. Rate and Burst must be valid.
func (d Defaults) Resolve(q Quota) Quota {
	if q.FailureMode == FailDefault || q.FailureMode > FailOpen {
		q.FailureMode = d.FailureMode
	}
	if q.MinLease <= 0 {
		q.MinLease = 1
	}
	q.MinLease = min(q.MinLease, q.Burst)
	if q.MaxLease <= 0 {
		q.MaxLease = q.Burst / 2
	}
	q.MaxLease = min(max(q.MaxLease, q.MinLease), q.Burst)
	if q.LeaseTTL <= 0 {
		q.LeaseTTL = d.LeaseTTL
	}
	q.LeaseTTL = max(min(q.LeaseTTL, MaxLeaseTTL), MinLeaseTTL(d.Interval))
	return q
}

// Bucket returns q's global bucket, as the lease protocol takes it.
func Bucket(q Quota) lease.Limits { return lease.Limits{Rate: q.Rate, Burst: q.Burst} }

// ToOverride returns q as SetQuota stores it in Redis: as given, zero
// fields unresolved. FromOverride is its inverse.
func ToOverride(q Quota) lease.Override {
	return lease.Override{
		Rate:     q.Rate,
		Burst:    q.Burst,
		MinLease: q.MinLease,
		MaxLease: q.MaxLease,
		LeaseTTL: q.LeaseTTL,
		Mode:     uint8(q.FailureMode),
	}
}

// FromOverride returns the quota stored in Redis as o.
func FromOverride(o lease.Override) Quota {
	return Quota{
		Rate:        o.Rate,
		Burst:       o.Burst,
		MinLease:    o.MinLease,
		MaxLease:    o.MaxLease,
		LeaseTTL:    o.LeaseTTL,
		FailureMode: FailureMode(o.Mode),
	}
}
