package syncer

import (
	"context"
	"math"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestLevel checks that Tenant.Level is the global bucket's level after
// this instance's last successful lease call, rounded down: zero before
// the first, and not lowered by another instance's lease.
func TestLevel(t *testing.T) {
	defer goleak.VerifyNone(t)
	now, advance, store, mine, other := MemstorePair(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const name = "level"
	// Rate 0.5/s: the bucket gains no whole token in the test's 1 ms.
	lim := quota.Quota{Rate: 0.5, Burst: 100, MinLease: 1, MaxLease: 30, LeaseTTL: time.Minute}
	s := New(mine, Options{Planner: NewPlanner(Config{}, 1), Now: now})
	tn, err := s.Track(name, lim)
	if err != nil {
		t.Fatal(err)
	}
	if got := tn.Level(); got != 0 {
		t.Fatalf("Level before any lease call = %d, want 0", got)
	}
	if r := <-s.Refill(ctx, tn, 10); r.Err != nil {
		t.Fatal(r.Err)
	}
	granted := s.Stats().Granted
	if granted <= 0 || granted > lim.Burst {
		t.Fatalf("granted %d", granted)
	}
	want := lim.Burst - granted
	if got := tn.Level(); got != want {
		t.Errorf("Level after a grant of %d from a full bucket of %d = %d, want %d", granted, lim.Burst, got, want)
	}
	if b := store.Tenant(name).Bucket; b == nil || int64(b.Tokens) != want {
		t.Errorf("bucket %+v, want %d tokens", b, want)
	}

	// Another instance's lease lowers the bucket, not this one's view.
	advance(time.Millisecond)
	res, err := other.AcquireMany(ctx, []lease.Request{{Tenant: name, Limits: quota.Bucket(lim), Want: 20}}, nil)
	if err != nil || res[0].Err != nil || res[0].Grant.Granted != 20 {
		t.Fatalf("the other instance's acquire: %v, %+v", err, res)
	}
	if got := tn.Level(); got != want {
		t.Errorf("Level after another instance's lease = %d, want %d (unchanged)", got, want)
	}
}

func TestFloorLevel(t *testing.T) {
	for _, c := range []struct {
		in   float64
		want int64
	}{
		{0, 0},
		{-3.5, 0},
		{math.NaN(), 0},
		{math.Inf(-1), 0},
		{0.99, 0},
		{41.7, 41},
		{1 << 40, 1 << 40},
		{math.MaxInt64, math.MaxInt64},
		{math.Inf(1), math.MaxInt64},
	} {
		if got := floorLevel(c.in); got != c.want {
			t.Errorf("floorLevel(%v) = %d, want %d", c.in, got, c.want)
		}
	}
}

// TestSeenLevelOfACenturiesOldEmptyBucket: a level so far from empty at
// so slow a rate that the time it took saturates an int64 of nanoseconds
// (durationCeil: 292 years, 0.92 tokens at 1e-10 a second) reads as no
// less than the level Redis reported, not as the deep debt the wrapped
// difference made of it (a RetryAfter of 292 years beside the tokens the
// bucket held), nor as the saturated 0.92 (24.6 years, and a tenant that
// never went dormant).
func TestSeenLevelOfACenturiesOldEmptyBucket(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	var ls leaseState
	ls.emptyAt.Store(now.UnixNano() - int64(durationCeil(2/1e-10)))
	ls.level.Store(2)
	level, ok := ls.seenLevel(now.Add(time.Second), 1e-10)
	if !ok || level < 2 {
		t.Fatalf("seen level %v (%v) of a bucket that held 2 at 1e-10 tokens a second: want at least the 2 Redis reported", level, ok)
	}
	if !ls.refilled(now.Add(time.Second), &quota.Quota{Rate: 1e-10, Burst: 2}) {
		t.Errorf("a bucket seen at its burst of 2 is not refilled: the tenant would never go dormant")
	}
}
