package leasequota_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestAllowAllGivesBackToRetrackedTenant: when a tenant of an AllowAll
// is evicted between the call's lookup and its spend, its turn re-tracks
// it and spends from the new entry; when another tenant is short then,
// the turn's tokens go back into the new entry's lease, as a give-back
// does, and the denied call has spent nothing. AllowAll kept the evicted
// entry and gave the tokens back through it: to Redis, as a refund
// (Stats.Refunded), the new lease a token short, and the admission's
// count taken off the evicted tenants' total.
func TestAllowAllGivesBackToRetrackedTenant(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := memstore.New()
		var stall atomic.Bool // b's quota is resolved slowly, once
		quota := func(tenant string) leasequota.Quota {
			if tenant == "b" {
				if stall.Swap(false) {
					time.Sleep(5 * time.Second) // a goes idle and is evicted
				}
				return leasequota.Quota{Rate: 0.001, Burst: 1}
			}
			return leasequota.Quota{Rate: 1, Burst: 100, MinLease: 10, MaxLease: 10}
		}
		l := newLimiter(t, store, leasequota.WithQuotaFunc(quota), leasequota.WithIdleTimeout(time.Second))
		// Another instance spends b's one token: b's bucket is dry.
		other := newLimiter(t, store, leasequota.WithQuotaFunc(quota))
		if !other.Allow("b") {
			t.Fatal("b's first token denied")
		}
		if !l.Allow("a") {
			t.Fatal("a's first request denied")
		}
		stall.Store(true)
		d := l.AllowAll(ctx, 1, "a", "b")
		if d.Allowed || d.Tenant != "b" {
			t.Fatalf("AllowAll(a, b), b's bucket dry = %+v, want denied by b", d)
		}
		if st := l.Stats(); st.Evicted == 0 {
			t.Fatalf("a was not evicted during the call: %+v", st)
		}
		synctest.Wait()
		info, ok := l.Tenant("a")
		st := l.Stats()
		t.Logf("a after the denial: %+v; stats %+v", info, st)
		if st.Refunded != 0 {
			t.Errorf("a denied AllowAll refunded %d tokens: its turn's token of a's new lease went back through the evicted entry", st.Refunded)
		}
		// The token goes back into a's new lease. A plan that holds a's
		// lock at that moment and has accounted for the spend leaves the
		// lease a token more than its ledger, which the next plan
		// forfeits (Syncer.CreditAt says why; about twice in 3,000 runs
		// under the race detector): the token is then counted forfeited,
		// never returned to Redis through the evicted entry.
		if !ok || info.Tokens+st.Forfeited != 10 {
			t.Errorf("a holds %d tokens after the denied call (tracked %v), %d forfeited; want its whole lease, 10, in both", info.Tokens, ok, st.Forfeited)
		}
	})
}
