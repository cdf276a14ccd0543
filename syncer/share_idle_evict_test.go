package syncer

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestIdleEvictionEndsTheShare: a tenant whose load stopped holds a rate
// share that its planner ends after a jitter of up to a quarter period
// (Planner.endAfter). With a period of 8 minutes that jitter may run past
// the idle timeout (1 minute), and the idle eviction drained the tenant
// and forgot the share without ending it: Redis kept it in force, its
// rate withheld from the bucket, unspent, until its epoch ended, up to
// 1.5 periods after it was granted. Each share's end must reach the
// store before its tenant is gone.
func TestIdleEvictionEndsTheShare(t *testing.T) {
	clock := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return clock }
	view, err := memstore.New(memstore.WithClock(now)).Instance("me", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	store := &askLog{Store: view}
	const period = 8 * time.Minute
	s := New(store, Options{Now: now, IdleTimeout: time.Minute,
		Planner: NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: period}, 1)})
	t.Cleanup(func() { s.Close() })
	const n = 8
	var tns []*Tenant
	for i := range n {
		tn, err := s.Track(fmt.Sprintf("t%d", i), shareQuota)
		if err != nil {
			t.Fatal(err)
		}
		tns = append(tns, tn)
	}
	round := func() {
		s.Round(context.Background(), func(yield func(*Tenant) bool) {
			for _, tn := range tns {
				if !yield(tn) {
					return
				}
			}
		})
	}
	shares := map[string]lease.RateShare{}
	for i := 0; len(shares) < n; i++ {
		if i == 400 {
			t.Fatalf("%d of %d tenants hold a share after 10 s of a demand three times the rate", len(shares), n)
		}
		clock = clock.Add(25 * time.Millisecond)
		for _, tn := range tns {
			for {
				if ok, _ := tn.SpendOne(); !ok {
					break
				}
			}
			tn.NoteMiss(8)
		}
		round()
		for _, tn := range tns {
			tn.mu.Lock()
			if sh, ok := tn.st().HeldShare(); ok {
				if _, known := shares[tn.name]; !known {
					shares[tn.name] = sh
				}
			}
			tn.mu.Unlock()
		}
	}
	// The load stops; rounds go on until every tenant is evicted.
	stopped := clock
	ended := map[string]bool{}
	for s.evicted.Load() < n {
		if clock.Sub(stopped) > 10*time.Minute {
			t.Fatalf("%d of %d idle tenants evicted in 10 minutes", s.evicted.Load(), n)
		}
		clock = clock.Add(25 * time.Millisecond)
		store.mu.Lock()
		store.reqs = nil
		store.mu.Unlock()
		round()
		store.mu.Lock()
		for _, r := range store.reqs {
			if r.Share == lease.ShareEnd {
				ended[r.Tenant] = true
			}
		}
		store.mu.Unlock()
	}
	left := 0
	for name, sh := range shares {
		if !ended[name] && sh.Until.After(clock) {
			left++
			t.Logf("%s evicted with its share of %.3g a second in force at the store until %v from now, never ended", name, sh.Rate, sh.Until.Sub(clock))
		}
	}
	t.Logf("%d of %d tenants evicted %v after their load stopped with their shares never ended", left, n, clock.Sub(stopped))
	if left != 0 {
		t.Errorf("%d of %d idle tenants evicted with their shares in force at the store, never ended", left, n)
	}
}
