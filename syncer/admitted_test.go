package syncer

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// TestAdmittedExact checks the count of admissions that Admitted derives
// from the tokens: each way tokens go in and out of the counter, one at a
// time.
func TestAdmittedExact(t *testing.T) {
	var tn Tenant
	want := int64(0)
	check := func(step string) {
		t.Helper()
		if got := tn.Admitted(); got != want {
			t.Fatalf("%s: Admitted() = %d, want %d", step, got, want)
		}
	}
	tn.credit(100)
	check("credit")
	for range 3 {
		if ok, _ := tn.Spend(1); !ok {
			t.Fatal("Spend(1) refused")
		}
		want++
	}
	check("Spend(1)")
	if ok, _ := tn.Spend(5); !ok {
		t.Fatal("Spend(5) refused")
	}
	want++
	check("Spend(5)")
	if ok, _ := tn.SpendWaited(7); !ok {
		t.Fatal("SpendWaited(7) refused")
	}
	check("SpendWaited")
	tn.UnspendWaited(7)
	check("UnspendWaited")
	if !tn.uncount() {
		t.Fatal("uncount refused")
	}
	want--
	check("uncount")
	if taken, _ := tn.debit(10); taken != 10 {
		t.Fatalf("debit(10) took %d", taken)
	}
	check("debit")
	tn.drain()
	check("drain")
	if ok, _ := tn.Spend(1); ok {
		t.Fatal("Spend(1) from an empty counter")
	}
	if ok, _ := tn.Spend(3); ok {
		t.Fatal("Spend(3) from an empty counter")
	}
	if ok, _ := tn.SpendWaited(3); ok {
		t.Fatal("SpendWaited(3) from an empty counter")
	}
	check("refused spends")
	tn.credit(2)
	if ok, _ := tn.Spend(3); ok {
		t.Fatal("Spend(3) of 2 tokens")
	}
	if ok, _ := tn.Spend(2); !ok {
		t.Fatal("Spend(2) of 2 tokens refused")
	}
	want++
	check("Spend(2)")
}

// TestAdmittedConcurrent runs requests (Spend of 1 to 3 tokens,
// SpendWaited and UnspendWaited) against a syncer crediting and debiting
// the counter, and a reader: Admitted never goes down (no uncount here)
// nor above the admissions made, and ends equal to them.
func TestAdmittedConcurrent(t *testing.T) { admittedConcurrent(t, false) }

// TestAdmittedConcurrentSplit is TestAdmittedConcurrent with the syncer
// also splitting the counter into slots, topping them up and joining it
// again (Tenant.restripe, WithPerCPUTokens).
func TestAdmittedConcurrentSplit(t *testing.T) { admittedConcurrent(t, true) }

func admittedConcurrent(t *testing.T, split bool) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))
	var tn Tenant
	var admitted atomic.Int64 // admissions counted by Spend, as made
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := 0; i < 20000; i++ {
				n := 1 + rng.Int64N(3)
				switch rng.IntN(4) {
				case 0:
					if ok, _ := tn.SpendWaited(n); ok {
						tn.UnspendWaited(n)
					}
				default:
					if ok, _ := tn.Spend(n); ok {
						admitted.Add(1)
					}
				}
			}
		}()
	}
	syncer := make(chan struct{})
	go func() { // the syncer
		defer close(syncer)
		rng := rand.New(rand.NewPCG(9, 9))
		for !stop.Load() {
			if split && rng.IntN(4) == 0 {
				// Hot (split into 4, or topped up) or cold (joined), as
				// a plan finds the demand (Syncer.spread).
				tn.restripe(4 * rng.IntN(2))
			}
			switch rng.IntN(3) {
			case 0:
				tn.credit(rng.Int64N(50))
			case 1:
				tn.debit(rng.Int64N(20))
			default:
				if rng.IntN(50) == 0 {
					tn.drain()
				}
				tn.credit(rng.Int64N(100))
			}
		}
	}()
	done := make(chan struct{})
	go func() { // a reader, as Stats
		defer close(done)
		last := int64(0)
		for !stop.Load() {
			before := admitted.Load()
			got := tn.Admitted()
			after := admitted.Load()
			if got < last || got < before-4 || got > after+4 {
				// Admitted counts a Spend at its compare-and-swap, the
				// test a moment later: up to one in flight per goroutine.
				t.Errorf("Admitted() = %d after %d, with %d to %d made", got, last, before, after)
				return
			}
			last = got
		}
	}()
	wg.Wait()
	stop.Store(true)
	<-syncer
	<-done
	if got, want := tn.Admitted(), admitted.Load(); got != want {
		t.Fatalf("Admitted() = %d at the end, want %d", got, want)
	}
}
