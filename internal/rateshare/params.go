package rateshare

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidParams is returned, wrapped, by Params.Validate.
var ErrInvalidParams = errors.New("rateshare: invalid params")

// Params are a tenant's quota and the shape of its shares. The methods of
// Params, Bucket and Lease take valid Params (Validate) and do not check
// them again: a client would validate a tenant's once, as it validates a
// quota.
type Params struct {
	// Rate is the tenant's quota, tokens per second; Burst the bucket's
	// capacity. Both > 0.
	Rate, Burst float64
	// Period is the length of an epoch, at least a millisecond; Phase,
	// in [0, Period), offsets the tenant's epoch boundaries, so that the
	// tenants of a fleet do not renew together (a hash of the tenant's
	// name in a client).
	Period, Phase time.Duration
	// Headroom is the part of Rate never granted as shares, in [0, 1):
	// the bucket keeps refilling at least at Headroom*Rate, for bursts
	// and for instances that arrive in the middle of an epoch.
	Headroom float64
	// Hold is how long an instance's unspent share accrues: it holds at
	// most share*Hold tokens of it. It is the L of the window bound,
	// Burst + Rate*(W + L). A share too small to hold one token
	// (share*Hold < 1) is not granted. At least a millisecond.
	Hold time.Duration
}

// Validate returns an error wrapping ErrInvalidParams that names the
// first field out of range, or nil.
func (p Params) Validate() error {
	switch {
	case !(p.Rate > 0) || math.IsInf(p.Rate, 0):
		return fmt.Errorf("%w: Rate %v, want > 0 and finite", ErrInvalidParams, p.Rate)
	case !(p.Burst > 0) || math.IsInf(p.Burst, 0):
		return fmt.Errorf("%w: Burst %v, want > 0 and finite", ErrInvalidParams, p.Burst)
	case p.Period < time.Millisecond:
		return fmt.Errorf("%w: Period %v, want at least 1ms", ErrInvalidParams, p.Period)
	case p.Phase < 0 || p.Phase >= p.Period:
		return fmt.Errorf("%w: Phase %v, want in [0, Period)", ErrInvalidParams, p.Phase)
	case !(p.Headroom >= 0 && p.Headroom < 1):
		return fmt.Errorf("%w: Headroom %v, want in [0, 1)", ErrInvalidParams, p.Headroom)
	case p.Hold < time.Millisecond:
		return fmt.Errorf("%w: Hold %v, want at least 1ms", ErrInvalidParams, p.Hold)
	}
	return nil
}

// micros is d in microseconds, the store's unit of time.
func micros(d time.Duration) int64 { return d.Microseconds() }

// EpochOf returns the index of the epoch that holds time now (µs).
func (p Params) EpochOf(now int64) int64 {
	period := micros(p.Period)
	x := now - micros(p.Phase)
	e := x / period
	if x%period < 0 { // floor, not truncation, before the clock's zero
		e--
	}
	return e
}

// EpochEnd returns the time (µs) at which epoch e ends and e+1 starts.
func (p Params) EpochEnd(e int64) int64 { return (e+1)*micros(p.Period) + micros(p.Phase) }

// grantable is the most the shares in force may sum to.
func (p Params) grantable() float64 { return p.Rate * (1 - p.Headroom) }

// capOf is what a share of rate s may hold unspent.
func (p Params) capOf(s float64) float64 { return s * p.Hold.Seconds() }
