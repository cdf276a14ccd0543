package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestRefundOfAColdAllowAllIsAccounted: a refund of an AllowAll whose
// tenants were each admitted from their first lease (cold) puts every
// token somewhere the counts see: held, returned or forfeited, or, for
// a while, queued for return.
//
// The queue is why: a refunded token whose batch has left the ledger
// (here tiny's lease of one token, spent, which the next plan accounts
// for and drops) cannot go back into the lease, and Refund queues its
// return for the next round (Refund's doc; syncer RefundReturned). No
// count sees it until that round makes the return: Returned counts
// tokens Redis credited, Forfeited the rest. With the syncer's loop
// running, whether a plan of tiny came between the AllowAll's spend and
// the Refund was up to the scheduler (a plan at the same instant as the
// cold lease, before or after the spend), so an identity checked at once
// was off by one in about half the runs, and held again after the next
// round. The syncer is driven here so that each order is its own case.
func TestRefundOfAColdAllowAllIsAccounted(t *testing.T) {
	for _, c := range []struct {
		name string
		plan bool // a tick between the admission and the Refund
		// queued: refunded tokens left for the next round's return
		queued int64
	}{
		{"credited", false, 0},
		{"spent past", true, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { refundColdAllowAll(t, c.plan, c.queued) })
		})
	}
}

func refundColdAllowAll(t *testing.T, plan bool, queued int64) {
	ctx := context.Background()
	l := newLimiter(t, memstore.New(), leasequota.WithManualSync(), leasequota.WithQuotaFunc(func(tenant string) leasequota.Quota {
		if tenant == "tiny" {
			return leasequota.Quota{Rate: 0.5, Burst: 5}
		}
		return leasequota.Quota{Rate: 20, Burst: 40, MinLease: 5}
	}))
	sl := &spentLedger{l: l}
	d := sl.do(t, 1, 3, func() leasequota.Decision {
		done := make(chan leasequota.Decision, 1)
		go func() { done <- l.AllowAll(ctx, 1, "open", "local", "tiny") }()
		// The cold leases, as the loop would make them: the refills the
		// call's turns ask for, then the wake-up of the waiting turn.
		for range 10 {
			synctest.Wait()
			leasequota.SyncUrgent(l, ctx)
			leasequota.SyncRefills(l, ctx)
			synctest.Wait()
			leasequota.SyncDeliver(l)
			synctest.Wait()
			select {
			case d := <-done:
				return d
			default:
			}
		}
		t.Fatal("AllowAll did not end in 10 steps")
		return leasequota.Decision{}
	})
	if !d.Allowed || d.Reason != leasequota.ReasonColdStart && d.Reason != leasequota.ReasonLeased {
		t.Fatalf("AllowAll = %+v", d)
	}
	if got := sl.spent; got != 3 {
		t.Fatalf("spent %d from leases, want 3 (each tenant from its first lease)", got)
	}
	sl.check(t, "after AllowAll", 0)
	if plan {
		// The plan accounts for tiny's spend: its only batch is spent
		// and leaves the ledger.
		leasequota.SyncTick(l, ctx)
		sl.check(t, "after a tick", 0)
	}
	before := l.Stats()
	if err := l.Refund(&d, "open", "local", "tiny"); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().Refunded - before.Refunded; got != 3 {
		t.Fatalf("Refund refunded %d, want 3", got)
	}
	sl.check(t, "after Refund", queued)
	// The next round makes the queued return: now counted returned or
	// forfeited.
	leasequota.SyncTick(l, ctx)
	after := l.Stats()
	if got := after.Returned + after.Forfeited - before.Returned - before.Forfeited; got != queued {
		t.Errorf("the round after Refund returned %d + forfeited %d, want %d in all",
			after.Returned-before.Returned, after.Forfeited-before.Forfeited, queued)
	}
	sl.check(t, "after the next round", 0)
}

// spentLedger keeps what a test's own calls spent from leases: n tokens for
// each admission a call added under a reason that spends a lease's
// tokens (leased, cold_start, refilled). The test makes every decision
// itself, one at a time, so the Decisions counts' change across a call is
// that call's.
type spentLedger struct {
	l     *leasequota.Limiter
	spent int64
	calls int64 // decisions the calls should have counted
}

func leaseAdmits(s leasequota.Stats) (n int64) {
	for _, r := range []leasequota.Reason{leasequota.ReasonLeased, leasequota.ReasonColdStart, leasequota.ReasonRefilled} {
		n += s.Decisions[r].Allowed
	}
	return n
}

func decisionsOf(s leasequota.Stats) (n int64) {
	for _, o := range s.Decisions {
		n += o.Allowed + o.Denied
	}
	return n
}

// do runs f, which makes one decision call of n tokens per tenant over k
// tenants, and books what it spent and the decisions it should count. A
// decision call is no Refund: Refunded must not move (a denied AllowAll's
// give-back counted there, about once in twenty runs of this test, before
// Syncer.GiveBack).
func (sl *spentLedger) do(t *testing.T, n int64, k int, f func() leasequota.Decision) leasequota.Decision {
	t.Helper()
	before := sl.l.Stats()
	d := f()
	after := sl.l.Stats()
	sl.spent += n * (leaseAdmits(after) - leaseAdmits(before))
	if r := after.Refunded - before.Refunded; r != 0 {
		t.Errorf("%+v over %d tenants: Refunded +%d with no Refund called", d, k, r)
	}
	if d.Allowed {
		sl.calls += int64(k)
	} else {
		sl.calls++
	}
	if got, want := decisionsOf(after)-decisionsOf(before), map[bool]int64{true: int64(k), false: 1}[d.Allowed]; got != want {
		t.Errorf("%+v over %d tenants: decisions +%d, want +%d", d, k, got, want)
	}
	return d
}

// check checks the token identity the utilization gauge rests on: every
// token that came to the leases here (granted at once, reserved as it
// came due) or was refunded into them is spent, returned, forfeited or
// held now, but queued refunded tokens whose return waits for the next
// round (no count sees those yet).
func (sl *spentLedger) check(t *testing.T, when string, queued int64) {
	t.Helper()
	st := sl.l.Stats()
	in, returned, forfeited, held := leasequota.LeaseTokens(sl.l)
	if got, want := in+st.Refunded, sl.spent+returned+forfeited+held+queued; got != want {
		t.Errorf("%s: came in %d + refunded %d = %d, want spent %d + returned %d + forfeited %d + held %d + queued for return %d = %d (off by %d)",
			when, in, st.Refunded, got, sl.spent, returned, forfeited, held, queued, want, got-want)
	}
	if got := decisionsOf(st); got != sl.calls {
		t.Errorf("%s: decisions %d, want %d", when, got, sl.calls)
	}
}
