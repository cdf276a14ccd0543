package bucket_test

import (
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/bucket"
)

// TestSplitCounterProperty runs random operations on one goroutine against
// a model of the total: a split counter holds what was added less what
// was spent, taken and drained, whatever the split, and a spend succeeds
// exactly when the counter holds n tokens, wherever they are.
func TestSplitCounterProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c bucket.Counter
		var model int64
		for i, steps := 0, rapid.IntRange(1, 60).Draw(t, "steps"); i < steps; i++ {
			switch rapid.IntRange(0, 5).Draw(t, "op") {
			case 0:
				n := rapid.Int64Range(0, 50).Draw(t, "add")
				c.Add(n)
				model += n
			case 1:
				n := rapid.Int64Range(1, 20).Draw(t, "spend")
				ok, _ := c.TrySpend(n)
				if ok != (model >= n) {
					t.Fatalf("TrySpend(%d) = %v with %d held (%d slots)", n, ok, model, c.Slots())
				}
				if ok {
					model -= n
				}
			case 2:
				n := rapid.Int64Range(0, 30).Draw(t, "take")
				taken, left := c.Take(n)
				if taken != min(n, model) || left != model-taken {
					t.Fatalf("Take(%d) = %d, %d with %d held", n, taken, left, model)
				}
				model -= taken
			case 3:
				if got := c.Drain(); got != model {
					t.Fatalf("Drain() = %d, want %d", got, model)
				}
				model = 0
			case 4:
				c.Stripe(rapid.IntRange(0, 9).Draw(t, "procs"))
			case 5:
				c.Spread()
			}
			if got := c.Load(); got != model {
				t.Fatalf("Load() = %d, want %d (%d slots)", got, model, c.Slots())
			}
		}
	})
}

// TestSplitCounterConcurrent spends from several goroutines while another,
// as the syncer does, adds, spreads, takes back and splits and joins the
// counter: no token is spent twice or lost.
func TestSplitCounterConcurrent(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	var c bucket.Counter
	c.Stripe(runtime.GOMAXPROCS(0))
	var spent atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			n := int64(1 + 2*(g%2)) // 1 or 3 tokens a spend
			for !stop.Load() {
				if ok, _ := c.TrySpend(n); ok {
					spent.Add(n)
				}
			}
		})
	}
	var added, taken int64
	// At least 20,000 rounds, and until the spenders have spent 50,000
	// tokens (they may start late on a busy machine), or 10 s.
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; i < 20_000 || spent.Load() < 50_000 && time.Now().Before(deadline); i++ {
		c.Add(7)
		added += 7
		switch i % 100 {
		case 10:
			c.Spread()
		case 50:
			n, _ := c.Take(5)
			taken += n
		case 70:
			c.Stripe(1 + i%3)
		}
	}
	stop.Store(true)
	wg.Wait()
	taken += c.Drain()
	if got := spent.Load() + taken; got != added {
		t.Fatalf("spent %d + taken back %d = %d, want the %d added", spent.Load(), taken, got, added)
	}
	if spent.Load() < 50_000 {
		t.Fatalf("%d spent in 10 s, want 50,000", spent.Load())
	}
}

// TestSplitCounterSpreads checks that Spread leaves the shared count with
// fewer tokens than slots and the slots even, and that a spend of one
// token never fails while a token is held.
func TestSplitCounterSpreads(t *testing.T) {
	var c bucket.Counter
	c.Stripe(3) // rounded up to 4 slots
	c.Add(103)
	c.Spread()
	// TrySpendShared sees the shared count alone: the remainder, 3.
	if ok, left := c.TrySpendShared(4); ok || left != 3 {
		t.Fatalf("shared count after Spread: TrySpendShared(4) = %v, %d; want false, 3", ok, left)
	}
	for i := int64(103); i > 0; i-- {
		if ok, _ := c.TrySpend(1); !ok {
			t.Fatalf("TrySpend(1) failed with %d held", i)
		}
	}
	if ok, _ := c.TrySpend(1); ok || c.Load() != 0 {
		t.Fatalf("spent a 104th token, or %d left", c.Load())
	}
	c.Stripe(1)
	if c.Slots() != 0 {
		t.Fatal("Stripe(1) left the counter split")
	}
}
