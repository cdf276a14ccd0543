package bucket_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/bucket"
)

// TestPutBackAfterEmptied: once Take or Drain has emptied a split counter
// (expired or drained tokens, returned to Redis or forfeited), no token
// is spendable in it again until the syncer restores what failed spends
// put back (Restore) or adds tokens. A spend of n > 1 that gathers tokens
// from several slots and loses the race with the Take or Drain puts what
// it gathered back; put back into the shared count, they were spendable
// again at once: an expired batch's tokens until the next plan forfeited
// them (about a tick beyond the window bound's L), a drained tenant's left
// in it, uncounted (4 runs of 4 within 2 s). They wait now in the
// counter's put-back count, which Take and Drain take from first. The run
// goes on for 2 s, or until 20 put-backs were seen; every put-back seen
// must be unspendable, and spendable once restored.
func TestPutBackAfterEmptied(t *testing.T) {
	if bucket.SlotSize != 128 {
		t.Fatalf("a slot is %d bytes, want a pair of cache lines, 128", bucket.SlotSize)
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	const slots, per = 64, 4
	const total = slots * per
	var c bucket.Counter
	c.Stripe(slots)
	var gen, done atomic.Int64 // rounds started by the test, ended by the spender
	var spent atomic.Int64
	go func() {
		for g := int64(1); ; g++ {
			for gen.Load() < g {
				if gen.Load() < 0 {
					return
				}
			}
			if ok, _ := c.TrySpendFrom(0, total-1); ok {
				spent.Store(total - 1)
			}
			done.Store(g)
		}
	}()
	defer gen.Store(-1)
	deadline := time.Now().Add(2 * time.Second)
	var iters, back int
	for i := int64(1); time.Now().Before(deadline) && back < 20; i++ {
		iters++
		c.Add(total)
		c.Spread()
		spent.Store(0)
		gen.Store(i)
		// Let the spender start: it gathers slot after slot.
		for j := 0; j < int(i%64)*8; j++ {
			_ = c.Slots()
		}
		var taken int64
		if i%2 == 0 {
			taken, _ = c.Take(total)
		} else {
			taken = c.Drain()
		}
		for done.Load() < i {
		}
		got := c.Load()
		if taken+spent.Load()+got != total {
			t.Fatalf("iteration %d: %d taken + %d spent + %d held != %d", i, taken, spent.Load(), got, total)
		}
		if got > 0 {
			back++
			if b := c.Back(); b != got {
				t.Fatalf("iteration %d: %d tokens back in the emptied counter, %d of them spendable", i, got, got-b)
			}
			if ok, _ := c.TrySpend(1); ok {
				t.Fatalf("iteration %d: a token put back after the counter was emptied was spent", i)
			}
			c.Restore()
			if ok, _ := c.TrySpend(got); !ok {
				t.Fatalf("iteration %d: the %d tokens put back not spendable once restored", i, got)
			}
		}
		c.Drain()
	}
	t.Logf("%d iterations, %d put-backs after a take-back", iters, back)
}
