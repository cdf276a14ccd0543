package leasequota_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestSparseTenantAdmitted: a tenant whose requests on an instance come
// further apart than its lease lifetime finds its lease lapsed at each
// request (its tokens expired unspent, taken back by the syncer), and
// its global bucket full. Such a request waits for a lease as a tenant's
// first request does (WithColdStartWait), and is admitted. Denied at once
// as a spent lease's miss is, every request after the first was denied
// (a fleet simulation of 5 instances sharing tenants of Rate 100 offered
// a request a second: 99.9 % denied), while the lease each denial fetched
// expired unspent before the next request. A lease spent by requests is
// still a miss that AllowN denies at once without WithMaxWait.
func TestSparseTenantAdmitted(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, memstore.New(),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 100, Burst: 100}))
		ctx := context.Background()
		gap := 3 * leasequota.DefaultLeaseTTL
		for i := range 6 {
			d := l.AllowN(ctx, "sparse", 1)
			if !d.Allowed {
				t.Errorf("request %d, %v after the one before (lease lifetime %v), of a tenant with its bucket full: denied, %v", i, gap, leasequota.DefaultLeaseTTL, d.Reason)
			} else if i > 0 && d.Reason != leasequota.ReasonColdStart {
				t.Errorf("request %d after its lease lapsed: admitted with %v, want %v (it waited for a lease)", i, d.Reason, leasequota.ReasonColdStart)
			}
			time.Sleep(gap)
		}

		// A lease spent by requests: the next miss is denied at once.
		for {
			d := l.AllowN(ctx, "spent", 1)
			if d.Reason == leasequota.ReasonColdStart {
				continue // its first request waited for its first lease
			}
			start := time.Now()
			if !d.Allowed {
				if d.Reason != leasequota.ReasonExhausted {
					t.Errorf("a miss on a spent lease: %v, want %v", d.Reason, leasequota.ReasonExhausted)
				}
				if waited := time.Since(start); waited != 0 {
					t.Errorf("a miss on a spent lease waited %v, want a denial at once", waited)
				}
				break
			}
		}
	})
}

// TestLowRateTenantAdmitted: 5 limiters share a tenant of Rate 20 and
// Burst 10 (leases of 1 to 5 tokens, 1 s lifetimes), each offered a
// token a second, a quarter of the rate, in requests of 1 token (then of
// 1 or 2) at exponential gaps, for 120 s on the bubble's clock. Its
// instances' leases lapse between requests or are sized at nothing
// (Planner.target) while its demand is low; a request then waits for a
// lease as a first one does (syncer.Tenant.Cold). Denied at once, as a
// miss on a spent lease is, it admitted 83.2 % of what it asked for with
// 1-token requests and 64.0 % with 1 or 2 tokens; with cold waits, 96.0 %
// and 89.6 %; and since a tenant whose requests come a lease's usable
// lifetime apart keeps no lease (Planner.sparse), 98.1-98.3 % and
// 96.5-96.7 % in three runs (the bubble's goroutines interleave
// differently run to run). What is denied is a request close behind
// another that spent the lease's last token, before the next plan tops
// it up: a lease spent, which AllowN denies at once without WithMaxWait.
// The syncer's simulation, which does not model waiting requests, kept
// the scenario as a known bug (TestKnownBugLowRateTenantsDenied, 56 %
// admitted there), skipped in the ordinary test run; it went when this
// test took its place.
func TestLowRateTenantAdmitted(t *testing.T) {
	for _, tc := range []struct {
		maxN int64
		want float64
	}{{1, 0.95}, {2, 0.93}} {
		synctest.Test(t, func(t *testing.T) {
			store := memstore.New()
			q := leasequota.Quota{Rate: 20, Burst: 10, MinLease: 1, MaxLease: 5, LeaseTTL: time.Second}
			var lims []*leasequota.Limiter
			for i := range 5 {
				l := newLimiter(t, store, leasequota.WithDefaultQuota(q),
					leasequota.WithInstanceID(fmt.Sprint("i", i)))
				lims = append(lims, l)
			}
			var asked, admitted atomic.Int64
			var wg sync.WaitGroup
			for i, l := range lims {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(i), 7))
					end := time.Now().Add(120 * time.Second)
					for time.Now().Before(end) {
						n := 1 + rng.Int64N(tc.maxN)
						time.Sleep(time.Duration(rng.ExpFloat64() * float64(n) * float64(time.Second)))
						asked.Add(n)
						if l.AllowN(context.Background(), "light", n).Allowed {
							admitted.Add(n)
						}
					}
				})
			}
			wg.Wait()
			got := float64(admitted.Load()) / float64(asked.Load())
			t.Logf("requests of 1 to %d tokens: admitted %d of %d (%.1f%%)", tc.maxN, admitted.Load(), asked.Load(), 100*got)
			if got < tc.want {
				t.Errorf("a tenant at a quarter of its rate, requests of 1 to %d tokens: admitted %.1f%% of what it asked for, want at least %.0f%%", tc.maxN, 100*got, 100*tc.want)
			}
		})
	}
}
