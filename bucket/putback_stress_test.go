package bucket_test

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/bucket"
)

// TestCounterConservationStress runs spends of 1 to 40 tokens on four
// goroutines (gathers that fail and put back among them) against a
// syncer that adds, takes, drains, restores, spreads and splits the
// counter into 2 to 64 slots or joins it, at random: at the end, every
// token added was spent, taken or is held, and what is held is spendable
// once restored.
func TestCounterConservationStress(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	var c bucket.Counter
	var spent atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for !stop.Load() {
				n := int64(1)
				if rng.IntN(2) == 0 {
					n = 2 + rng.Int64N(39)
				}
				if ok, _ := c.TrySpend(n); ok {
					spent.Add(n)
				}
			}
		}()
	}
	var added, taken int64
	rng := rand.New(rand.NewPCG(1, 2))
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		switch rng.IntN(8) {
		case 0, 1:
			n := rng.Int64N(200)
			c.Add(n)
			added += max(n, 0)
		case 2:
			tk, _ := c.Take(rng.Int64N(100))
			taken += tk
		case 3:
			if rng.IntN(10) == 0 {
				taken += c.Drain()
			}
		case 4:
			c.Restore()
		case 5:
			c.Stripe([]int{0, 1, 2, 4, 8, 64}[rng.IntN(6)])
		default:
			c.Spread()
		}
	}
	stop.Store(true)
	wg.Wait()
	held := c.Load()
	if added != spent.Load()+taken+held {
		t.Fatalf("%d added != %d spent + %d taken + %d held", added, spent.Load(), taken, held)
	}
	c.Restore()
	c.Stripe(1)
	if held > 0 {
		if ok, _ := c.TrySpend(held); !ok {
			t.Fatalf("the %d tokens held not spendable once restored and joined", held)
		}
	}
	if got := c.Load(); got != 0 {
		t.Fatalf("%d tokens left", got)
	}
}
