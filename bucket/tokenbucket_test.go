package bucket_test

import (
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/bucket"
)

var t0 = time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func wantAvailable(t *testing.T, b *bucket.TokenBucket, now time.Time, want float64) {
	t.Helper()
	if got := b.Available(now); got != want {
		t.Fatalf("Available(t0+%v) = %v, want %v", now.Sub(t0), got, want)
	}
}

func wantDelay(t *testing.T, b *bucket.TokenBucket, now time.Time, n int64, want time.Duration, wantOK bool) {
	t.Helper()
	got, ok := b.Delay(now, n)
	if got != want || ok != wantOK {
		t.Fatalf("Delay(t0+%v, %d) = %v, %v; want %v, %v", now.Sub(t0), n, got, ok, want, wantOK)
	}
}

// TestTokenBucketRefillExact: capacity 10, rate 2/s.
func TestTokenBucketRefillExact(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	wantAvailable(t, b, t0, 10) // starts full
	if !b.TryConsume(t0, 10) {
		t.Fatal("TryConsume(10) on a full bucket of 10 failed")
	}
	if b.TryConsume(t0, 1) {
		t.Fatal("TryConsume(1) on an empty bucket succeeded")
	}
	wantAvailable(t, b, at(time.Second), 2)
	if b.TryConsume(at(time.Second), 3) {
		t.Fatal("TryConsume(3) with 2 available succeeded")
	}
	wantAvailable(t, b, at(time.Second), 2) // a failed consume takes nothing
	if !b.TryConsume(at(1500*time.Millisecond), 3) {
		t.Fatal("TryConsume(3) at +1.5s (3 available) failed")
	}
	wantAvailable(t, b, at(1500*time.Millisecond), 0)
	wantAvailable(t, b, at(1750*time.Millisecond), 0.5)
	if b.TryConsume(at(1750*time.Millisecond), 1) {
		t.Fatal("TryConsume(1) with 0.5 available succeeded")
	}
}

// TestTokenBucketCapsAtCapacity: refill never exceeds capacity.
func TestTokenBucketCapsAtCapacity(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	wantAvailable(t, b, at(time.Hour), 10)
	b.TryConsume(at(time.Hour), 4)
	wantAvailable(t, b, at(time.Hour+2*time.Second), 10) // 6 + 4 = 10
	wantAvailable(t, b, at(time.Hour+time.Minute), 10)
	if b.TryConsume(at(2*time.Hour), 11) {
		t.Fatal("TryConsume(11) above capacity 10 succeeded")
	}
	if !b.TryConsume(at(2*time.Hour), 10) {
		t.Fatal("TryConsume(10) after long idle failed")
	}
	wantAvailable(t, b, at(2*time.Hour), 0)
}

// TestTokenBucketBackwardsTime: a time before the last one is no time, and
// refill resumes from the latest time seen, not the earlier one.
func TestTokenBucketBackwardsTime(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	if !b.TryConsume(at(10*time.Second), 10) {
		t.Fatal("TryConsume(10) failed")
	}
	wantAvailable(t, b, at(5*time.Second), 0)
	if b.TryConsume(at(-time.Hour), 1) {
		t.Fatal("TryConsume with time far in the past gained tokens")
	}
	wantAvailable(t, b, at(10*time.Second), 0)
	// +1s after the latest time seen (+10s), not after +5s.
	wantAvailable(t, b, at(11*time.Second), 2)
	// SetRate and Delay going backwards do not move time either.
	b.SetRate(at(time.Second), 4)
	wantAvailable(t, b, at(11*time.Second), 2)
	wantDelay(t, b, at(11*time.Second), 4, 500*time.Millisecond, true)
	wantDelay(t, b, at(0), 4, 500*time.Millisecond, true)
	wantAvailable(t, b, at(12*time.Second), 6)
}

// TestTokenBucketDelay checks exact delays.
func TestTokenBucketDelay(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	wantDelay(t, b, t0, 10, 0, true) // full
	wantDelay(t, b, t0, 0, 0, true)
	wantDelay(t, b, t0, -5, 0, true)
	wantDelay(t, b, t0, 11, 0, false) // above capacity
	b.TryConsume(t0, 10)
	wantDelay(t, b, t0, 1, 500*time.Millisecond, true)
	wantDelay(t, b, t0, 3, 1500*time.Millisecond, true)
	wantDelay(t, b, t0, 10, 5*time.Second, true)
	wantDelay(t, b, t0, 11, 0, false)
	wantDelay(t, b, t0, math.MaxInt64, 0, false)
	// Delay consumes nothing.
	wantAvailable(t, b, t0, 0)
	wantDelay(t, b, at(time.Second), 3, 500*time.Millisecond, true)
	wantDelay(t, b, at(time.Second), 2, 0, true)
	wantAvailable(t, b, at(time.Second), 2)

	// A rate whose delay is not a whole number of nanoseconds rounds up,
	// so that the tokens are there at now+d and not one nanosecond before.
	b3 := bucket.NewTokenBucket(t0, 10, 3)
	b3.TryConsume(t0, 10)
	wantDelay(t, b3, t0, 1, 333333334*time.Nanosecond, true)
	if b3.TryConsume(at(333333333*time.Nanosecond), 1) {
		t.Fatal("TryConsume(1) succeeded 1ns before the delay")
	}
	if !b3.TryConsume(at(333333334*time.Nanosecond), 1) {
		t.Fatal("TryConsume(1) failed at the delay")
	}
}

