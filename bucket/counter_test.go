package bucket_test

import (
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"

	"pgregory.net/rapid"

	"github.com/leasequota/leasequota/bucket"
)

// TestCounterZeroValue checks that the zero Counter is empty and usable.
func TestCounterZeroValue(t *testing.T) {
	var c bucket.Counter
	if got := c.Load(); got != 0 {
		t.Fatalf("zero Counter Load() = %d, want 0", got)
	}
	if ok, left := c.TrySpend(1); ok || left != 0 {
		t.Fatalf("zero Counter TrySpend(1) = %v, %d; want false, 0", ok, left)
	}
	if taken, left := c.Take(5); taken != 0 || left != 0 {
		t.Fatalf("zero Counter Take(5) = %d, %d; want 0, 0", taken, left)
	}
	if got := c.Drain(); got != 0 {
		t.Fatalf("zero Counter Drain() = %d, want 0", got)
	}
}

// TestCounterEdgeCases covers zero, negative and oversized arguments.
func TestCounterEdgeCases(t *testing.T) {
	var c bucket.Counter
	if got := c.Add(10); got != 10 {
		t.Fatalf("Add(10) = %d, want 10", got)
	}

	// TrySpend(0) succeeds without changing anything.
	if ok, left := c.TrySpend(0); !ok || left != 10 {
		t.Fatalf("TrySpend(0) = %v, %d; want true, 10", ok, left)
	}
	// A negative n is refused and reports the tokens held.
	for _, n := range []int64{-1, -10, math.MinInt64} {
		if ok, left := c.TrySpend(n); ok || left != 10 {
			t.Fatalf("TrySpend(%d) = %v, %d; want false, 10", n, ok, left)
		}
	}
	// More than held is refused, whole: nothing is spent.
	for _, n := range []int64{11, math.MaxInt64} {
		if ok, left := c.TrySpend(n); ok || left != 10 {
			t.Fatalf("TrySpend(%d) = %v, %d; want false, 10", n, ok, left)
		}
	}
	// Negative and zero Add are ignored and return the count.
	for _, n := range []int64{0, -1, -10, math.MinInt64} {
		if got := c.Add(n); got != 10 {
			t.Fatalf("Add(%d) = %d, want 10 (ignored)", n, got)
		}
	}
	// Take(0) and negative Take remove nothing.
	for _, n := range []int64{0, -1, math.MinInt64} {
		if taken, left := c.Take(n); taken != 0 || left != 10 {
			t.Fatalf("Take(%d) = %d, %d; want 0, 10", n, taken, left)
		}
	}
	if got := c.Load(); got != 10 {
		t.Fatalf("Load() after no-op calls = %d, want 10", got)
	}
	// Exact spend to zero.
	if ok, left := c.TrySpend(4); !ok || left != 6 {
		t.Fatalf("TrySpend(4) = %v, %d; want true, 6", ok, left)
	}
	if ok, left := c.TrySpend(6); !ok || left != 0 {
		t.Fatalf("TrySpend(6) = %v, %d; want true, 0", ok, left)
	}
	if ok, left := c.TrySpend(1); ok || left != 0 {
		t.Fatalf("TrySpend(1) on empty = %v, %d; want false, 0", ok, left)
	}
	// Take less than held, then more than held.
	c.Add(7)
	if taken, left := c.Take(3); taken != 3 || left != 4 {
		t.Fatalf("Take(3) = %d, %d; want 3, 4", taken, left)
	}
	if taken, left := c.Take(100); taken != 4 || left != 0 {
		t.Fatalf("Take(100) with 4 held = %d, %d; want 4, 0", taken, left)
	}
	c.Add(9)
	if taken, left := c.Take(math.MaxInt64); taken != 9 || left != 0 {
		t.Fatalf("Take(MaxInt64) with 9 held = %d, %d; want 9, 0", taken, left)
	}
	// Drain returns everything and empties.
	c.Add(5)
	c.Add(6)
	if got := c.Drain(); got != 11 {
		t.Fatalf("Drain() = %d, want 11", got)
	}
	if got := c.Drain(); got != 0 {
		t.Fatalf("second Drain() = %d, want 0", got)
	}
	if got := c.Load(); got != 0 {
		t.Fatalf("Load() after Drain = %d, want 0", got)
	}
}

