package bucket_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/bucket"
)

// putBackRace runs TestPutBackAfterEmptied's race (a spend of nearly all
// of a split counter's tokens from P 0 against a Take or Drain) until a
// put-back is seen after the take-back, or 1 s passes. mid runs between
// the spender's start and the take-back, after runs once the spender is
// done; check is called with each iteration's counter, the tokens it
// holds after the race (none spendable: the take-back emptied it) and
// returns false to stop.
func putBackRace(t *testing.T, slots int, mid, after func(c *bucket.Counter), check func(c *bucket.Counter, i, got int64) bool) (iters, seen int) {
	t.Helper()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	const per = 4
	total := int64(slots * per)
	var cp atomic.Pointer[bucket.Counter]
	var gen, done atomic.Int64
	var spent atomic.Int64
	go func() {
		for g := int64(1); ; g++ {
			for gen.Load() < g {
				if gen.Load() < 0 {
					return
				}
			}
			if ok, _ := cp.Load().TrySpendFrom(0, total-1); ok {
				spent.Store(total - 1)
			}
			done.Store(g)
		}
	}()
	defer gen.Store(-1)
	deadline := time.Now().Add(time.Second)
	for i := int64(1); time.Now().Before(deadline); i++ {
		iters++
		c := new(bucket.Counter)
		c.Stripe(slots)
		c.Add(total)
		c.Spread()
		cp.Store(c)
		spent.Store(0)
		gen.Store(i)
		for j := 0; j < int(i%64)*8; j++ {
			_ = c.Slots()
		}
		if mid != nil {
			mid(c)
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
			seen++
			if after != nil {
				after(c)
			}
			if !check(c, i, got) {
				return iters, seen
			}
		}
	}
	return iters, seen
}

// TestPutBackUnspendableAfterJoin: tokens a failed spend put back after
// a take-back stay unspendable until Restore or Add, whatever the syncer
// does with the counter meanwhile. Syncer.apply (acquire.go) calls
// Syncer.spread after a lease call, which joins a counter whose demand
// fell or whose spends came from one P (Tenant.restripe(1) ->
// Counter.Stripe(1)): between a plan's expiry take-back and the next
// plan, Stripe's gather moved the put-back into the shared count. Now
// Stripe joins no counter whose put-backs wait, and carries them into the
// new slots when it splits the counter anew.
func TestPutBackUnspendableAfterJoin(t *testing.T) {
	iters, seen := putBackRace(t, 64, nil, func(c *bucket.Counter) { c.Stripe(1) }, func(c *bucket.Counter, i, got int64) bool {
		if ok, _ := c.TrySpend(1); ok {
			t.Fatalf("iteration %d: %d tokens put back after the take-back, spendable once Stripe(1) joined the counter, without Restore", i, got)
		}
		return true
	})
	t.Logf("%d iterations, %d put-backs", iters, seen)
}

// TestPutBackUnspendableAfterRestripe is TestPutBackUnspendableAfterJoin
// for a counter split into another number of slots (GOMAXPROCS changed).
func TestPutBackUnspendableAfterRestripe(t *testing.T) {
	iters, seen := putBackRace(t, 64, nil, func(c *bucket.Counter) { c.Stripe(8) }, func(c *bucket.Counter, i, got int64) bool {
		if ok, _ := c.TrySpend(1); ok {
			t.Fatalf("iteration %d: %d tokens put back after the take-back, spendable once Stripe(8) replaced the slots, without Restore", i, got)
		}
		return true
	})
	t.Logf("%d iterations, %d put-backs", iters, seen)
}
