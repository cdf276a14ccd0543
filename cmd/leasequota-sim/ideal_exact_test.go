package main

import (
	"math"
	"testing"
	"time"
)

// An exact token bucket (burst, rate), starting full, offered more than
// its rate all along, admits Burst + Rate*T over T: what the bound allows.
// idealAdmitted, the denominator of util, must say so whatever the
// series' step; it refilled each step after capping at the burst, and lost
// a step's refill (or, when Rate*step > Burst, most of every step's).
func TestIdealAdmittedIsAnExactBucket(t *testing.T) {
	for _, c := range []struct {
		name  string
		rate  float64
		burst int64
		step  time.Duration
	}{
		{"large at the 10s demo's step", 2000, 400, 100 * time.Millisecond},
		{"tight3000 at -duration 1m's step", 3000, 300, 200 * time.Millisecond},
		{"medium at -duration 2m's step", 400, 100, 400 * time.Millisecond},
	} {
		const nb = 50
		perStep := c.rate * c.step.Seconds()
		offered := make([]int64, nb)
		for b := range offered {
			offered[b] = int64(3 * perStep) // 3x the quota, as the over tenants
		}
		T := (nb * c.step).Seconds()
		want := float64(c.burst) + c.rate*T
		if got := idealAdmitted(offered, c.rate, c.burst, c.step); math.Abs(got-want) > 1 {
			t.Errorf("%s: ideal %v of a steady 3x demand over %.1fs, want Burst + Rate*T = %v", c.name, got, T, want)
		}
	}
	// After an idle gap the bucket is full again: a busy step admits the
	// burst and the step's refill, as in the first step.
	step := 100 * time.Millisecond
	if got := idealAdmitted([]int64{100, 0, 0, 0, 0, 0, 0, 0, 100}, 100, 20, step); got != 60 {
		t.Errorf("idle gap: %v, want 2 x (20 + 10)", got)
	}
}
