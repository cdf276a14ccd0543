package syncer

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// MemstorePair is an in-process store and two instances of it ("mine"
// and "other") on a clock the test moves (advance), which starts at
// 2027-01-01:
// the fixture of the tests that watch one instance's syncer while another
// instance takes from the same buckets.
func MemstorePair(t testing.TB) (now func() time.Time, advance func(time.Duration), store *memstore.Store, mine, other lease.Store) {
	t.Helper()
	var clock atomic.Int64 // ns since 1970
	clock.Store(time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now = func() time.Time { return time.Unix(0, clock.Load()) }
	advance = func(d time.Duration) { clock.Add(int64(d)) }
	store = memstore.New(memstore.WithClock(now))
	var err error
	if mine, err = store.Instance("mine", time.Second); err != nil {
		t.Fatal(err)
	}
	if other, err = store.Instance("other", time.Second); err != nil {
		t.Fatal(err)
	}
	return now, advance, store, mine, other
}

// refillNow makes a driven syncer's refill of tn for need tokens and
// delivers it, failing t on an error.
func refillNow(t testing.TB, s *Syncer, tn *Tenant, need int64) {
	t.Helper()
	ctx := context.Background()
	ch := s.Refill(ctx, tn, need)
	s.Refills(ctx)
	s.Deliver()
	if r := <-ch; r.Err != nil {
		t.Fatalf("refill: %v", r.Err)
	}
}

// drivenTenant returns a driven syncer on this instance's view of
// MemstorePair's store, with a planner of cfg, closed when t ends, and
// tenant tracked with q; and the pair's clock and its advance.
func drivenTenant(t testing.TB, cfg Config, tenant string, q quota.Quota) (s *Syncer, tn *Tenant, now func() time.Time, advance func(time.Duration)) {
	t.Helper()
	now, advance, _, mine, _ := MemstorePair(t)
	s = New(mine, Options{Planner: NewPlanner(cfg, 1), Now: now, Driven: true})
	t.Cleanup(s.Close)
	tn, err := s.Track(tenant, q)
	if err != nil {
		t.Fatal(err)
	}
	return s, tn, now, advance
}
