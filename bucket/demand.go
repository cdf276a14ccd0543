package bucket

import (
	"math"
	"time"
)

// Demand estimates a rate in tokens per second from counts observed at
// irregular times: an exponentially weighted moving average whose weight
// halves every HalfLife. Observations close together move it less than ones
// far apart, so the estimate does not depend on how often the syncer looks.
//
// Demand is plain state for one owner (the syncer, under its per-tenant
// lock): it is not safe for concurrent use. The zero value has a zero
// estimate and uses DefaultHalfLife.
type Demand struct {
	// HalfLife is how long an observation takes to lose half its weight.
	// Zero means DefaultHalfLife.
	HalfLife time.Duration

	rate    float64 // tokens per second
	last    int64   // unix nanoseconds of the last observation; 0 before the first
	pending int64   // tokens observed with no time passing since last
}

// DefaultHalfLife is the half-life of a zero Demand.
const DefaultHalfLife = 500 * time.Millisecond

// Observe records that count tokens were asked for (admitted or not) since
// the previous observation, as of time now. The first observation only
// sets the starting time; counts observed with no time passing (a time
// equal to or before the last one) are carried into the next interval.
func (d *Demand) Observe(now time.Time, count int64) {
	ns := now.UnixNano()
	if d.last == 0 {
		d.last = ns
		return
	}
	count += d.pending
	if ns <= d.last {
		d.pending = count
		return
	}
	d.pending = 0
	d.rate = UpdateRate(d.rate, count, time.Duration(ns-d.last), d.halfLife())
	d.last = ns
}

// Rate returns the estimate in tokens per second as of time now: it decays
// toward zero while nothing is observed.
func (d *Demand) Rate(now time.Time) float64 {
	if d.last == 0 {
		return d.rate
	}
	dt := time.Duration(now.UnixNano() - d.last)
	if dt <= 0 {
		return d.rate
	}
	return d.rate * math.Exp2(-dt.Seconds()/d.halfLife().Seconds())
}

// Reset forgets every observation.
func (d *Demand) Reset() {
	*d = Demand{HalfLife: d.HalfLife}
}

func (d *Demand) halfLife() time.Duration {
	if d.HalfLife <= 0 {
		return DefaultHalfLife
	}
	return d.HalfLife
}

// UpdateRate returns an exponentially weighted average of a rate, in
// tokens per second, after count tokens were observed over the dt since
// the previous observation: the weight of the old rate halves every
// halfLife. With dt <= 0 the count is added as an impulse (the limit of
// the average as dt goes to 0), so that observations at one instant are
// not lost. halfLife must be positive.
func UpdateRate(rate float64, count int64, dt, halfLife time.Duration) float64 {
	hl := halfLife.Seconds()
	if dt <= 0 {
		return rate + float64(count)*math.Ln2/hl
	}
	sec := dt.Seconds()
	alpha := 1 - math.Exp2(-sec/hl)
	return rate + alpha*(float64(count)/sec-rate)
}
