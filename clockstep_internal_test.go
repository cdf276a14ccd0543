package leasequota

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// withWallClock makes the limiter's default clock read now, instead of
// time.Now, as its wall clock at New.
func withWallClock(now func() time.Time) Option { return func(c *config) { c.wall = now } }

// TestClockStepBack: a wall clock stepped back does not keep leases past
// their lifetime, so the window bound holds. In a synctest bubble, on a
// memstore whose clock (Redis's, another machine's) never steps, limiter
// A leases a full bucket (100 tokens at 10 a second, a lease lifetime of
// 1 s) and then its wall clock steps back by 30 s; 20 s later, when the
// bucket has refilled, limiter B leases it, and both admit all they can
// at that instant. The window bound allows B + r(W + L) = 100 + 10 x
// (1 s and a round or two) there: B's 100. With the default clock (the
// wall clock read once at New, then Go's monotonic clock) A's lease
// expired 19 s before; with a clock that reads the wall clock each time
// (time.Now, the default before), it was still spendable and 200 were
// admitted.
func TestClockStepBack(t *testing.T) {
	for _, c := range []struct {
		name     string
		stepping bool // the clock reads the wall clock each time
	}{{"default", false}, {"wall", true}} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				admitted, aLeft := clockStepBackRun(t, c.stepping)
				t.Logf("%s clock stepped back by 30 s: %d admitted at one instant 20 s after A's lease (A still held %d)", c.name, admitted, aLeft)
				if c.stepping {
					if admitted != 200 {
						t.Errorf("a wall clock stepped back: %d admitted, want A's stale 100 and B's 100 (the test no longer sees the step)", admitted)
					}
					return
				}
				if aLeft != 0 || admitted > 100+10*2 {
					t.Errorf("%d admitted, A holding %d: over the window bound of 100 + 10 x (1 s and a round)", admitted, aLeft)
				}
			})
		})
	}
}

// clockStepBackRun runs TestClockStepBack's scenario, A's clock reading
// the wall clock each time when stepping, and returns the tokens
// admitted at its end and those A held just before.
func clockStepBackRun(t *testing.T, stepping bool) (admitted, aLeft int64) {
	q := Quota{Rate: 10, Burst: 100, MinLease: 100, MaxLease: 100, LeaseTTL: time.Second}
	store := memstore.New() // time.Now of the bubble: it never steps
	var offset atomic.Int64
	wall := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	clock := withWallClock(wall)
	if stepping {
		clock = withManualClock(wall)
	}
	ctx := context.Background()
	open := func(id string, opts ...Option) *Limiter {
		l, err := NewWithStore(store, append(opts, WithManualSync(), WithInstanceID(id), WithDefaultQuota(q), WithColdStartWait(0),
			WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))))...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close(ctx) })
		return l
	}
	a, b := open("a", clock), open("b")
	lease := func(l *Limiter) {
		l.AllowN(ctx, "t", 1) // its first request: denied (no cold wait), and noted
		SyncUrgent(l, ctx)
		SyncDeliver(l)
	}
	lease(a)
	if ti, _ := a.Tenant("t"); ti.Tokens != 100 {
		t.Fatalf("A holds %d after its first lease, want the burst of 100", ti.Tokens)
	}
	offset.Add(int64(-30 * time.Second))
	for range 20 * time.Second / (25 * time.Millisecond) {
		time.Sleep(25 * time.Millisecond)
		SyncTick(a, ctx)
		SyncTick(b, ctx)
	}
	ti, _ := a.Tenant("t")
	aLeft = ti.Tokens
	lease(b)
	for _, l := range []*Limiter{a, b} {
		for l.Allow("t") {
			admitted++
		}
	}
	return admitted, aLeft
}
