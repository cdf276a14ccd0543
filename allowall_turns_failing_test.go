package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/internal/faultstore"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestAllowAllOutOfTurnsFailingTenantByItsMode: when an AllowAll has
// taken its 2k turns (other requests taking the tokens in between) and
// the tenant short again is one Redis is failing for, its lease spent,
// that tenant's failure mode decides, as AllowN's would (here FailOpen:
// admitted), not a plain exhausted denial. Driven by hand
// (WithManualSync) in a synctest bubble: each turn waits for a refill
// (WithMaxWait), and meanwhile a request takes the other tenant's token.
func TestAllowAllOutOfTurnsFailingTenantByItsMode(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		store := faultstore.New(memstore.New())
		l := newLimiter(t, store, leasequota.WithManualSync(), leasequota.WithMaxWait(10*time.Second),
			leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1000, Burst: 1000, MinLease: 1, MaxLease: 1,
				FailureMode: leasequota.FailOpen}))
		t.Cleanup(store.SetUp) // before Close
		// step runs the refills asked for and wakes their requests.
		step := func() {
			synctest.Wait()
			leasequota.SyncRefills(l, ctx)
			synctest.Wait()
			leasequota.SyncDeliver(l)
			synctest.Wait()
		}
		allow := func(tenant string) <-chan leasequota.Decision {
			c := make(chan leasequota.Decision, 1)
			go func() { c <- l.AllowN(ctx, tenant, 1) }()
			return c
		}
		// Each tenant leases its one token, spent.
		for _, tenant := range []string{"x", "y"} {
			c := allow(tenant)
			step()
			if d := <-c; !d.Allowed {
				t.Fatalf("%s: first request %+v", tenant, d)
			}
		}
		all := make(chan leasequota.Decision, 1)
		go func() { all <- l.AllowAll(ctx, 1, "x", "y") }()
		// Turns 1 to 3: x, y, x each wait for a refill, and a request
		// takes the other's token meanwhile (y holds none at turn 1).
		for turn, other := range []string{"", "x", "y"} {
			synctest.Wait()
			if other != "" {
				if d := l.AllowN(ctx, other, 1); !d.Allowed || d.Reason != leasequota.ReasonLeased {
					t.Fatalf("turn %d: the request taking %s's token: %+v", turn+1, other, d)
				}
			}
			step()
		}
		// Turn 4, y's: x's token is taken, then Redis goes down; x's and
		// y's refills fail. y is admitted by its mode (FailOpen).
		synctest.Wait()
		if d := l.AllowN(ctx, "x", 1); !d.Allowed || d.Reason != leasequota.ReasonLeased {
			t.Fatalf("turn 4: the request taking x's token: %+v", d)
		}
		store.SetDown(nil)
		thief := allow("x") // x's lease is spent: it asks for a refill
		step()
		if d := <-thief; d.Reason != leasequota.ReasonFailOpen {
			t.Fatalf("x's request during the outage: %+v, want admitted by FailOpen", d)
		}
		select {
		case d := <-all:
			// x, short again after 4 turns, its Redis failing: its mode
			// decides, and admits.
			if !d.Allowed || d.Reason != leasequota.ReasonFailOpen {
				t.Errorf("AllowAll(x, y), x short after 4 turns while Redis fails for it (FailOpen) = %+v; want admitted by its mode (%v)",
					d, leasequota.ReasonFailOpen)
			}
		default:
			t.Fatal("AllowAll did not return after turn 4")
		}
	})
}
