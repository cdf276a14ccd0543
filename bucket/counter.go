package bucket

import "sync/atomic"

// Counter is a lock-free count of leased tokens.
//
// Requests call TrySpend concurrently; the syncer calls Add, Take and Drain
// at the same time. Every method is a single atomic operation or a
// compare-and-swap loop on one int64, so the count can never go negative and
// the sum of tokens spent can never exceed the sum of tokens added minus
// those taken back. The zero value is an empty counter, ready to use. A
// Counter must not be copied after first use.
type Counter struct {
	n atomic.Int64
}

// TrySpend spends n tokens if the counter holds at least n. It returns
// whether it spent them and the tokens left afterwards (or, when it did not,
// the tokens held). n must be positive; TrySpend(0) reports true without
// changing anything and a negative n is refused.
func (c *Counter) TrySpend(n int64) (ok bool, left int64) {
	if n < 0 {
		return false, c.n.Load()
	}
	for {
		cur := c.n.Load()
		if cur < n {
			return false, cur
		}
		if c.n.CompareAndSwap(cur, cur-n) {
			return true, cur - n
		}
	}
}

// Add adds n >= 0 tokens (a new lease) and returns the new count. A
// negative n is ignored: tokens leave the counter only through TrySpend,
// Take and Drain.
func (c *Counter) Add(n int64) int64 {
	if n <= 0 {
		return c.n.Load()
	}
	return c.n.Add(n)
}

// Take removes up to max tokens (expired lease tokens going back to Redis)
// and returns how many it removed and the count left.
func (c *Counter) Take(max int64) (taken, left int64) {
	if max <= 0 {
		return 0, c.n.Load()
	}
	for {
		cur := c.n.Load()
		t := min(cur, max)
		if c.n.CompareAndSwap(cur, cur-t) {
			return t, cur - t
		}
	}
}

// Drain removes every token and returns how many there were.
func (c *Counter) Drain() int64 {
	return c.n.Swap(0)
}

// Load returns the tokens held now.
func (c *Counter) Load() int64 {
	return c.n.Load()
}
