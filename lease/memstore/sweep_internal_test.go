package memstore

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
)

// TestSweepForgetsExpiredTenants: a store used by many tenants once does
// not keep them after their keys expired: writes pay for a sweep, and a
// tenant with only an override (which never expires) stays.
func TestSweepForgetsExpiredTenants(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	s := New(WithClock(func() time.Time { return now }))
	v, err := s.Instance("a", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lim := lease.Limits{Rate: 1000, Burst: 10}
	reqs := make([]lease.Request, 1000)
	for i := range reqs {
		reqs[i] = lease.Request{Tenant: strconv.Itoa(i), Limits: lim, Want: 5}
	}
	if _, err := v.AcquireMany(ctx, reqs, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := v.SetOverride(ctx, "kept", lim, lease.Override{Rate: 1, Burst: 1}); err != nil {
		t.Fatal(err)
	}
	now = now.Add(time.Hour) // every bucket and registry has expired
	for range 1100 {
		if _, err := v.AcquireMany(ctx, reqs[:1], nil); err != nil {
			t.Fatal(err)
		}
	}
	s.mu.Lock()
	n := len(s.tenants)
	_, kept := s.tenants["kept"]
	s.mu.Unlock()
	if n != 2 || !kept {
		t.Fatalf("%d tenants kept (kept: %v), want tenant 0 and the one with an override", n, kept)
	}
}
