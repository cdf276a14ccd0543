package bucket

import (
	"time"
	"unsafe"
)

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

// TrySpendFrom is TrySpend on P p: a split counter's spend as it runs on
// that P, for tests to say which.
func (c *Counter) TrySpendFrom(p int, n int64) (ok bool, left int64) {
	if ok, left = c.TrySpendShared(n); !ok && n > 0 {
		if s := c.slots.Load(); s != nil {
			return c.trySpendSplit(s, p, n)
		}
	}
	return ok, left
}

// SlotSize is the size of a slot: a pair of cache lines.
const SlotSize = unsafe.Sizeof(slot{})

// SlotAddrs returns the addresses of a split counter's slots (none when
// it is not split), for a test to check where they lie.
func (c *Counter) SlotAddrs() []uintptr {
	sp := c.slots.Load()
	if sp == nil {
		return nil
	}
	addrs := make([]uintptr, len(*sp))
	for i := range *sp {
		addrs[i] = uintptr(unsafe.Pointer(&(*sp)[i]))
	}
	return addrs
}