// TestTokenBucketDelayRounding: the tokens are there at now+Delay even when
// the float quotient rounds to a whole nanosecond that is a hair short.
func TestTokenBucketDelayRounding(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 1, 0.125)
	b.TryConsume(t0, 1)
	now := at(6 * time.Nanosecond)
	d, ok := b.Delay(now, 1)
	if !ok || d < 7999999994*time.Nanosecond || d > 8*time.Second {
		t.Fatalf("Delay = %v, %v; want about 7.999999994s, true", d, ok)
	}
	if !b.TryConsume(now.Add(d), 1) {
		t.Fatalf("TryConsume(1) at now+Delay (%v) failed", d)
	}
}

// TestTokenBucketDelayNever: ok=false when the bucket can never hold n.
func TestTokenBucketDelayNever(t *testing.T) {
	zeroRate := bucket.NewTokenBucket(t0, 10, 0)
	wantDelay(t, zeroRate, t0, 10, 0, true) // holds them already
	zeroRate.TryConsume(t0, 5)
	wantDelay(t, zeroRate, t0, 5, 0, true)
	wantDelay(t, zeroRate, t0, 6, 0, false)
	wantDelay(t, zeroRate, at(time.Hour), 6, 0, false)
	wantAvailable(t, zeroRate, at(time.Hour), 5)

	var zero bucket.TokenBucket
	wantDelay(t, &zero, t0, 1, 0, false)
}

// TestTokenBucketDelayHuge: a delay beyond the range of time.Duration must
// not wrap to a negative value.
func TestTokenBucketDelayHuge(t *testing.T) {
	for _, tc := range []struct{ capacity, rate float64 }{
		{1e12, 1e-9},
		{10, math.SmallestNonzeroFloat64},
		{1e18, 1e-3},
	} {
		b := bucket.NewTokenBucket(t0, tc.capacity, tc.rate)
		b.TryConsume(t0, int64(tc.capacity))
		d, ok := b.Delay(t0, int64(tc.capacity))
		if !ok || d <= 0 {
			t.Errorf("capacity %g rate %g: Delay = %v, %v; want a positive delay, true",
				tc.capacity, tc.rate, d, ok)
		}
	}
}

// TestTokenBucketSetRate: changing the rate keeps tokens accrued so far and
// applies the new rate from then on.
func TestTokenBucketSetRate(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	b.TryConsume(t0, 10)
	b.SetRate(at(time.Second), 10)
	wantAvailable(t, b, at(time.Second), 2)           // accrued at 2/s
	wantAvailable(t, b, at(1500*time.Millisecond), 7) // then 10/s
	b.SetRate(at(1500*time.Millisecond), 0)
	wantAvailable(t, b, at(time.Hour), 7) // frozen
	wantDelay(t, b, at(time.Hour), 8, 0, false)
	for _, bad := range []float64{math.NaN(), math.Inf(1), math.Inf(-1), -3} {
		b.SetRate(at(time.Hour), bad)
		wantAvailable(t, b, at(2*time.Hour), 7) // treated as rate 0
	}
	b.SetRate(at(2*time.Hour), 1)
	wantAvailable(t, b, at(2*time.Hour+3*time.Second), 10)
}

// TestTokenBucketRetune: a new capacity caps the tokens held at once, a
// larger one lets them grow, and the new rate refills from then on.
func TestTokenBucketRetune(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 100, 10)
	wantAvailable(t, b, at(20*time.Second), 100)
	b.Retune(at(20*time.Second), 5, 1)
	wantAvailable(t, b, at(20*time.Second), 5) // capped at once
	b.TryConsume(at(20*time.Second), 5)
	wantAvailable(t, b, at(23*time.Second), 3) // at the new rate
	b.Retune(at(23*time.Second), 50, 10)
	wantAvailable(t, b, at(24*time.Second), 13) // kept, and room to grow
	b.Retune(at(24*time.Second), math.NaN(), 1)
	wantAvailable(t, b, at(time.Hour), 0)
}

