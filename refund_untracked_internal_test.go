package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease/memstore"
)

// TestRefundOfATenantNotTrackedAgain: a Refund whose tenant was evicted
// since, and cannot be tracked again (the registry is full), forfeits the
// tokens and counts them, refunded and forfeited; it dropped them without
// a count.
func TestRefundOfATenantNotTrackedAgain(t *testing.T) {
	clock := &manualClock{now: time.Now()}
	l, err := NewWithStore(memstore.New(), WithIdleTimeout(time.Millisecond), WithMaxTenants(1),
		WithRedisTimeout(10*time.Second), WithLogger(slog.New(slog.NewTextHandler(testWriter{t}, nil))),
		withManualClock(clock.Now), WithColdStartWait(0), WithDefaultQuota(Quota{Rate: 100, Burst: 100}))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	l.stop() // this test runs the rounds
	l.group.Wait()
	ctx := context.Background()
	l.AllowN(ctx, "a", 1)
	l.sync.Round(ctx, l.sync.Tenants())
	d := l.AllowN(ctx, "a", 1)
	if !d.Allowed || d.Reason != ReasonLeased {
		t.Fatalf("a's request after its lease: %+v", d)
	}
	first := l.sync.Tenant("a")
	// The first round after the spend sees it (activity); the next, past
	// the idle timeout, evicts.
	for range 2 {
		clock.Advance(5 * time.Millisecond)
		l.sync.Round(ctx, l.sync.Tenants())
	}
	if !first.Evicted() {
		t.Fatal("a was not evicted")
	}
	// Two other tenants fill the registry (twice WithMaxTenants).
	l.AllowN(ctx, "b", 1)
	l.AllowN(ctx, "c", 1)
	if _, _, err := l.track("a"); err == nil {
		t.Fatal("a could be tracked again: the registry is not full")
	}
	before := l.Stats()
	if err := l.Refund(&d); err != nil {
		t.Fatal(err)
	}
	after := l.Stats()
	if got, forfeited := after.Refunded-before.Refunded, after.Forfeited-before.Forfeited; got != 1 || forfeited != 1 {
		t.Errorf("refunded %d and forfeited %d of a's token, want 1 and 1", got, forfeited)
	}
}
