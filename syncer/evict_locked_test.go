package syncer_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"github.com/leasequota/leasequota/syncer"
)

// gatedStore holds the acquires of tenants named with prefix until gate
// closes: first lease calls on their way to Redis.
type gatedStore struct {
	lease.Store
	prefix string
	gate   chan struct{}
	wg     sync.WaitGroup // the acquires held
}

func (s *gatedStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	for _, r := range reqs {
		if strings.HasPrefix(r.Tenant, s.prefix) {
			s.wg.Done()
			<-s.gate
			break
		}
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

// TestMaxTenantsCountsTenantsWithARefillInFlight: a round over MaxTenants
// evicts down to it counting every tenant it tracks, new tenants whose
// first lease call (a refill, which holds the tenant's lock) is in flight
// included: they are tracked too, and a burst of new tenants would
// otherwise stall eviction.
func TestMaxTenantsCountsTenantsWithARefillInFlight(t *testing.T) {
	defer goleak.VerifyNone(t)
	clock, view := clockedView(t)
	st := &gatedStore{Store: view, prefix: "new", gate: make(chan struct{})}
	s := syncer.New(st, syncer.Options{
		Planner:     syncer.NewPlanner(syncer.Config{Interval: 100 * time.Millisecond}, 1),
		Now:         clock.Now,
		CallTimeout: 10 * time.Second,
		IdleTimeout: time.Hour,
		MaxTenants:  4,
	})
	defer s.Close()
	ctx := context.Background()
	track := tracker(t, s, quota.Quota{Rate: 100, Burst: 100, MinLease: 1, MaxLease: 10, LeaseTTL: time.Minute})
	var old []*syncer.Tenant
	for i := range 4 {
		tn := track(fmt.Sprint("old", i))
		if err := (<-s.Refill(ctx, tn, 1)).Err; err != nil {
			t.Fatal(err)
		}
		old = append(old, tn)
	}
	clock.Add(time.Second)
	// Four new tenants, their first lease calls on their way.
	var answers []<-chan struct{}
	st.wg.Add(4)
	for i := range 4 {
		tn := track(fmt.Sprint("new", i))
		done := make(chan struct{})
		ch := s.Refill(ctx, tn, 1)
		go func() { <-ch; close(done) }()
		answers = append(answers, done)
	}
	st.wg.Wait()
	s.Tick(ctx)
	s.Wait()
	evicted := 0
	for _, tn := range old {
		if tn.Evicted() {
			evicted++
		}
	}
	close(st.gate)
	for _, a := range answers {
		<-a
	}
	t.Logf("after a round over 8 tenants, 4 with a first lease call in flight: %d tracked, %d evicted", s.Len(), evicted)
	if s.Len() != 4 || evicted != 4 {
		t.Errorf("%d tenants tracked, %d of the 4 old ones evicted; want 4 (MaxTenants), the new ones kept", s.Len(), evicted)
	}
}
