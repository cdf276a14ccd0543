package leasequota_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
)

// TestColdRequestInAnOutageByItsMode: while Redis is down (the circuit
// breaker open), a request of a tenant that holds no lease here is
// decided by its tenant's failure mode, as a request of a tenant whose
// own lease call failed is. A cold request was denied at once
// (cold_start) while the last urgent refill, another tenant's, had
// failed within the second: 3 of 5 new tenants of a FailOpen quota in a
// row were denied during an outage, and every one with
// WithColdStartWait(0).
func TestColdRequestInAnOutageByItsMode(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []leasequota.Option
	}{
		{"wait", nil},
		{"no-wait", []leasequota.Option{leasequota.WithColdStartWait(0)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store := faultySetup(t)
			opts := append([]leasequota.Option{leasequota.WithLogger(testLogger(t)),
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100, FailureMode: leasequota.FailOpen})}, tc.opts...)
			l := newLimiter(t, store, opts...)
			ctx := context.Background()
			store.SetDown(nil)
			// The breaker opens after a few failed calls: the warm-up's.
			deadline := time.Now().Add(10 * time.Second)
			for i := 0; !l.Degraded(); i++ {
				if time.Now().After(deadline) {
					t.Fatal("the circuit breaker did not open within 10 s of the store going down")
				}
				l.AllowN(ctx, fmt.Sprint("warm-up-", i), 1)
				time.Sleep(time.Millisecond) // polling; the deadline bounds it
			}
			for i := range 5 {
				if d := l.AllowN(ctx, fmt.Sprint("new-", i), 1); !d.Allowed || d.Reason != leasequota.ReasonFailOpen {
					t.Errorf("new tenant %d during an outage, FailOpen: allowed %v, %v; want admitted by its mode (%v)", i, d.Allowed, d.Reason, leasequota.ReasonFailOpen)
				}
			}
		})
	}
}
