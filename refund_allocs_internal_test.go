package leasequota

import (
	"context"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// TestRefundAllocations: Refund allocates nothing while its tenant is
// tracked (into the lease), and tracks a tenant evicted since anew, which
// allocates its entry: its doc said it allocated nothing at all. The
// figure of the second is logged (12 at this writing), not asserted.
func TestRefundAllocations(t *testing.T) {
	clock := &manualClock{now: time.Now()}
	l, err := NewWithStore(memstore.New(), WithIdleTimeout(time.Millisecond),
		WithRedisTimeout(10*time.Second), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		withManualClock(clock.Now), WithColdStartWait(0), WithDefaultQuota(Quota{Rate: 100, Burst: 100, MinLease: 50}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	l.stop() // this test runs the rounds
	l.group.Wait()
	ctx := context.Background()
	l.AllowN(ctx, "a", 1)
	l.sync.Round(ctx, l.sync.Tenants())
	tracked := testing.AllocsPerRun(20, func() {
		d := l.AllowN(ctx, "a", 1)
		if !d.Allowed || d.Reason != ReasonLeased {
			t.Fatalf("a's request after its lease: %+v", d)
		}
		if err := l.Refund(&d); err != nil {
			t.Fatal(err)
		}
	})
	if tracked != 0 {
		t.Errorf("AllowN and Refund of a tracked tenant: %v allocations, want 0", tracked)
	}
	d := l.AllowN(ctx, "a", 1)
	if !d.Allowed || d.Reason != ReasonLeased {
		t.Fatalf("a's request after its lease: %+v", d)
	}
	first := l.sync.Tenant("a")
	for range 2 {
		clock.Advance(5 * time.Millisecond)
		l.sync.Round(ctx, l.sync.Tenants())
	}
	if !first.Evicted() {
		t.Fatal("a was not evicted")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := l.Refund(&d); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if l.sync.Tenant("a") == first {
		t.Fatal("a was not tracked anew")
	}
	t.Logf("Refund of a tenant evicted since: %d allocations", after.Mallocs-before.Mallocs)
}