// TestTokenBucketInvalidInputs: NaN, infinite and negative inputs become 0
// without panicking.
func TestTokenBucketInvalidInputs(t *testing.T) {
	bad := []float64{math.NaN(), math.Inf(1), math.Inf(-1), -1, -math.MaxFloat64}
	for _, x := range bad {
		// Bad capacity: nothing is ever admitted.
		b := bucket.NewTokenBucket(t0, x, 5)
		wantAvailable(t, b, t0, 0)
		wantAvailable(t, b, at(time.Hour), 0)
		if b.TryConsume(at(time.Hour), 1) {
			t.Fatalf("capacity %v: TryConsume(1) succeeded", x)
		}
		wantDelay(t, b, at(time.Hour), 1, 0, false)

		// Bad rate: full at capacity, never refills.
		b = bucket.NewTokenBucket(t0, 4, x)
		wantAvailable(t, b, t0, 4)
		if !b.TryConsume(t0, 3) {
			t.Fatalf("rate %v: TryConsume(3) on a full bucket of 4 failed", x)
		}
		wantAvailable(t, b, at(time.Hour), 1)
		wantDelay(t, b, at(time.Hour), 2, 0, false)

		// Reset with bad values.
		b.Reset(t0, x, x, x)
		wantAvailable(t, b, at(time.Hour), 0)
		if b.TryConsume(at(time.Hour), 1) {
			t.Fatalf("Reset(%v, %v, %v): TryConsume(1) succeeded", x, x, x)
		}
		b.Reset(t0, 6, 1, x)
		wantAvailable(t, b, t0, 0)
		wantAvailable(t, b, at(2*time.Second), 2)
	}
}

// TestTokenBucketReset sets capacity, rate and tokens; tokens are capped.
func TestTokenBucketReset(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	b.TryConsume(t0, 7)
	b.Reset(at(time.Second), 20, 4, 5)
	wantAvailable(t, b, at(time.Second), 5)
	wantAvailable(t, b, at(2*time.Second), 9)
	wantAvailable(t, b, at(time.Minute), 20)
	b.Reset(at(time.Minute), 3, 1, 100) // tokens above capacity are capped
	wantAvailable(t, b, at(time.Minute), 3)
	// Reset may move time backwards: it sets the reference time.
	b.Reset(t0, 10, 1, 0)
	wantAvailable(t, b, at(4*time.Second), 4)
}

// TestTokenBucketZeroValue: the zero value admits nothing.
func TestTokenBucketZeroValue(t *testing.T) {
	var b bucket.TokenBucket
	for _, now := range []time.Time{t0, at(time.Hour), {}} {
		if b.TryConsume(now, 1) {
			t.Fatal("zero TokenBucket admitted 1")
		}
		if got := b.Available(now); got != 0 {
			t.Fatalf("zero TokenBucket Available = %v, want 0", got)
		}
	}
	b.SetRate(at(time.Hour), 100)
	if got := b.Available(at(10 * time.Hour)); got != 0 {
		t.Fatalf("zero-capacity bucket with rate 100 Available = %v, want 0", got)
	}
	// It becomes usable after Reset.
	b.Reset(t0, 5, 1, 5)
	if !b.TryConsume(t0, 5) {
		t.Fatal("TryConsume(5) after Reset(5, 1, 5) failed")
	}
}

// TestTokenBucketConsumeNonPositive: n <= 0 takes nothing and reports false.
func TestTokenBucketConsumeNonPositive(t *testing.T) {
	b := bucket.NewTokenBucket(t0, 10, 2)
	for _, n := range []int64{0, -1, math.MinInt64} {
		if b.TryConsume(t0, n) {
			t.Fatalf("TryConsume(%d) = true, want false", n)
		}
	}
	wantAvailable(t, b, t0, 10)
	if b.TryConsume(t0, math.MaxInt64) {
		t.Fatal("TryConsume(MaxInt64) succeeded")
	}
	wantAvailable(t, b, t0, 10)
}

