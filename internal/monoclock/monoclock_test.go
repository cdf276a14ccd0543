package monoclock

import (
	"testing"
	"time"
)

// TestClockRunsFromItsWallTime: the clock starts at the wall time it was
// given, not at the system's (which a step of the system's wall clock
// moves), and runs on by the monotonic clock: it never goes back.
func TestClockRunsFromItsWallTime(t *testing.T) {
	wall := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	now := New(wall)
	prev := now()
	for range 1000 {
		at := now()
		if at.Before(prev) {
			t.Fatalf("the clock went back from %v to %v", prev, at)
		}
		prev = at
	}
	if d := prev.Sub(wall); d < 0 || d > time.Minute {
		t.Errorf("the clock reads %v, %v after the wall time it started at", prev, d)
	}
	// With time.Now's monotonic reading, its times subtract by it.
	start := time.Now()
	now = New(start)
	if at := now(); at == at.Round(0) { // Round(0) strips it
		t.Errorf("%v has no monotonic reading", at)
	}
}
