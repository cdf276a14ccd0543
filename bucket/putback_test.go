package bucket_test

import (
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/bucket"
)

// TestKnownBugPutBackAfterEmptied: KNOWN BUG (not fixed; a stress test,
// skipped unless LEASEQUOTA_KNOWN_BUGS=1). Once Take or Drain has emptied a split counter
// (expired or drained tokens, returned to Redis or forfeited), no token
// may appear in it again without an Add. A spend of n > 1 that gathers
// tokens from several slots, loses the race with the Take or Drain and
// puts what it gathered back makes them spendable again: an expired
// batch's tokens until the next plan forfeits them (about a tick beyond
// the window bound's L), a drained tenant's left in it uncounted. It
// failed 4 runs of 4 within 2 s. The fix is a change of the counter's
// protocol (a take-back that waits for gathers under way, or an epoch a
// gatherer checks before it puts back), not made yet.
func TestKnownBugPutBackAfterEmptied(t *testing.T) {
	if os.Getenv("LEASEQUOTA_KNOWN_BUGS") == "" {
		t.Skip("KNOWN BUG reported to the lead; set LEASEQUOTA_KNOWN_BUGS=1 to run")
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
	deadline := time.Now().Add(5 * time.Second)
	var iters, back int
	for i := int64(1); time.Now().Before(deadline) && back == 0; i++ {
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
			t.Logf("iteration %d (%s): %d taken, %d spent, then %d tokens back in the emptied counter", i, map[bool]string{true: "Take", false: "Drain"}[i%2 == 0], taken, spent.Load(), got)
		}
		c.Drain()
	}
	if back > 0 {
		t.Errorf("a failed spend put tokens back into a counter that Take or Drain had emptied (after %d iterations)", iters)
	} else {
		t.Logf("%d iterations", iters)
	}
}
