package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestQuotaCheckRereadsCallBeforeTheChange: a tenant whose last lease
// call was made within a quarter interval of the round that saw the
// quota version move was spared the re-read, as though that call had
// read the new quota; but Redis ran it before the change. Here a refill
// a millisecond before an override raised the rate from 10 to 1,000, and
// the tick after it read the version: the tenant kept the old rate
// through the rounds after, where a change applies within half an
// interval plus two rounds.
func TestQuotaCheckRereadsCallBeforeTheChange(t *testing.T) {
	now, advance, _, mine, other := MemstorePair(t)
	ctx := context.Background()
	s := New(mine, Options{Planner: NewPlanner(Config{Interval: 100 * time.Millisecond}, 1), Now: now, Driven: true})
	t.Cleanup(s.Close)
	q := quota.Quota{Rate: 10, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: 2 * time.Second}
	tn, err := s.Track("t", q)
	if err != nil {
		t.Fatal(err)
	}
	// The first read of the quota version (the first known counts as a
	// change) and a first lease; then a read that finds no change.
	tn.NoteMiss(1)
	for range 3 {
		s.Tick(ctx)
		advance(25 * time.Millisecond)
	}
	// 75 ms: the next read is due at 100 ms. A refill 1 ms before it,
	// then the change.
	advance(24 * time.Millisecond)
	tn.NoteMiss(40)
	refillNow(t, s, tn, 40)
	if _, err := other.SetOverride(ctx, "t", quota.Bucket(q), lease.Override{Rate: 1000, Burst: 1000}); err != nil {
		t.Fatal(err)
	}
	advance(time.Millisecond)
	// The round that reads the moved version, and the next.
	for range 2 {
		s.Tick(ctx)
		advance(25 * time.Millisecond)
	}
	if r := tn.Limits().Rate; r != 1000 {
		t.Errorf("rate in force two rounds after the quota version moved: %v, want the override's 1000", r)
	}
}
