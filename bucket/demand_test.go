package bucket_test

import (
	"math"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/bucket"
)

func near(got, want, relTol float64) bool {
	if math.IsNaN(got) || math.IsInf(got, 0) {
		return false
	}
	return math.Abs(got-want) <= relTol*math.Max(math.Abs(want), 1e-12)
}

// TestUpdateRateHalfLife: one half-life of a new rate moves the estimate
// halfway to it.
func TestUpdateRateHalfLife(t *testing.T) {
	hl := 500 * time.Millisecond
	if got := bucket.UpdateRate(0, 50, hl, hl); !near(got, 50, 1e-9) { // 100/s
		t.Fatalf("UpdateRate(0, 100/s over a half-life) = %v, want 50", got)
	}
	if got := bucket.UpdateRate(200, 0, hl, hl); !near(got, 100, 1e-9) {
		t.Fatalf("UpdateRate(200, nothing over a half-life) = %v, want 100", got)
	}
}

// TestUpdateRateConvergesToConstantRate: a constant stream, observed at
// any period, is estimated within 1% after 10 half-lives, from below
// without overshooting.
func TestUpdateRateConvergesToConstantRate(t *testing.T) {
	const rate = 400.0 // tokens per second
	hl := time.Second
	for _, dt := range []time.Duration{
		10 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		time.Second, 2500 * time.Millisecond,
	} {
		var r float64
		for elapsed := time.Duration(0); elapsed < 10*hl; elapsed += dt {
			r = bucket.UpdateRate(r, int64(rate*dt.Seconds()), dt, hl)
		}
		if !near(r, rate, 0.01) {
			t.Errorf("dt %v: rate after 10 half-lives = %v, want %v within 1%%", dt, r, rate)
		}
		if r > rate {
			t.Errorf("dt %v: rate from below overshot: %v > %v", dt, r, rate)
		}
	}
}

// TestUpdateRateConvergesProperty: irregular observation times, constant
// stream, any starting estimate: after 10 half-lives the gap is at most
// 2^-10 of the starting gap.
func TestUpdateRateConvergesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hl := time.Duration(rapid.Int64Range(10, 5000).Draw(t, "halfLifeMs")) * time.Millisecond
		perMs := rapid.Int64Range(1, 100).Draw(t, "tokensPerMs") // exact counts
		r0 := float64(rapid.Int64Range(0, 1e6).Draw(t, "startRate"))
		r := r0
		for elapsed := time.Duration(0); elapsed < 10*hl; {
			stepMs := rapid.Int64Range(1, hl.Milliseconds()).Draw(t, "stepMs")
			dt := time.Duration(stepMs) * time.Millisecond
			r = bucket.UpdateRate(r, perMs*stepMs, dt, hl)
			elapsed += dt
		}
		want := float64(perMs) * 1000
		if tol := math.Abs(r0-want)/1024*(1+1e-6) + want*1e-9; math.Abs(r-want) > tol {
			t.Fatalf("rate = %v, want %v within %v (start estimate %v)", r, want, tol, r0)
		}
	})
}

// TestUpdateRateIndependentOfPeriod: observing a new constant rate for one
// half-life moves the estimate exactly halfway, however it is split.
func TestUpdateRateIndependentOfPeriod(t *testing.T) {
	hl := 800 * time.Millisecond
	for _, steps := range []int{1, 2, 4, 8, 16} {
		var r float64
		dt := hl / time.Duration(steps)
		for range steps {
			r = bucket.UpdateRate(r, int64(1000*dt.Seconds()), dt, hl) // 1000 tokens/s
		}
		if !near(r, 500, 1e-9) {
			t.Errorf("%d steps: rate = %v, want 500", steps, r)
		}
	}
}

// TestUpdateRateSameInstant: a count observed with no time passing is
// added as an impulse (count·ln2/halfLife), finite and not lost, for dt 0
// and for a dt that went backwards alike.
func TestUpdateRateSameInstant(t *testing.T) {
	hl := time.Second
	for _, dt := range []time.Duration{0, -time.Second} {
		r := bucket.UpdateRate(5, 10, dt, hl)
		if want := 5 + 10*math.Ln2; !near(r, want, 1e-12) {
			t.Errorf("dt %v: rate = %v, want %v", dt, r, want)
		}
	}
	// The impulse is the limit of the average as dt goes to 0.
	if a, b := bucket.UpdateRate(5, 10, 0, hl), bucket.UpdateRate(5, 10, time.Nanosecond, hl); !near(a, b, 1e-6) {
		t.Errorf("impulse %v, 1ns %v: want the limit", a, b)
	}
}
