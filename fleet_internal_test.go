package leasequota

import (
	"math"
	"testing"
)

func TestFleetRemainingArithmetic(t *testing.T) {
	for _, c := range []struct {
		level, left, burst, want int64
	}{
		{0, 0, 100, 0},
		{60, 39, 100, 99},
		{90, 39, 100, 100},  // capped at Burst
		{10, 120, 100, 120}, // never less than Remaining (held above a lowered Burst)
		{math.MaxInt64, 5, math.MaxInt64, math.MaxInt64}, // saturates
		{0, -3, 100, -3}, // a negative Remaining stays itself
	} {
		if got := fleetRemaining(c.level, c.left, c.burst); got != c.want {
			t.Errorf("fleetRemaining(%d, %d, %d) = %d, want %d", c.level, c.left, c.burst, got, c.want)
		}
	}
}
