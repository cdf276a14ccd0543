package memstore

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestCountInstancesReadsTheClockUnderTheLock: WithClock promises that
// the clock is called with the store's mutex held (so a simulation's
// clock need not be safe for concurrent use, and times rise in the order
// the calls run). CountInstances called it before taking the mutex: a
// plain counter clock raced with acquires (go test -race), and its
// roster could be written at a time earlier than a call already applied.
func TestCountInstancesReadsTheClockUnderTheLock(t *testing.T) {
	var now int64 = 1_800_000_000_000_000
	s := New(WithClock(func() time.Time {
		now += 7 // not synchronized: the store's mutex serializes the calls
		return time.UnixMicro(now)
	}))
	ctx := context.Background()
	a, _ := s.Instance("a", time.Minute)
	b, _ := s.Instance("b", time.Minute)
	var wg sync.WaitGroup
	for _, v := range []lease.Store{a, b} {
		wg.Add(2)
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := v.(lease.InstanceCounter).CountInstances(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for range 200 {
				if _, err := v.AcquireMany(ctx, []lease.Request{{Tenant: "t", Limits: lease.Limits{Rate: 1, Burst: 10}, Want: 1}}, nil); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
}