// TestTokenBucketConcurrent: goroutines racing at one instant admit exactly
// the capacity.
func TestTokenBucketConcurrent(t *testing.T) {
	const capacity, goroutines, tries = 50, 8, 20
	b := bucket.NewTokenBucket(t0, capacity, 1000)
	var wins atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range goroutines {
		wg.Go(func() {
			<-start
			for range tries {
				if b.TryConsume(t0, 1) {
					wins.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != capacity {
		t.Fatalf("admitted %d at one instant, want %d", got, capacity)
	}
}

// TestTokenBucketBoundProperty: over any sequence of forward time steps and
// consumes, the tokens consumed within any window [ti, tj] never exceed
// capacity + rate*(tj-ti), and over the whole run they reach that bound
// when the consumer is greedy enough (sanity that the bucket admits).
func TestTokenBucketBoundProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := float64(rapid.IntRange(0, 100).Draw(t, "capacity"))
		rate := rapid.Float64Range(0, 1000).Draw(t, "rate")
		b := bucket.NewTokenBucket(t0, capacity, rate)

		steps := rapid.IntRange(1, 100).Draw(t, "steps")
		times := []time.Duration{0} // elapsed at each step
		consumed := []int64{0}      // cumulative consumed after each step
		now := time.Duration(0)
		var total int64
		for i := range steps {
			now += time.Duration(rapid.Int64Range(0, int64(2*time.Second)).Draw(t, "dt"))
			n := rapid.Int64Range(-1, 30).Draw(t, "n")
			avail := b.Available(at(now))
			if avail < 0 || avail > capacity || math.IsNaN(avail) {
				t.Fatalf("step %d: Available = %v outside [0, %v]", i, avail, capacity)
			}
			ok := b.TryConsume(at(now), n)
			if want := n > 0 && float64(n) <= avail; ok != want {
				t.Fatalf("step %d: TryConsume(%d) = %v with %v available", i, n, ok, avail)
			}
			if ok {
				total += n
			}
			times = append(times, now)
			consumed = append(consumed, total)
		}
		for i := range times {
			for j := i; j < len(times); j++ {
				// Consumes recorded at indexes i..j all happened within
				// [times[i], times[j]].
				var got int64
				if i == 0 {
					got = consumed[j]
				} else {
					got = consumed[j] - consumed[i-1]
				}
				bound := capacity + rate*(times[j]-times[i]).Seconds() + 1e-9
				if float64(got) > bound {
					t.Fatalf("consumed %d in [%v, %v] > capacity %v + rate %v * window = %v",
						got, times[i], times[j], capacity, rate, bound)
				}
			}
		}
	})
}

// TestTokenBucketDelayProperty: after Delay reports (d, true), n tokens are
// there at now+d, and not noticeably earlier.
func TestTokenBucketDelayProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		capacity := float64(rapid.OneOf(
			rapid.Int64Range(1, 1000), rapid.Int64Range(1, 1e9)).Draw(t, "capacity"))
		rate := rapid.OneOf(
			rapid.Float64Range(1e-3, 1e6),
			rapid.Float64Range(1e-9, 1e-3),
			rapid.Float64Range(1e6, 1e12)).Draw(t, "rate")
		consume := rapid.Int64Range(0, int64(capacity)).Draw(t, "consume")
		now := at(time.Duration(rapid.Int64Range(0, int64(time.Second)).Draw(t, "dt")))
		n := rapid.Int64Range(1, int64(capacity)).Draw(t, "n")
		// Each check uses a fresh, identical bucket so that advancing
		// time in one check cannot change the rounding of another.
		mk := func() *bucket.TokenBucket {
			b := bucket.NewTokenBucket(t0, capacity, rate)
			b.TryConsume(t0, consume)
			b.Available(now)
			return b
		}
		before := mk().Available(now)
		d, ok := mk().Delay(now, n)
		if !ok {
			t.Fatalf("Delay(%d) with capacity %v rate %v: ok=false", n, capacity, rate)
		}
		if d < 0 {
			t.Fatalf("Delay(%d) = %v < 0", n, d)
		}
		if d == math.MaxInt64 { // saturated: the true delay is out of range
			if secs := (float64(n) - before) / rate; secs < float64(math.MaxInt64)/1e9*(1-1e-9) {
				t.Fatalf("Delay(%d) saturated, but the delay is %vs", n, secs)
			}
			return
		}
		if (d == 0) != (before >= float64(n)) {
			t.Fatalf("Delay(%d) = %v with %v available", n, d, before)
		}
		// Not much too long either: ceil of a rounded quotient may land
		// 1ns late, so allow 2ns (or a millionth of d for long delays).
		if slack := max(2*time.Nanosecond, d/1_000_000); d > slack {
			if got := mk().Available(now.Add(d - slack)); got >= float64(n) {
				t.Fatalf("Delay(%d) = %v, but %v available %v earlier", n, d, got, slack)
			}
		}
		if !mk().TryConsume(now.Add(d), n) {
			t.Fatalf("Delay(%d) = %v, but TryConsume at now+d failed (%v available)",
				n, d, mk().Available(now.Add(d)))
		}
	})
}
