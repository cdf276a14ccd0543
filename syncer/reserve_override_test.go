package syncer

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/lease/memstore"
	"github.com/leasequota/leasequota/quota"
)

// TestReservationUnderARaisedOverrideComesDueWhole: a reserving call
// planned under the quota known here (a rate of a million a second) that
// reaches Redis after an operator raised the rate to 1e12 (SetQuota's
// override, which the reply brings) is sized by Redis at the new rate:
// this instance's share (its demand) over the length the plan asked for,
// within the second ahead of Redis's clock. That length was cut only by
// the rate known here (reserveLength), so Redis reserved and debited more
// than reservation.left counts (an int32), and what did not fit never
// came due: tokens lost. The length is also cut by the demand the call
// reports, which bounds the pace Redis reserves at whatever its rate.
func TestReservationUnderARaisedOverrideComesDueWhole(t *testing.T) {
	clock := time.Unix(1_000_000, 0)
	store := memstore.New(memstore.WithClock(func() time.Time { return clock }))
	b, err := store.Instance("B", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	qOld := quota.Quota{Rate: 1e6, Burst: 1e8, MinLease: 1, MaxLease: 1e8, LeaseTTL: time.Second}
	old := lease.Limits{Rate: qOld.Rate, Burst: qOld.Burst}
	acq := func(r lease.Request) lease.Grant {
		t.Helper()
		res, err := b.AcquireMany(ctx, []lease.Request{r}, nil)
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		return res[0].Grant
	}
	const demand = 1e9 // tokens a second, a thousand times the rate known here
	acq(lease.Request{Tenant: "t", Limits: old, Want: qOld.Burst, Demand: demand})

	p := NewPlanner(Config{Interval: 100 * time.Millisecond, Reserve: time.Minute}, 1)
	s := scarceState(p, clock, demand)
	s.instances = 1
	clock = clock.Add(time.Second)
	a := p.Plan(s, qOld, clock, Input{Urgent: true, Need: 1, Missed: demand / 10})
	if a.Reserve <= 0 || a.Acquire <= 0 {
		t.Fatalf("plan of a starved tenant: %+v, want a reserving call", a)
	}

	// The operator raises the rate while the call is on its way; the
	// bucket's burst stays below what the call asks for, so it runs dry
	// and the call reserves.
	override := lease.Override{Rate: 1e12, Burst: 1e6}
	if _, err := b.SetOverride(ctx, "t", old, override); err != nil {
		t.Fatal(err)
	}
	g := acq(lease.Request{Tenant: "t", Limits: old, Want: a.Acquire, Demand: p.ReportedDemand(s, clock, a.Acquire), Reserve: a.Reserve})
	qNew := quota.FromOverride(*g.Override)
	qNew.LeaseTTL, qNew.MinLease, qNew.MaxLease = qOld.LeaseTTL, 1, qNew.Burst
	p.Granted(s, qNew, clock, a.Acquire, g, g.Immediate())
	p.Reserved(s, qNew, clock, clock, g)
	t.Logf("length %v asked for under a rate of %g; Redis reserved %d at %g a second under %g; %d to come here",
		a.Reserve, qOld.Rate, g.Reserved, g.Pace, override.Rate, s.Reserved())
	if g.Reserved <= 0 {
		t.Fatalf("Redis reserved nothing: %+v", g)
	}
	if got := s.Reserved(); got != g.Reserved {
		t.Errorf("Redis reserved (and debited) %d tokens, %d are to come here: %d lost", g.Reserved, got, g.Reserved-got)
	}
	if g.Reserved > math.MaxInt32/2 {
		t.Errorf("Redis reserved %d tokens, more than half an int32 (%d): a merge would not fit", g.Reserved, math.MaxInt32/2)
	}
}
