package bucket

import "time"

// NewTokenBucket returns a full bucket with the given capacity and rate,
// as of time now: what the tests start from.
func NewTokenBucket(now time.Time, capacity, rate float64) *TokenBucket {
	b := &TokenBucket{}
	b.Reset(now, capacity, rate, capacity)
	return b
}

// Available returns the tokens the bucket holds at time now, for the tests
// to look inside.
func (b *TokenBucket) Available(now time.Time) float64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.advance(now)
	return b.tokens
}
