package leasequota_test

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// slowAcquires returns an in-process store whose acquires answer after
// delay: a Redis that is up but slow.
func slowAcquires(delay time.Duration) *faultstore.Store {
	s := faultstore.New(memstore.New())
	slow := faultstore.Delay(delay)
	s.SetHook(func(ctx context.Context, c faultstore.Call) error {
		if c.Op != faultstore.OpAcquire {
			return nil
		}
		return slow(ctx, c)
	})
	return s
}

// TestStatsReportTheCallBudget: Stats shows the call budget. A fresh
// limiter's window is its initial one, nothing held back; replies that
// come slow (a 30 ms store against a 40 ms deadline, late after a quarter
// of the lease TTL's half or half the deadline, whichever is less: 20 ms)
// cut it, which WindowCuts counts.
func TestStatsReportTheCallBudget(t *testing.T) {
	defer goleak.VerifyNone(t)
	l, err := leasequota.NewWithStore(slowAcquires(30*time.Millisecond),
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
