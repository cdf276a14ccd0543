package syncer

import (
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestBudgetAIMD: the window starts at budgetInitial and binds; until
// the first late call it doubles every window of timely commands (the
// slow start); it halves on a late call, once per round trip, never below
// the floor; then it grows by one command per window of timely commands;
// take never grants beyond it unless forced; it stops binding budgetCalm
// after the start or the last cut.
func TestBudgetAIMD(t *testing.T) {
	var b budget
	t0 := time.Unix(0, 0)
	b.init(t0)
	if w, _, _ := b.state(); w != budgetInitial {
		t.Fatalf("initial window %v, want %d", w, budgetInitial)
	}
	// The slow start: the window binds from the start.
	if got := b.take(budgetInitial+5, false, t0); got != budgetInitial {
		t.Fatalf("take at the start granted %d, want the window %d", got, budgetInitial)
	}
	b.done(budgetInitial, t0, t0.Add(time.Millisecond), false, budgetMin)
	if w, _, _ := b.state(); w != 2*budgetInitial {
		t.Fatalf("after a window of timely commands in the slow start: %v, want %d", w, 2*budgetInitial)
	}
	// Without a cut, the window stops binding budgetCalm after the start.
	if got := b.take(100*budgetInitial, false, t0.Add(budgetCalm)); got != 100*budgetInitial {
		t.Fatalf("take budgetCalm after the start granted %d, want all %d", got, 100*budgetInitial)
	}
	b.done(100*budgetInitial, t0, t0.Add(budgetCalm), false, budgetMin)
	w0, _, _ := b.state()
	// Two late calls sent before the cut: one cut.
	b.done(1000, t0, t0.Add(60*time.Millisecond), true, budgetMin)
	b.done(1000, t0, t0.Add(61*time.Millisecond), true, budgetMin)
	w1, _, cuts := b.state()
	if cuts != 1 || w1 != w0/2 {
		t.Fatalf("after two late calls of one round trip: window %v, %d cuts; want %v, 1", w1, cuts, w0/2)
	}
	cut := t0.Add(61 * time.Millisecond)
	// Within budgetCalm of the cut the window binds; forced takes do not.
	if got := b.take(int(w1)+5, false, cut); got != int(w1) {
		t.Fatalf("take beyond the window after a cut granted %d, want %v", got, w1)
	}
	if got := b.take(1, false, cut); got != 0 {
		t.Fatalf("take from a full window granted %d", got)
	}
	if got := b.take(3, true, cut); got != 3 {
		t.Fatalf("forced take granted %d, want 3", got)
	}
	if got := b.take(7, false, cut.Add(budgetCalm)); got != 7 {
		t.Fatalf("take budgetCalm after the cut granted %d, want 7: the window no longer binds", got)
	}
	b.done(int(w1)+3+7, cut, cut, false, budgetMin)
	// A late call sent after the cut cuts again.
	w2, _, _ := b.state()
	b.done(1000, t0.Add(70*time.Millisecond), t0.Add(130*time.Millisecond), true, budgetMin)
	if w, _, _ := b.state(); w != w2/2 {
		t.Fatalf("after a later late call: window %v, want %v", w, w2/2)
	}
	// After the first cut, a window of timely commands adds one, while
	// the window limits (a window's worth stands in flight beside them).
	w0, _, _ = b.state()
	standing := b.take(int(w0), true, t0)
	for range int(w0) / 10 {
		b.take(10, true, t0)
		b.done(10, t0, t0.Add(time.Second), false, budgetMin)
	}
	if w, _, _ := b.state(); w < w0+0.9 || w > w0+1.1 {
		t.Fatalf("after a window of timely commands: %v, want about %v", w, w0+1)
	}
	b.done(standing, t0, t0.Add(time.Second), false, budgetMin)
	// Cuts stop at the floor.
	for i := range 40 {
		at := t0.Add(time.Duration(i+2) * time.Second)
		b.done(1, at, at.Add(time.Millisecond), true, budgetMin)
	}
	if w, _, _ := b.state(); w != budgetMin {
		t.Fatalf("after many cuts: window %v, want the floor %d", w, budgetMin)
	}
}

// TestBudgetGrowsOnlyWhenItLimits: timely calls grow the window only when
// at least half of it was in flight with them; calls far below it, in the
// slow start or after it, or while the window does not bind, leave it as
// it is. A minute of 10,000 small timely calls a second grew it to
// 600,256 commands before, which 9 late round trips were needed to cut
// below 8,000.
func TestBudgetGrowsOnlyWhenItLimits(t *testing.T) {
	var b budget
	t0 := time.Unix(0, 0)
	b.init(t0)
	now := t0
	for range 60_000 { // a minute of 1,000 calls of 10 a second
		now = now.Add(time.Millisecond)
		got := b.take(10, false, now)
		b.done(got, now, now.Add(time.Millisecond), false, budgetMin)
	}
	if w, _, _ := b.state(); w != budgetInitial {
		t.Fatalf("after a minute of calls of 10 commands, window %v, want it unchanged at %d", w, budgetInitial)
	}
	// A round that fills the window: the slow start doubles it.
	got := b.take(budgetInitial, false, now)
	b.done(got, now, now.Add(time.Millisecond), false, budgetMin)
	if w, _, _ := b.state(); w != 2*budgetInitial {
		t.Fatalf("after a full window answered in time, window %v, want %d", w, 2*budgetInitial)
	}
	// After a cut, additive growth waits for the window to limit too.
	b.done(1, now, now.Add(time.Second), true, budgetMin)
	w0, _, _ := b.state()
	for range 10_000 {
		got := b.take(1, true, now)
		b.done(got, now, now.Add(time.Millisecond), false, budgetMin)
	}
	if w, _, _ := b.state(); w != w0 {
		t.Fatalf("after single commands far below the window, window %v, want %v", w, w0)
	}
}

// TestBudgetProperties: whatever the calls, the commands in flight are
// what was taken and not done, never negative; unforced takes keep them
// within the window while it binds; the window stays within its bounds.
func TestBudgetProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var b budget
		b.init(time.Unix(0, 0))
		now := time.Unix(0, 0)
		var taken []int
		for range rapid.IntRange(1, 200).Draw(t, "steps") {
			now = now.Add(time.Duration(rapid.IntRange(0, 100).Draw(t, "dt")) * time.Millisecond)
			if len(taken) == 0 || rapid.Bool().Draw(t, "take") {
				force := rapid.IntRange(0, 9).Draw(t, "force") == 0
				w, in, _ := b.state()
				got := b.take(rapid.IntRange(0, 3000).Draw(t, "n"), force, now)
				if !force && b.bindsAt(now) && in+got > max(int(w), in) {
					t.Fatalf("unforced take of %d with %d in flight beyond the window %v", got, in, w)
				}
				if got > 0 {
					taken = append(taken, got)
				}
			} else {
				i := rapid.IntRange(0, len(taken)-1).Draw(t, "which")
				n := taken[i]
				taken = append(taken[:i], taken[i+1:]...)
				floor := budgetFloor(rapid.IntRange(0, 100).Draw(t, "instances"))
				b.done(n, now.Add(-time.Duration(rapid.IntRange(0, 200).Draw(t, "rtt"))*time.Millisecond), now, rapid.Bool().Draw(t, "late"), floor)
				// The floor may rise between calls (a roster counted):
				// the window follows it up at once.
				if w, _, _ := b.state(); w < float64(floor) {
					t.Fatalf("window %v below the floor %d the call gave", w, floor)
				}
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

// TestBudgetRecovered: the cuts made since the last call answered in
// time before the breaker opened (an outage's timeouts, its probes') are
// undone when it closes; those made while calls were still answered in
// time stay, and the window still binds.
func TestBudgetRecovered(t *testing.T) {
	var b budget
	t0 := time.Unix(0, 0)
	b.init(t0)
	// Saturation: two late calls, each followed by one in time.
	at := t0
	for range 2 {
		at = at.Add(time.Second)
		b.done(1, at, at.Add(time.Millisecond), true, budgetMin)
		at = at.Add(time.Second)
		b.done(1, at, at.Add(time.Millisecond), false, budgetMin)
	}
	before, _, _ := b.state()
	if before > budgetInitial/4+1 {
		t.Fatalf("after two cuts: window %v, want about %d", before, budgetInitial/4)
	}
	// An outage: every call times out, then the breaker opens, and its
	// probes time out, one an interval.
	for range 10 {
		at = at.Add(time.Second)
		b.done(1, at, at.Add(time.Millisecond), true, budgetMin)
	}
	b.outage()
	for range 5 {
		at = at.Add(time.Second)
		b.done(1, at, at.Add(time.Millisecond), true, budgetMin)
	}
	if w, _, _ := b.state(); w != budgetMin {
		t.Fatalf("after the outage's cuts: window %v, want the floor %d", w, budgetMin)
	}
	b.recovered()
	if w, _, _ := b.state(); w != before {
		t.Fatalf("recovered: window %v, want %v, what it was at the last call answered in time", w, before)
	}
	if got := b.take(budgetInitial, false, at); got != int(before) {
		t.Fatalf("recovered: a take of %d granted %d, want the window %v: it still binds", budgetInitial, got, before)
	}
	b.done(int(before), at, at, false, budgetMin)
	// A window that grew since is not lowered.
	b.outage()
	for range 400 {
		b.done(100, at, at, false, budgetMin)
	}
	grown, _, _ := b.state()
	b.recovered()
	if w, _, _ := b.state(); w != grown || grown <= before {
		t.Fatalf("recovered after growing: window %v, want %v (> %v)", w, grown, before)
	}
}

// bindsAt is binds for a caller that does not hold b.mu.
func (b *budget) bindsAt(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.binds(now)
}

// TestBudgetFloor: the instances' floors together stay about
// budgetFleetFloor, and each at least budgetMin.
func TestBudgetFloor(t *testing.T) {
	for _, c := range []struct{ instances, want int }{
		{0, 256}, {1, 256}, {4, 64}, {16, 16}, {32, 8}, {1000, budgetMin},
	} {
		if got := budgetFloor(c.instances); got != c.want {
			t.Errorf("budgetFloor(%d) = %d, want %d", c.instances, got, c.want)
		}
	}
}
