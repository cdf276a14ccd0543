package bucket

import (
	"math"
	"time"
)

// UpdateRate returns an exponentially weighted average of a rate, in
// tokens per second, after count tokens were observed over the dt since
// the previous observation: the weight of the old rate halves every
// halfLife. Observations close together move it less than ones far apart,
// so the estimate does not depend on how often the caller looks. With
// dt <= 0 the count is added as an impulse (the limit of the average as dt
// goes to 0), so that observations at one instant are not lost. halfLife
// must be positive.
func UpdateRate(rate float64, count int64, dt, halfLife time.Duration) float64 {
	hl := halfLife.Seconds()
	if dt <= 0 {
		return rate + float64(count)*math.Ln2/hl
	}
	sec := dt.Seconds()
	alpha := 1 - math.Exp2(-sec/hl)
	return rate + alpha*(float64(count)/sec-rate)
}
