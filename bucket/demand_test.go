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

func wantRate(t *testing.T, d *bucket.Demand, now time.Time, want float64) {
	t.Helper()
	if got := d.Rate(now); !near(got, want, 1e-9) {
		t.Fatalf("Rate(t0+%v) = %v, want %v", now.Sub(t0), got, want)
	}
}

// TestDemandZeroValue: zero estimate, DefaultHalfLife.
func TestDemandZeroValue(t *testing.T) {
	var d bucket.Demand
	if got := d.Rate(t0); got != 0 {
		t.Fatalf("zero Demand Rate = %v, want 0", got)
	}
	d.Observe(t0, 0)
	// One half-life of 100 tokens/s moves the estimate halfway: 50.
	d.Observe(t0.Add(bucket.DefaultHalfLife), int64(100*bucket.DefaultHalfLife.Seconds()))
	wantRate(t, &d, t0.Add(bucket.DefaultHalfLife), 50)

	// A negative HalfLife also means DefaultHalfLife.
	neg := bucket.Demand{HalfLife: -time.Second}
	neg.Observe(t0, 0)
	neg.Observe(t0.Add(bucket.DefaultHalfLife), int64(100*bucket.DefaultHalfLife.Seconds()))
	wantRate(t, &neg, t0.Add(bucket.DefaultHalfLife), 50)
}

// TestDemandConvergesToConstantRate: a constant stream, observed at any
// period, is estimated within 1% after 10 half-lives.
func TestDemandConvergesToConstantRate(t *testing.T) {
	const rate = 400.0 // tokens per second
	hl := time.Second
	for _, dt := range []time.Duration{
		10 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond,
		time.Second, 2500 * time.Millisecond,
	} {
		d := bucket.Demand{HalfLife: hl}
		now := t0
		d.Observe(now, 0)
		for now.Sub(t0) < 10*hl {
			now = now.Add(dt)
			d.Observe(now, int64(rate*dt.Seconds()))
		}
		if got := d.Rate(now); !near(got, rate, 0.01) {
			t.Errorf("dt %v: Rate after 10 half-lives = %v, want %v within 1%%", dt, got, rate)
		}
		if got := d.Rate(now); got > rate {
			t.Errorf("dt %v: Rate from below overshot: %v > %v", dt, got, rate)
		}
	}
}

// TestDemandConvergesProperty: irregular observation times, constant
// stream, converge within 1% after 10 half-lives.
func TestDemandConvergesProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		hl := time.Duration(rapid.Int64Range(10, 5000).Draw(t, "halfLifeMs")) * time.Millisecond
		perMs := rapid.Int64Range(1, 100).Draw(t, "tokensPerMs") // exact counts
		start := float64(rapid.Int64Range(0, 1e6).Draw(t, "startRate"))
		d := bucket.Demand{HalfLife: hl}
		now := t0
		d.Observe(now, 0)
		// Establish some other starting estimate first.
		now = now.Add(20 * hl)
		d.Observe(now, int64(start*(20*hl).Seconds()))
		from := now
		d0 := d.Rate(from)
		for now.Sub(from) < 10*hl {
			stepMs := rapid.Int64Range(1, hl.Milliseconds()).Draw(t, "stepMs")
			now = now.Add(time.Duration(stepMs) * time.Millisecond)
			d.Observe(now, perMs*stepMs)
		}
		want := float64(perMs) * 1000
		got := d.Rate(now)
		// The gap left after >= 10 half-lives is at most 2^-10 of the gap
		// at the start of the stream.
		gap0 := math.Abs(d0 - want)
		if tol := gap0/1024*(1+1e-6) + want*1e-9; math.Abs(got-want) > tol {
			t.Fatalf("Rate = %v, want %v within %v (start estimate %v)", got, want, tol, d0)
		}
		if !near(got, want, 0.01) && gap0 <= 10*want {
			t.Fatalf("Rate = %v, not within 1%% of %v", got, want)
		}
	})
}

// TestDemandIndependentOfPeriod: observing a new constant rate for one
// half-life moves the estimate exactly halfway, however it is split.
func TestDemandIndependentOfPeriod(t *testing.T) {
	hl := 800 * time.Millisecond
	for _, steps := range []int{1, 2, 4, 8, 16} {
		d := bucket.Demand{HalfLife: hl}
		d.Observe(t0, 0)
		d.Observe(t0.Add(100*hl), 0) // estimate ~0
		now := t0.Add(100 * hl)
		dt := hl / time.Duration(steps)
		for range steps {
			now = now.Add(dt)
			d.Observe(now, int64(1000*dt.Seconds())) // 1000 tokens/s
		}
		wantRate(t, &d, now, 500)
	}
}

