package syncer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// ageStore records the Age of every release.
type ageStore struct {
	lease.Store
	mu   sync.Mutex
	ages []time.Duration
}

func (s *ageStore) ReleaseMany(ctx context.Context, reqs []lease.ReleaseRequest) []lease.ReleaseResult {
	s.mu.Lock()
	for _, r := range reqs {
		s.ages = append(s.ages, r.Age)
	}
	s.mu.Unlock()
	return s.Store.ReleaseMany(ctx, reqs)
}

// TestReleaseAllAgeCoversCallersTime: ReleaseAll's returns may run as
// late as its ctx's deadline, beyond a call's own, so each return's Age
// (at least how long before the release runs its tokens were granted)
// covers that deadline: a return judged from a later grant time than its
// tokens' could be credited more than the bucket lost. Without a
// deadline, the Age covers a call's deadline only.
func TestReleaseAllAgeCoversCallersTime(t *testing.T) {
	for _, timeout := range []time.Duration{3 * time.Second, 0} {
		view, err := memstore.New().Instance("i", time.Second)
		if err != nil {
			t.Fatal(err)
		}
		store := &ageStore{Store: view}
		s := syncer.New(store, syncer.Options{CallTimeout: 50 * time.Millisecond})
		tn, err := s.Track("t", quota.Quota{Rate: 1, Burst: 1000, MinLease: 50, MaxLease: 100, LeaseTTL: time.Second})
		if err != nil {
			t.Fatal(err)
		}
		if r := <-s.Refill(context.Background(), tn, 1); r.Err != nil {
			t.Fatal(r.Err)
		}
		ctx := context.Background()
		if timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, timeout)
			defer cancel()
		}
		s.Close()
		if err := s.ReleaseAll(ctx); err != nil {
			t.Fatal(err)
		}
		store.mu.Lock()
		ages := store.ages
		store.mu.Unlock()
		if len(ages) != 1 {
			t.Fatalf("ctx timeout %v: %d releases, want 1", timeout, len(ages))
		}
		switch {
		case timeout > 0 && ages[0] < timeout-100*time.Millisecond:
			t.Errorf("ReleaseAll with a ctx of %v: Age %v, want at least about the ctx's time", timeout, ages[0])
		case timeout == 0 && ages[0] >= time.Second:
			t.Errorf("ReleaseAll without a deadline: Age %v, want a call's deadline's worth (under 1s)", ages[0])
		}
		t.Logf("ctx timeout %v: Age %v", timeout, ages[0])
	}
}
