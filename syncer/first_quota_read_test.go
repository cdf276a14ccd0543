package syncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestFirstQuotaReadAddsNoCall: the first read of the quota version (as
// an instance starts) is no move from a version read before, so a tenant
// whose lease call came just before it makes no call to re-read (it
// did, one a tenant more at a fleet's start, once the rule for calls
// planned before a move's read counted the first read as a move); a move
// from a known version does.
func TestFirstQuotaReadAddsNoCall(t *testing.T) {
	advance, mem, store, s := drivenOverFaults(t)
	other, err := mem.Instance("other", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	q := quota.Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second}
	tn, err := s.Track("t", q)
	if err != nil {
		t.Fatal(err)
	}
	tn.NoteMiss(1)
	refillNow(t, s, tn, 1)
	advance(time.Millisecond)
	before, _ := store.Calls(faultstore.OpAcquire)
	s.Tick(ctx) // the first read of the version
	if made, _ := store.Calls(faultstore.OpAcquire); made != before {
		t.Errorf("the tick of the first quota read made %d lease calls for a tenant granted 1 ms before, want 0", made-before)
	}
	// A move from the version read: the call came before it, so it
	// re-reads.
	advance(60 * time.Millisecond)
	if _, err := other.SetOverride(ctx, "t", quota.Bucket(q), lease.Override{Rate: 1000, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		s.Tick(ctx)
		advance(25 * time.Millisecond)
	}
	if r := tn.Limits().Rate; r != 1000 {
		t.Errorf("rate in force two rounds after the quota version moved: %v, want the override's 1000", r)
	}
}

// TestFailedQuotaReadAddsNoCall: a read of the quota version that fails
// tells nothing (the version only rises: a change made meanwhile shows at
// the next read), so a tenant held back on a dry bucket makes no call to
// re-read its quota. Taken for a move, every failed read made every such
// tenant call, at each tick of the half interval while reads failed (as
// they do when Redis is saturated).
func TestFailedQuotaReadAddsNoCall(t *testing.T) {
	advance, _, store, s := drivenOverFaults(t)
	ctx := context.Background()
	// Rate 0.01: the bucket, drained by the first grant, refills in 1,000 s.
	q := quota.Quota{Rate: 0.01, Burst: 10, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second}
	tn, err := s.Track("t", q)
	if err != nil {
		t.Fatal(err)
	}
	tn.NoteMiss(10)
	refillNow(t, s, tn, 10)
	s.Tick(ctx) // the first read of the version
	if ok, _ := tn.Spend(tn.Held()); !ok {
		t.Fatal("could not spend the lease")
	}
	// Held back on the dry bucket: ticks whose reads succeed make no call.
	for range 4 {
		advance(30 * time.Millisecond)
		tn.NoteMiss(1)
		s.Tick(ctx)
	}
	before, _ := store.Calls(faultstore.OpAcquire)
	for range 4 {
		advance(30 * time.Millisecond)
		tn.NoteMiss(1)
		s.Tick(ctx)
	}
	if made, _ := store.Calls(faultstore.OpAcquire); made != before {
		t.Fatalf("held back, with the version read: %d lease calls in 4 ticks, want 0 (the test shows nothing)", made-before)
	}
	store.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op == faultstore.OpVersion {
			return context.DeadlineExceeded
		}
		return nil
	})
	for range 4 {
		advance(30 * time.Millisecond)
		tn.NoteMiss(1)
		s.Tick(ctx)
	}
	if made, _ := store.Calls(faultstore.OpAcquire); made != before {
		t.Errorf("held back, the version's reads failing: %d lease calls in 4 ticks, want 0", made-before)
	}
}

// drivenOverFaults returns a driven syncer (refresh interval 100 ms) on
// the instance "mine" of a memstore behind a faultstore, the memstore
// (for other instances' views), the faultstore (its counts and hooks),
// and how to move their clock on.
func drivenOverFaults(t *testing.T) (advance func(time.Duration), mem *memstore.Store, store *faultstore.Store, s *Syncer) {
	t.Helper()
	var clock atomic.Int64
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clock.Load()) }
	mem = memstore.New(memstore.WithClock(now))
	store = faultstore.New(mem)
	mine, err := store.Instance("mine", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	s = New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
	t.Cleanup(s.Close)
	return func(d time.Duration) { clock.Add(int64(d)) }, mem, store, s
}
