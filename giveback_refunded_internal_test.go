package leasequota

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"

	"github.com/leasequota/leasequota/lease/memstore"
)

// TestGiveBackIsNotARefund: a multi-tenant decision that ends denied
// gives its tenants' tokens back (giveBack); when it cannot put them back
// into the lease (a plan ran since the spend, the oldest grant changed,
// a drain began) they go through Refund's path, to Redis or forfeited.
// No Refund was called: Stats.Refunded, "tokens given back by Refund",
// counted them, and a denied AllowAll read as a refund (the accounting
// identity test saw Refunded +2 on a denied AllowAll of three tenants,
// about once in twenty runs, when a round planned a tenant between the
// spend and the give-back). Here the give-back of a token whose grant is
// unknown (a rate share's), with a plan since the spend, as that race
// leaves it.
func TestGiveBackIsNotARefund(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l, err := NewWithStore(memstore.New(), WithDefaultQuota(Quota{Rate: 100, Burst: 100}),
			WithLogger(slog.New(slog.DiscardHandler)))
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close(context.Background())
		if !l.Allow("a") {
			t.Fatal("first request denied")
		}
		synctest.Wait()
		e := l.sync.Tenant("a")
		plans, clock := l.sync.Plans(), l.sync.Clock()
		if ok, _ := e.Spend(1); !ok {
			t.Fatal("spend of a leased token failed")
		}
		l.sync.Uncount(e)
		before := l.Stats()
		l.giveBack(e, 1, 0, clock, plans-1) // a plan ran since the spend
		after := l.Stats()
		if got := after.Refunded - before.Refunded; got != 0 {
			t.Errorf("a give-back, no Refund called: Refunded +%d, want +0", got)
		}
		if got := after.Forfeited - before.Forfeited; got != 1 {
			t.Errorf("a give-back of a token of an unknown grant: Forfeited +%d, want +1", got)
		}
	})
}
