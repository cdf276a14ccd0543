package leasequota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestInvalidNWithFullRegistry: n <= 0 and n > Burst are said at once
// (ReasonInvalidN; WaitN and WaitAll: ErrInvalidN, ErrExceedsBurst) also
// for a new tenant while the registry is full (twice WithMaxTenants
// tracked). AllowN said too_many_tenants, and WaitN and WaitAll waited
// for eviction until ctx ended, returning ctx's error.
func TestInvalidNWithFullRegistry(t *testing.T) {
	l := newLimiter(t, setup(t), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 10}),
		leasequota.WithMaxTenants(1), leasequota.WithRefreshInterval(10*time.Second), leasequota.WithLeaseTTL(time.Minute))
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		if !l.Allow(n) {
			t.Fatal(n)
		}
	}
	if d := l.AllowN(ctx, "c", 0); d.Reason != leasequota.ReasonInvalidN {
		t.Errorf("AllowN(c, 0), registry full: %v, want invalid_n", d.Reason)
	}
	if d := l.AllowN(ctx, "c", 11); d.Reason != leasequota.ReasonInvalidN {
		t.Errorf("AllowN(c, 11 > Burst 10), registry full: %v, want invalid_n", d.Reason)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := l.WaitN(wctx, "c", 0); !errors.Is(err, leasequota.ErrInvalidN) {
		t.Errorf("WaitN(c, 0), registry full: %v after %v, want ErrInvalidN at once", err, time.Since(start))
	}
	start = time.Now()
	if _, err := l.WaitN(wctx, "c", 11); !errors.Is(err, leasequota.ErrExceedsBurst) {
		t.Errorf("WaitN(c, 11 > Burst 10), registry full: %v after %v, want ErrExceedsBurst at once", err, time.Since(start))
	}
	wctx2, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	start = time.Now()
	if _, err := l.WaitAll(wctx2, 0, "c", "d"); !errors.Is(err, leasequota.ErrInvalidN) {
		t.Errorf("WaitAll(0, c, d), registry full: %v after %v, want ErrInvalidN at once", err, time.Since(start))
	}
}