// counterAmount draws an argument: mostly small (so spends both succeed and
// fail), sometimes zero or negative, sometimes large.
func counterAmount(t *rapid.T, label string) int64 {
	return rapid.OneOf(
		rapid.Int64Range(-3, 20),
		rapid.Int64Range(0, 1000),
		rapid.Int64Range(math.MinInt64, 0),
		rapid.Int64Range(0, 1<<40),
	).Draw(t, label)
}

// TestCounterStateMachine runs random sequences of Add, TrySpend,
// TrySpendSlots, Take and Drain against a plain int64 model.
func TestCounterStateMachine(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c bucket.Counter
		var model int64
		// spend is the action of a spend of c (TrySpend, TrySpendSlots),
		// named name: the same as the model's.
		spend := func(name string, f func(int64) (bool, int64)) func(*rapid.T) {
			return func(t *rapid.T) {
				n := counterAmount(t, "n")
				ok, left := f(n)
				wantOK := n >= 0 && model >= n
				if ok != wantOK {
					t.Fatalf("%s(%d) ok = %v with model %d, want %v", name, n, ok, model, wantOK)
				}
				if wantOK {
					model -= n
				}
				if left != model {
					t.Fatalf("%s(%d) left = %d, model %d", name, n, left, model)
				}
			}
		}
		t.Repeat(map[string]func(*rapid.T){
			"Add": func(t *rapid.T) {
				n := counterAmount(t, "n")
				got := c.Add(n)
				if n > 0 {
					model += n
				}
				if got != model {
					t.Fatalf("Add(%d) = %d, model %d", n, got, model)
				}
			},
			"TrySpend":      spend("TrySpend", c.TrySpend),
			"TrySpendSlots": spend("TrySpendSlots", c.TrySpendSlots),
			"Take": func(t *rapid.T) {
				n := counterAmount(t, "max")
				taken, left := c.Take(n)
				want := int64(0)
				if n > 0 {
					want = min(n, model)
				}
				model -= want
				if taken != want || left != model {
					t.Fatalf("Take(%d) = %d, %d; want %d, %d", n, taken, left, want, model)
				}
			},
			"Drain": func(t *rapid.T) {
				got := c.Drain()
				if got != model {
					t.Fatalf("Drain() = %d, model %d", got, model)
				}
				model = 0
			},
			"": func(t *rapid.T) {
				got := c.Load()
				if got < 0 {
					t.Fatalf("Load() = %d < 0", got)
				}
				if got != model {
					t.Fatalf("Load() = %d, model %d", got, model)
				}
			},
		})
	})
}

// concurrentPlan is drawn up front on the test goroutine: *rapid.T must not
// be used from other goroutines.
type concurrentPlan struct {
	spends  [][]int64 // per spender goroutine, the n of each TrySpend
	adds    []int64   // batches added by the adder goroutine
	removes []int64   // taker goroutine: >0 Take(n), 0 Drain()
}

