package leasequota_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// TestRetryAfterWaitsForTheTick: a client that obeys RetryAfter on a
// tenant whose global bucket is dry (Rate 10, Burst 10, spent) must not be
// sent back before a lease call for the tenant can have been made. The
// syncer makes a held-back tenant's call at the first tick (every quarter
// interval) at or after its hold ends, not at the hold's end itself: a
// RetryAfter to the hold's end sent the client back up to a quarter
// interval early, and each retry then was denied with RetryAfter 1 ms (the
// hold over), about 20 times in a row (a denial said 509 ms, the call came
// 22 ms after that). Here a retry that finds no lease call made since the
// denial it obeyed is wasted. Two in a row are allowed, not three: with
// ticks on a fixed grid and the clock exact, the tick and the client may
// meet at the same instant (one); and a denial made while the tenant's
// lease call is in flight tells a RetryAfter from the state before its
// reply, which may then hold the tenant's calls longer (one more, just
// before it). The second came with the first about once in 600 seeds
// (WithSeed): a denial at 650 ms told 50 ms, for the one token the bucket
// would have by then, while the reply of the round's call at 650 ms held
// the next call until 1.175 s, to lease a batch; the retry at 700 ms was
// told 475 ms and met that tick at 1.175 s (beside other tests under the
// race detector, 1 run of this test in 6 failed so at 52be46c).
func TestRetryAfterWaitsForTheTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
		ctx := context.Background()
		start := time.Now()
		var denials, wasted, inRow, worst int
		lastCalls := int64(-1) // lease calls when the last denial was made; -1 after an admission
		for time.Since(start) < 5*time.Second {
			calls := l.Stats().Calls
			d := l.AllowN(ctx, "a", 1)
			if d.Allowed {
				lastCalls, inRow = -1, 0
				continue
			}
			denials++
			if lastCalls >= 0 && calls == lastCalls {
				wasted++
				inRow++
				if inRow > worst {
					worst = inRow
					t.Logf("%v: retry %d in a row with no lease call since the denial it obeyed (RetryAfter now %v)", time.Since(start), inRow, d.RetryAfter)
				}
			} else {
				inRow = 0
			}
			lastCalls = calls
			time.Sleep(d.RetryAfter)
		}
		t.Logf("%d denials, %d of them retries with no lease call since the denial obeyed, at most %d in a row", denials, wasted, worst)
		if worst > 2 {
			t.Errorf("a client obeying RetryAfter came back %d times in a row before a lease call had been made, want at most 2", worst)
		}
	})
}

// TestWaitingRequestDoesNotWaitForTheTick: the tick rounding of
// TestRetryAfterWaitsForTheTick is for clients that come back with a
// request of their own. A request that waits here (WaitN) makes its own
// lease call once the hold ends, so it must not sleep on to the tick as
// well: rounded there too, every WaitN on a dry tenant slept up to a
// quarter interval past the hold's end, most of them admitted no earlier
// than the RetryAfter a denial told a client at the same moment.
func TestWaitingRequestDoesNotWaitForTheTick(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		l := newLimiter(t, memstore.New(), leasequota.WithDefaultQuota(leasequota.Quota{Rate: 10, Burst: 10}))
		ctx := context.Background()
		var earlier, cycles int
		var waited, told time.Duration
		for cycles < 20 {
			d := l.AllowN(ctx, "a", 1)
			if d.Allowed {
				continue // draining the burst, or a token that came
			}
			cycles++
			start := time.Now()
			if _, err := l.WaitN(ctx, "a", 1); err != nil {
				t.Fatal(err)
			}
			took := time.Since(start)
			if took < d.RetryAfter {
				earlier++
			}
			waited += took
			told += d.RetryAfter
		}
		t.Logf("%d of %d waits ended before the RetryAfter told a client at their start; waited %v in all, told %v", earlier, cycles, waited, told)
		// Rounded to the tick, 4-5 of 20 ended earlier (those whose own
		// call went before the hold: a reserved token, a plan in between);
		// counted to the hold's end, 11-13.
		if earlier < 8 {
			t.Errorf("%d of %d WaitN on a dry tenant ended before the RetryAfter of a denial at their start, want at least 8: waiting requests sleep to the tick", earlier, cycles)
		}
	})
}
