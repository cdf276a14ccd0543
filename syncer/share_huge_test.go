package syncer

import (
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestHugeShareComesDueWhole: a rate share whose window holds more tokens
// than an int32 counts (reservation.left; a share of 1e9 a second over
// 8 s) comes due over its whole window, at its pace. Its count was cut
// to 2^31-1, so its accrual stopped after 2.1 s and the rest of the
// share, withheld from the bucket by Redis, came due nowhere until the
// renewal.
func TestHugeShareComesDueWhole(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	lim := quota.Quota{Rate: 1e10, Burst: 1 << 40, MinLease: 1, MaxLease: 1 << 39, LeaseTTL: time.Second}
	p := NewPlanner(Config{Interval: 100 * time.Millisecond, SharePeriod: 10 * time.Second}, 1)
	st := scarceState(p, now, 2e10)
	a := p.Plan(st, lim, now, Input{Urgent: true, Need: 1, Missed: 1e9})
	if a.Share != lease.ShareAsk {
		t.Fatalf("plan %+v, want a share ask", a)
	}
	const rate = 1e9
	g := grantShare(rate, now, now.Add(8*time.Second))
	p.Granted(st, lim, now, a.Acquire, g, 0)
	p.Shared(st, lim, a.Share, now, now, g)
	var dripped, early int64
	var last time.Time
	for at := now; at.Before(now.Add(7900 * time.Millisecond)); at = at.Add(100 * time.Millisecond) {
		b := p.Plan(st, lim, at, Input{Level: 0})
		st.ledger.Sync(0)
		if b.Drip > 0 {
			dripped += b.Drip
			last = at
		}
		// Never ahead of the share's accrual in Redis's clock.
		if accrued := int64(at.Sub(now).Seconds() * rate); dripped > accrued {
			early = max(early, dripped-accrued)
		}
	}
	want := int64(7.8 * rate * (1 - shareDrift))
	t.Logf("a share of %g a second over 8 s: %d tokens came due by 7.8 s, the last at %v", rate, dripped, last.Sub(now))
	if dripped < want {
		t.Errorf("a share of %g a second: %d tokens came due by 7.8 s, want at least %d", rate, dripped, want)
	}
	if early > 0 {
		t.Errorf("%d tokens came due before the share accrued them", early)
	}
}
