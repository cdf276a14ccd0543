package leasequota_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestFailureModes takes the store (Redis) down under three tenants with
// different failure modes, checks that each is decided by its mode once
// its lease is spent, and that leasing resumes on its own once the store
// is back.
func TestFailureModes(t *testing.T) {
	store := faultySetup(t)
	quotas := map[string]leasequota.Quota{
		"closed": {Rate: 100, Burst: 20, MinLease: 10, FailureMode: leasequota.FailClosed},
		"local":  {Rate: 100, Burst: 20, MinLease: 10, FailureMode: leasequota.FailLocal},
		"open":   {Rate: 100, Burst: 20, MinLease: 10, FailureMode: leasequota.FailOpen},
	}
	l, err := leasequota.NewWithStore(store, leasequota.WithLogger(testLogger(t)),
		leasequota.WithRefreshInterval(20*time.Millisecond), leasequota.WithLeaseTTL(time.Hour),
		leasequota.WithColdStartWait(10*time.Second),
		leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota { return quotas[tenant] }))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	ctx := context.Background()
	// Each tenant's first lease. On a loaded machine a call may time out
	// (the store timeout is 10 ms here) and the tenant's mode decide for a
	// moment: ask until a lease admits, as long as the machine needs.
	deadline := time.Now().Add(10 * time.Second)
	for tenant := range quotas {
		for {
			d := l.AllowN(ctx, tenant, 1)
			if d.Allowed && d.Mode == leasequota.FailDefault {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no lease admission within 10s: %+v", tenant, d)
			}
			time.Sleep(time.Millisecond) // pacing; the deadline bounds it
		}
	}

	store.SetDown(nil)
	// Spend what is leased: those tokens are still good.
	leased := map[string]int{}
	degraded := map[string]leasequota.Decision{}
	deadline = time.Now().Add(10 * time.Second)
	for len(degraded) < len(quotas) {
		if time.Now().After(deadline) {
			t.Fatalf("after 10s without the store, only %d tenants decided by their failure mode: %v", len(degraded), degraded)
		}
		for tenant := range quotas {
			if _, done := degraded[tenant]; done {
				continue
			}
			d := l.AllowN(ctx, tenant, 1)
			switch {
			case d.Mode == leasequota.FailDefault && d.Allowed:
				leased[tenant]++
			case d.Mode != leasequota.FailDefault:
				degraded[tenant] = d
			}
		}
		time.Sleep(time.Millisecond) // pacing the loop; the deadline bounds it
	}
	for tenant, n := range leased {
		if n > 20 {
			t.Errorf("%s: %d admitted from leases after the store went down, more than the burst", tenant, n)
		}
	}
	if d := degraded["closed"]; d.Allowed || d.Reason != leasequota.ReasonUnavailable || d.Mode != leasequota.FailClosed {
		t.Errorf("closed: %+v, want a FailClosed denial", d)
	}
	if d := degraded["open"]; !d.Allowed || d.Reason != leasequota.ReasonFailOpen || d.Mode != leasequota.FailOpen {
		t.Errorf("open: %+v, want a FailOpen admission", d)
	}
	if d := degraded["local"]; d.Reason != leasequota.ReasonFallback || d.Mode != leasequota.FailLocal {
		t.Errorf("local: %+v, want a FailLocal decision", d)
	}
	// WaitN on a FailClosed tenant waits through the outage (it never
	// admits without a lease) until its ctx ends.
	wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	d, err := l.WaitN(wctx, "closed", 1)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, leasequota.ErrUnavailable) || d.Allowed || d.Reason != leasequota.ReasonUnavailable {
		t.Errorf("WaitN on a FailClosed tenant without the store: %+v, %v; want a ReasonUnavailable denial at its deadline", d, err)
	}
	// FailLocal admits at most its fallback rate: one instance, so the
	// tenant's rate, 100/s. Over 300ms that is at most 30 plus the
	// fallback capacity (the burst).
	start := time.Now()
	local := 0
	for time.Since(start) < 300*time.Millisecond {
		if l.AllowN(ctx, "local", 1).Allowed {
			local++
		}
	}
	if el := time.Since(start).Seconds(); float64(local) > 20+100*el+1 {
		t.Errorf("FailLocal admitted %d in %.3fs, above burst + rate*elapsed", local, el)
	}
	if local == 0 {
		t.Error("FailLocal admitted nothing in 300ms at a fallback rate of 100/s")
	}
	// The breaker opens after three failed calls in a row.
	for !l.Degraded() {
		if time.Now().After(deadline) {
			t.Fatal("Degraded() = false 10s after the store went down")
		}
		time.Sleep(time.Millisecond) // polling; the deadline bounds it
	}
	st := l.Stats()
	if st.Decisions[leasequota.ReasonFailOpen].Allowed == 0 || st.Decisions[leasequota.ReasonUnavailable].Denied == 0 || st.Decisions[leasequota.ReasonFallback].Allowed == 0 {
		t.Errorf("degraded decisions not counted: %+v", st)
	}

	store.SetUp()
	// Leasing resumes on its own: within two refresh intervals of the
	// first call that reaches the store; allow generous slack for a
	// loaded CI.
	back := time.Now()
	for tenant := range quotas {
		for {
			d := l.AllowN(ctx, tenant, 1)
			if d.Allowed && d.Mode == leasequota.FailDefault {
				break
			}
			if time.Since(back) > 5*time.Second {
				t.Fatalf("%s: no lease 5s after the store came back: %+v", tenant, d)
			}
			time.Sleep(time.Millisecond)
		}
	}
	t.Logf("leasing resumed %v after the store came back", time.Since(back))
	if l.Degraded() {
		t.Error("Degraded() = true after recovery")
	}
}
