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

// TestWaitNWakesWithinAnIntervalOfRecovery: a WaitN waiting through an
// outage (FailClosed, its lease spent) is admitted within about a refresh
// interval of Redis answering again, as WaitN's doc says, wherever in the
// circuit breaker's cycle Redis comes back. The breaker lets a probe
// through an interval after it opened, but the tenant's calls it refused
// backed off from the refusal, and the waiter slept to the tick after the
// backoff: the probes came 1.25 to 2 intervals apart, and the waiter woke
// up to 191 ms after Redis came back (35 of 80 heal times over 100 ms),
// at R = 100 ms.
func TestWaitNWakesWithinAnIntervalOfRecovery(t *testing.T) {
	const r = leasequota.DefaultRefreshInterval
	var wakes []time.Duration
	// Heal times 7 ms apart over 2.8 intervals: every phase of the
	// breaker's cycle, whose probes come every interval or more.
	for k := range 40 {
		synctest.Test(t, func(t *testing.T) {
			store := faultstore.New(memstore.New())
			l := newLimiter(t, store,
				leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10, FailureMode: leasequota.FailClosed}))
			ctx := context.Background()
			for l.AllowN(ctx, "a", 1).Allowed {
			}
			store.SetDown(nil)
			admitted := make(chan time.Time, 1)
			go func() {
				d, err := l.WaitN(ctx, "a", 1)
				if err != nil || !d.Allowed {
					t.Errorf("WaitN: %+v, %v", d, err)
				}
				admitted <- time.Now()
			}()
			time.Sleep(time.Second + time.Duration(k)*7*time.Millisecond)
			if !l.Degraded() {
				t.Fatal("not degraded a second into the outage")
			}
			healed := time.Now()
			store.SetUp()
			wakes = append(wakes, (<-admitted).Sub(healed))
		})
	}
	// Judged outside the bubbles: a failed one ends the test (FailNow).
	late, worst := 0, time.Duration(0)
	for _, w := range wakes {
		worst = max(worst, w)
		if w > r+r/10 {
			late++
		}
	}
	if late > 0 {
		t.Errorf("%d of %d WaitNs admitted more than %v after Redis answered again (the latest %v), want within about %v", late, len(wakes), r+r/10, worst, r)
	}
	t.Logf("latest admission after Redis answered: %v", worst)
}
