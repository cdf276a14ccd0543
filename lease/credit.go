package lease

import "time"

// The cap of an instance's fair-share credit at Redis (acquire.lua, which
// computes it the same way, in the same order, so that lease/memstore and
// the planner that waits for the credit agree with it to the bit).

// CreditSpan is what a fair share of share tokens a second accrues over
// half the registry window (WithInstance's window), at most a quarter of
// burst: the credit span, by which an instance's credit may pass its
// share of the burst (CreditCap).
func CreditSpan(burst int64, share float64, window time.Duration) float64 {
	return min(share*float64(window.Microseconds())/2e6, float64(burst)/4)
}

// CreditCap is the most credit, in tokens, that Redis lets an instance
// whose fair share of rate is share (tokens a second) accrue while the
// credit rule holds grants to it: its share of burst, or its credit span
// (CreditSpan) when that is more; a token at least.
func CreditCap(burst int64, rate, share float64, window time.Duration) float64 {
	return min(max(float64(burst)*share/rate, CreditSpan(burst, share, window), 1), MaxCredit)
}

// MaxCredit is the most credit Redis writes in a registry entry: 2^53
// tokens, more than 8,000 full buckets of MaxBurst, so a cap that high
// holds no grant back. An instance whose fair share is far above the
// rate (a demand that jumped past it since the registry summary) has a
// share of the burst, burst*share/rate, that a float64 may not hold:
// written as inf, the entry read back as corrupt on the next call, and
// the instance lost the rate share it held (TestConformance's "credit
// overflow").
const MaxCredit = 1 << 53
