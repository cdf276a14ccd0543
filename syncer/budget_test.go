package syncer

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestBudgetAIMD: the window halves on a late call, once per round trip,
// never below budgetMin; it grows by one command per window of timely
// commands; take never grants beyond it unless forced.
func TestBudgetAIMD(t *testing.T) {
	var b budget
	b.init()
	t0 := time.Unix(0, 0)
	if w, _, _ := b.state(); w != budgetInitial {
		t.Fatalf("initial window %v, want %d", w, budgetInitial)
	}
	if got := b.take(budgetInitial+5, false); got != budgetInitial {
		t.Fatalf("take beyond the window granted %d, want %d", got, budgetInitial)
	}
	if got := b.take(1, false); got != 0 {
		t.Fatalf("take from a full window granted %d", got)
	}
	if got := b.take(3, true); got != 3 {
		t.Fatalf("forced take granted %d, want 3", got)
	}
	// Two late calls sent before the cut: one cut.
	b.done(1000, t0, t0.Add(60*time.Millisecond), true)
	b.done(1000, t0, t0.Add(61*time.Millisecond), true)
	if w, _, cuts := b.state(); w != budgetInitial/2 || cuts != 1 {
		t.Fatalf("after two late calls of one round trip: window %v, %d cuts; want %d, 1", w, cuts, budgetInitial/2)
	}
	// A late call sent after the cut cuts again.
	b.done(1000, t0.Add(70*time.Millisecond), t0.Add(130*time.Millisecond), true)
	if w, _, _ := b.state(); w != budgetInitial/4 {
		t.Fatalf("after a later late call: window %v, want %d", w, budgetInitial/4)
	}
	// A window of timely commands adds one.
	w0, _, _ := b.state()
	for range int(w0) / 10 {
		b.done(10, t0, t0.Add(time.Second), false)
	}
	if w, _, _ := b.state(); w < w0+0.9 || w > w0+1.1 {
		t.Fatalf("after a window of timely commands: %v, want about %v", w, w0+1)
	}
	// Cuts stop at the floor.
	for i := range 40 {
		at := t0.Add(time.Duration(i+2) * time.Second)
		b.done(1, at, at.Add(time.Millisecond), true)
	}
	if w, _, _ := b.state(); w != budgetMin {
		t.Fatalf("after many cuts: window %v, want the floor %d", w, budgetMin)
	}
}

// TestBudgetProperties: whatever the calls, the commands in flight are
// what was taken and not done, never negative; unforced takes keep them
// within the window; the window stays within its bounds.
func TestBudgetProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b budget
		b.init()
		now := time.Unix(0, 0)
		var taken []int
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 100).Draw(t, "dt")) * time.Millisecond)
			if len(taken) == 0 || rapid.Bool().Draw(t, "take") {
				force := rapid.IntRange(0, 9).Draw(t, "force") == 0
				w, in, _ := b.state()
				got := b.take(rapid.IntRange(0, 3000).Draw(t, "n"), force)
				if !force && in+got > max(int(w), in) {
					t.Fatalf("unforced take of %d with %d in flight beyond the window %v", got, in, w)
				}
				if got > 0 {
					taken = append(taken, got)
				}
			} else {
				i := rapid.IntRange(0, len(taken)-1).Draw(t, "which")
				n := taken[i]
				taken = append(taken[:i], taken[i+1:]...)
				b.done(n, now.Add(-time.Duration(rapid.IntRange(0, 200).Draw(t, "rtt"))*time.Millisecond), now, rapid.Bool().Draw(t, "late"))
			}
			w, in, _ := b.state()
			sum := 0
			for _, n := range taken {
				sum += n
			}
			if in != sum {
				t.Fatalf("in flight %d, taken and not done %d", in, sum)
			}
			if w < budgetMin || w > budgetMax {
				t.Fatalf("window %v out of [%d, %d]", w, budgetMin, budgetMax)
			}
		}
	})
}
