package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// reserveRun drives one instance's planner (A, reservations of 4 s) on a
// memstore tenant shared with a second instance (B) that asks for the
// rate's worth every interval, for run; with refunds, every plan of A's
// says tokens refunded here went back to the bucket (Input.Refunded). It
// returns A's reserving calls, the tokens A reserved, and the most A had
// still to come at any plan.
func reserveRun(t *testing.T, refunds bool, run time.Duration) (calls int, reserved, backlog int64) {
	t.Helper()
	clock := time.Unix(1_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return clock }))
	a, err := store.Instance("A", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	b, err := store.Instance("B", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	q := quota.Quota{Rate: 100, Burst: 100, LeaseTTL: time.Second, MaxLease: 100, MinLease: 1}
	lim := lease.Limits{Rate: q.Rate, Burst: q.Burst}
	ctx := context.Background()
	acq := func(in lease.Store, r lease.Request) lease.Grant {
		t.Helper()
		res, err := in.AcquireMany(ctx, []lease.Request{r}, nil)
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		return res[0].Grant
	}
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: 4 * time.Second}, 1)
	st := scarceState(p, clock, 200)
	start := clock
	for i := 0; clock.Before(start.Add(run)); i++ {
		if i%4 == 0 {
			acq(b, lease.Request{Tenant: "t", Limits: lim, Want: 10, Demand: 200})
		}
		act := p.Plan(st, q, clock, Input{Level: 0, Need: 1, Missed: 5, Urgent: true, Refunded: refunds})
		p.Expired(st, act.Expire, 0)
		st.ledger.Sync(0) // requests spend everything
		backlog = max(backlog, st.Reserved())
		if act.Calls() {
			g := acq(a, lease.Request{Tenant: "t", Limits: lim, Want: act.Acquire, Demand: p.ReportedDemand(st, clock, act.Acquire), Reserve: act.Reserve})
			p.Granted(st, q, clock, act.Acquire, g, g.Immediate())
			p.Reserved(st, q, clock, clock, g)
			if g.Reserved > 0 {
				calls++
				reserved += g.Reserved
			}
		}
		clock = clock.Add(25 * time.Millisecond)
	}
	return calls, reserved, backlog
}

// TestRefundDoesNotStackReservations: a refund's plan goes past the hold
// of a reservation's renewal (a refunded token went back to the bucket,
// and the call may lease it again), but it does not reserve again while
// reserved tokens are still to come: their renewal comes when they are
// about to run out. One of two instances on a starved tenant (Rate 100)
// reserved at every refund, each reservation merged behind the tokens
// still to come at its share: it took most of the bucket's refill ahead
// of the other instance, and the tokens it had still to come grew with
// the run.
func TestRefundDoesNotStackReservations(t *testing.T) {
	const run = 20 * time.Second
	plainCalls, plainReserved, plainBacklog := reserveRun(t, false, run)
	calls, reserved, backlog := reserveRun(t, true, run)
	t.Logf("without refunds: %d reserving calls, %d reserved, at most %d to come; refunds at every plan: %d, %d, %d",
		plainCalls, plainReserved, plainBacklog, calls, reserved, backlog)
	if float64(reserved) > 1.5*float64(plainReserved) || float64(backlog) > 1.5*float64(plainBacklog) {
		t.Errorf("refunds at every plan: %d tokens reserved, at most %d to come; without them %d and %d",
			reserved, backlog, plainReserved, plainBacklog)
	}
}
