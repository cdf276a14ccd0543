package bucket

import (
	"math"
	"sync"
	"time"
)

// TokenBucket is a classic token bucket: it holds up to Capacity tokens and
// gains Rate tokens per second of the time passed in. Unlike Counter it
// needs no lease: the local fallback mode admits from it when Redis cannot
// be reached.
//
// All methods take the current time as a parameter and are safe for
// concurrent use (a mutex guards the state; this is not the hot path). Times
// passed in that go backwards are treated as no time passing. The zero
// value is an empty bucket with no capacity that admits nothing.
type TokenBucket struct {
	mu       sync.Mutex // guards every field below
	capacity float64
	rate     float64   // tokens per second
	tokens   float64   // tokens at last
	last     time.Time // when tokens was computed; zero before first use
}

// sane maps NaN, infinities and negative numbers to zero.
func sane(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) || x < 0 {
		return 0
	}
	return x
}

// Reset sets capacity, rate (tokens per second) and the tokens held, as of
// time now. A NaN, infinite or negative value is taken as zero, and tokens
// are capped at capacity.
func (b *TokenBucket) Reset(now time.Time, capacity, rate, tokens float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.capacity = sane(capacity)
	b.rate = sane(rate)
	b.tokens = min(sane(tokens), b.capacity)
	b.last = now
}

// SetRate changes the refill rate from time now on, keeping the tokens
// already accrued.
func (b *TokenBucket) SetRate(now time.Time, rate float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	b.rate = sane(rate)
}

// Retune changes the capacity and the refill rate from time now on,
// keeping the tokens accrued until now, but no more than the new
// capacity: a bucket whose capacity falls holds at most the new one at
// once. A NaN, infinite or negative value is taken as zero.
func (b *TokenBucket) Retune(now time.Time, capacity, rate float64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	b.capacity = sane(capacity)
	b.rate = sane(rate)
	b.tokens = min(b.tokens, b.capacity)
}

// advance refills the bucket up to now. b.mu must be held.
func (b *TokenBucket) advance(now time.Time) {
	if b.last.IsZero() {
		b.last = now
		return
	}
	if elapsed := now.Sub(b.last); elapsed > 0 {
		b.tokens = min(b.capacity, b.tokens+elapsed.Seconds()*b.rate)
		b.last = now
	}
}

// TryConsume takes n tokens if the bucket holds them at time now, and
// reports whether it did. n <= 0 takes nothing and reports false.
func (b *TokenBucket) TryConsume(now time.Time, n int64) bool {
	if n <= 0 {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	if b.tokens < float64(n) {
		return false
	}
	b.tokens -= float64(n)
	return true
}

// Delay returns how long after now the bucket will hold n tokens: zero if
// it holds them already, and ok=false if it never will (n above capacity,
// or a zero rate while short).
func (b *TokenBucket) Delay(now time.Time, n int64) (d time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	need := float64(n) - b.tokens
	switch {
	case need <= 0:
		return 0, true
	case float64(n) > b.capacity || b.rate == 0:
		return 0, false
	}
	ns := math.Ceil(need / b.rate * float64(time.Second))
	if ns < math.MaxInt64 && b.tokens+time.Duration(ns).Seconds()*b.rate < float64(n) {
		// Rounding left the refill at now+ns, as advance computes it, a
		// hair short of n: aim a few ulps of n higher.
		ns = math.Ceil((need + float64(n)*1e-15) / b.rate * float64(time.Second))
	}
	if ns >= math.MaxInt64 { // converting it would overflow
		return math.MaxInt64, true
	}
	return time.Duration(ns), true
}
