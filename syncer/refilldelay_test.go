package syncer

import (
	"testing"
	"time"
)

func TestRefillDelayIsFreshForASecond(t *testing.T) {
	var d refillDelay
	t0 := time.Unix(1_000, 0)
	if _, ok := d.last(t0); ok {
		t.Fatal("a delay before any refill")
	}
	d.note(t0, t0.Add(300*time.Millisecond))
	ended := t0.Add(300 * time.Millisecond)
	for _, c := range []struct {
		at   time.Time
		want bool
	}{
		{ended, true},
		{ended.Add(refillDelayFresh), true},
		{ended.Add(refillDelayFresh + time.Nanosecond), false},
	} {
		took, ok := d.last(c.at)
		if ok != c.want || ok && took != 300*time.Millisecond {
			t.Errorf("last(%v after the end) = %v, %v; want 300ms, %v", c.at.Sub(ended), took, ok, c.want)
		}
	}
	// A clock that went back says nothing negative.
	d.note(t0, t0.Add(-time.Second))
	if took, ok := d.last(t0); !ok || took != 0 {
		t.Errorf("after a refill that ended before it began: %v, %v; want 0, true", took, ok)
	}
}

// TestFailedRefillOutlastsAnyWait: a refill that brought no lease speaks
// for every wait while fresh, and for none after; a refill that succeeds
// later replaces it.
func TestFailedRefillOutlastsAnyWait(t *testing.T) {
	var d refillDelay
	t0 := time.Unix(1_000, 0)
	d.failed(t0, false)
	if took, ok := d.last(t0); !ok || took < time.Hour {
		t.Fatalf("after a failed refill: %v, %v; want a delay longer than any wait", took, ok)
	}
	if _, ok := d.last(t0.Add(refillDelayFresh + time.Nanosecond)); ok {
		t.Fatal("a failed refill still speaks after refillDelayFresh")
	}
	d.note(t0, t0.Add(time.Millisecond))
	if took, ok := d.last(t0.Add(time.Millisecond)); !ok || took != time.Millisecond {
		t.Fatalf("after a refill that succeeded: %v, %v; want 1ms, true", took, ok)
	}
}