// TestCounterConcurrentAccounting spends with TrySpend from several
// goroutines while one goroutine adds batches and another takes and drains.
// No token may be created or lost: added == spent + taken + drained + left,
// and at every moment the tokens that left the counter never exceed the
// tokens put in.
func TestCounterConcurrentAccounting(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var p concurrentPlan
		spenders := rapid.IntRange(1, 6).Draw(t, "spenders")
		for i := range spenders {
			p.spends = append(p.spends,
				rapid.SliceOfN(rapid.Int64Range(1, 8), 1, 200).Draw(t, "spends"+string(rune('0'+i))))
		}
		p.adds = rapid.SliceOfN(rapid.Int64Range(1, 50), 20, 200).Draw(t, "adds")
		p.removes = rapid.SliceOfN(rapid.Int64Range(0, 30), 0, 40).Draw(t, "removes")
		initial := rapid.Int64Range(0, 100).Draw(t, "initial")

		var (
			c       bucket.Counter
			added   atomic.Int64 // bumped before each Add
			out     atomic.Int64 // bumped after each successful removal
			spent   atomic.Int64
			taken   atomic.Int64
			drained atomic.Int64
			bad     atomic.Value // first violation seen off the test goroutine
		)
		fail := func(msg string) { bad.CompareAndSwap(nil, msg) }
		removed := func(n int64) {
			if o, a := out.Add(n), added.Load(); o > a {
				fail("tokens out of the counter exceeded tokens added")
			}
		}
		added.Add(initial)
		c.Add(initial)

		start := make(chan struct{})
		var wg sync.WaitGroup
		var producing sync.WaitGroup // the adder and the taker
		producing.Add(2)
		var done atomic.Bool
		go func() { producing.Wait(); done.Store(true) }()
		// The adder and the taker wait, after each step, for the spenders
		// to make a few attempts, so that all of them really interleave.
		var attempts atomic.Int64
		letSpendersRun := func() {
			target := attempts.Load() + int64(4*len(p.spends))
			for attempts.Load() < target {
				runtime.Gosched()
			}
		}
		for _, plan := range p.spends {
			wg.Go(func() {
				<-start
				// Cycle through the plan for as long as the adder and
				// the taker run, so that every goroutine contends, then
				// finish one last pass.
				last := -1
				for i := 0; last < 0 || i < last; i++ {
					if last < 0 && i >= len(plan) && done.Load() {
						last = i + len(plan)
					}
					n := plan[i%len(plan)]
					ok, left := c.TrySpend(n)
					attempts.Add(1)
					if left < 0 {
						fail("TrySpend returned negative left")
					}
					if ok {
						spent.Add(n)
						removed(n)
					}
					if i%4 == 3 {
						runtime.Gosched() // let the adder and taker run
					}
				}
			})
		}
		wg.Go(func() {
			defer producing.Done()
			<-start
			for _, n := range p.adds {
				added.Add(n)
				if got := c.Add(n); got < n {
					fail("Add returned less than the batch added")
				}
				letSpendersRun()
			}
		})
		wg.Go(func() {
			defer producing.Done()
			<-start
			for _, n := range p.removes {
				if n == 0 {
					d := c.Drain()
					if d < 0 {
						fail("Drain returned negative")
					}
					drained.Add(d)
					removed(d)
				} else {
					tk, left := c.Take(n)
					if tk < 0 || tk > n || left < 0 {
						fail("Take returned out-of-range values")
					}
					taken.Add(tk)
					removed(tk)
				}
				letSpendersRun()
			}
		})
		close(start)
		wg.Wait()

		if v := bad.Load(); v != nil {
			t.Fatal(v)
		}
		final := c.Load()
		if final < 0 {
			t.Fatalf("final Load() = %d < 0", final)
		}
		a, s, tk, d := added.Load(), spent.Load(), taken.Load(), drained.Load()
		if a != s+tk+d+final {
			t.Fatalf("accounting: added %d != spent %d + taken %d + drained %d + left %d",
				a, s, tk, d, final)
		}
		if s > a {
			t.Fatalf("spent %d > added %d", s, a)
		}
	})
}

// TestCounterLastTokenRace: goroutines race to spend k tokens one at a
// time until none are left; exactly k spends succeed.
func TestCounterLastTokenRace(t *testing.T) {
	const k, goroutines = 20000, 8
	var c bucket.Counter
	c.Add(k)
	var wins atomic.Int64
	start := make(chan struct{})
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			<-start
			for {
				ok, left := c.TrySpend(1)
				if ok {
					wins.Add(1)
				} else if left == 0 {
					return
				}
			}
		})
	}
	close(start)
	wg.Wait()
	if got := wins.Load(); got != k {
		t.Fatalf("successful spends = %d, want %d", got, k)
	}
	if got := c.Load(); got != 0 {
		t.Fatalf("Load() = %d, want 0", got)
	}
}