// TestDemandDecay: with no observations, the estimate halves per half-life.
func TestDemandDecay(t *testing.T) {
	hl := 2 * time.Second
	d := bucket.Demand{HalfLife: hl}
	d.Observe(t0, 0)
	d.Observe(t0.Add(hl), 800) // 400/s over one half-life -> 200/s
	last := t0.Add(hl)
	wantRate(t, &d, last, 200)
	wantRate(t, &d, last.Add(hl), 100)
	wantRate(t, &d, last.Add(2*hl), 50)
	wantRate(t, &d, last.Add(hl/2), 200/math.Sqrt2)
	wantRate(t, &d, last.Add(10*hl), 200.0/1024)
	// Times at or before the last observation do not decay (or grow).
	wantRate(t, &d, last, 200)
	wantRate(t, &d, last.Add(-hl), 200)
	// Rate is a pure read: calling it changed nothing.
	wantRate(t, &d, last.Add(hl), 100)
}

// TestDemandSameInstant: counts observed with no time passing are carried
// into the next interval; no division by zero.
func TestDemandSameInstant(t *testing.T) {
	hl := time.Second
	d := bucket.Demand{HalfLife: hl}
	d.Observe(t0, 0)
	d.Observe(t0.Add(hl), 10) // alpha 0.5: rate 5
	wantRate(t, &d, t0.Add(hl), 5)
	for range 3 {
		d.Observe(t0.Add(hl), 2) // same instant: carried, no NaN
		wantRate(t, &d, t0.Add(hl), 5)
	}
	d.Observe(t0, 4) // backwards: carried too
	wantRate(t, &d, t0.Add(hl), 5)
	// Next interval of one half-life sees 6 + 4 + 0 = 10 tokens.
	d.Observe(t0.Add(2*hl), 0)
	wantRate(t, &d, t0.Add(2*hl), 5+0.5*(10-5))
	// Carried counts are used once.
	d.Observe(t0.Add(3*hl), 0)
	wantRate(t, &d, t0.Add(3*hl), 7.5/2)
}

// TestDemandSameInstantNoNaN: a long run of observations at one instant
// keeps every value finite.
func TestDemandSameInstantNoNaN(t *testing.T) {
	var d bucket.Demand
	for range 100 {
		d.Observe(t0, 1000)
		if r := d.Rate(t0); math.IsNaN(r) || math.IsInf(r, 0) || r != 0 {
			t.Fatalf("Rate after observations at one instant = %v, want 0", r)
		}
	}
	d.Observe(t0.Add(time.Nanosecond), 1)
	r := d.Rate(t0.Add(time.Nanosecond))
	if math.IsNaN(r) || math.IsInf(r, 0) || r <= 0 {
		t.Fatalf("Rate after 1ns = %v, want finite and positive", r)
	}
}

// TestDemandFirstObservationSetsTimeOnly: the first count covers an unknown
// interval, so it is not counted.
func TestDemandFirstObservationSetsTimeOnly(t *testing.T) {
	hl := time.Second
	d := bucket.Demand{HalfLife: hl}
	d.Observe(t0, 1_000_000)
	wantRate(t, &d, t0, 0)
	wantRate(t, &d, t0.Add(time.Hour), 0)
	d.Observe(t0.Add(hl), 0)
	if got := d.Rate(t0.Add(hl)); got != 0 {
		t.Fatalf("Rate after first count 1e6 then 0 over a half-life = %v, want 0", got)
	}
	// The interval is measured from the first observation's time.
	d2 := bucket.Demand{HalfLife: hl}
	d2.Observe(t0, 7)
	d2.Observe(t0.Add(hl), 100) // 100/s over one half-life -> 50
	wantRate(t, &d2, t0.Add(hl), 50)
}

// TestDemandReset forgets observations and keeps HalfLife.
func TestDemandReset(t *testing.T) {
	hl := 3 * time.Second
	d := bucket.Demand{HalfLife: hl}
	d.Observe(t0, 0)
	d.Observe(t0.Add(hl), 300)
	d.Observe(t0.Add(hl), 50) // pending
	if d.Rate(t0.Add(hl)) == 0 {
		t.Fatal("Rate = 0 before Reset; test setup broken")
	}
	d.Reset()
	if d.HalfLife != hl {
		t.Fatalf("HalfLife after Reset = %v, want %v", d.HalfLife, hl)
	}
	wantRate(t, &d, t0.Add(hl), 0)
	// After Reset the next observation is a first one again, and the
	// pending count was dropped.
	later := t0.Add(time.Hour)
	d.Observe(later, 12345)
	wantRate(t, &d, later, 0)
	d.Observe(later.Add(hl), int64(60*hl.Seconds())) // 60/s over one half-life
	wantRate(t, &d, later.Add(hl), 30)
}
