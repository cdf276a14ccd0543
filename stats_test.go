package leasequota_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
)

// slowBackend is an in-process store whose acquires answer after delay:
// a Redis that is up but slow.
type slowBackend struct {
	*memstore.Store
	delay time.Duration
}

func (b slowBackend) Instance(id string, window time.Duration) (lease.Store, error) {
	s, err := b.Store.Instance(id, window)
	return slowStore{Store: s, delay: b.delay}, err
}

type slowStore struct {
	lease.Store
	delay time.Duration
}

func (s slowStore) AcquireMany(ctx context.Context, reqs []lease.Request, results []lease.Result) ([]lease.Result, error) {
	t := time.NewTimer(s.delay) // the store's latency, not a wait for a condition
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return s.Store.AcquireMany(ctx, reqs, results)
}

// TestStatsReportTheCallBudget: Stats shows the call budget. A fresh
// limiter's window is its initial one, nothing held back; replies that
// come slow (a 30 ms store against a 40 ms deadline, late after a quarter
// of the lease TTL's half or half the deadline, whichever is less: 20 ms)
// cut it, which WindowCuts counts.
func TestStatsReportTheCallBudget(t *testing.T) {
	defer goleak.VerifyNone(t)
	l, err := leasequota.NewWithStore(slowBackend{Store: memstore.New(), delay: 30 * time.Millisecond},
		leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}),
		leasequota.WithRedisTimeout(40*time.Millisecond), leasequota.WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	if st := l.Stats(); st.CallWindow <= 0 || st.HeldBack != 0 || st.WindowCuts != 0 {
		t.Fatalf("a fresh limiter: window %d, held back %d, cuts %d; want a window, and no hold-back or cut", st.CallWindow, st.HeldBack, st.WindowCuts)
	}
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; l.Stats().WindowCuts == 0; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("no cut of the window after %d tenants' first calls, each answered in 30 ms", i)
		}
		l.Allow(string(rune('a'+i%26)) + "-tenant")
	}
}
