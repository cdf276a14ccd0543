package syncer

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/leasequota/leasequota/internal/monoclock"
	"github.com/leasequota/leasequota/internal/redisserver"
	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
	"pgregory.net/rapid"
)

// grantRanAt is a grant whose call Redis ran at ran (unix nanoseconds on
// its clock), with the bucket's time wait ahead of that clock.
func grantRanAt(ran int64, wait time.Duration) lease.Grant {
	return lease.Grant{ServerTime: time.UnixMicro(ran/1000 + wait.Microseconds()), Wait: wait}
}

// TestServerClockNeverDatesAGrantAfterItsRun: whatever the calls' waits
// before and after Redis ran them, and a server clock at any offset that
// drifts from the limiter's by up to maxClockDrift, a grant is dated
// within its call's [plan, arrival] and no later than Redis ran it, in
// the limiter's clock: the batch's stamp the window bound needs (Ledger).
// A server clock stepped back changes none of that; one stepped forward
// dates a grant later than its run by at most the steps so far.
func TestServerClockNeverDatesAGrantAfterItsRun(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var c serverClock
		offset := rapid.Int64Range(-int64(time.Hour), int64(time.Hour)).Draw(t, "offset")
		drift := rapid.Float64Range(-maxClockDrift, maxClockDrift).Draw(t, "drift")
		steps := rapid.Bool().Draw(t, "steps")
		start := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano()
		local := start
		var forward int64 // the steps forward so far
		serverAt := func(d int64) int64 { return d + offset + int64(float64(d-start)*drift) }
		for i := range rapid.IntRange(1, 40).Draw(t, "calls") {
			if steps {
				step := rapid.Int64Range(-int64(time.Second), int64(time.Second)).Draw(t, "step")
				offset += step
				forward += max(step, 0)
			}
			local += rapid.Int64Range(0, int64(10*time.Second)).Draw(t, "gap")
			planned := local
			ran := planned + rapid.Int64Range(0, int64(2*time.Second)).Draw(t, "queued")
			arrived := ran + rapid.Int64Range(0, int64(time.Second)).Draw(t, "reply")
			wait := time.Duration(rapid.Int64Range(0, 1000).Draw(t, "wait")) * time.Microsecond
			// The server's time is read in whole microseconds, rounded
			// down: the run is dated from the start of its microsecond.
			run := serverAt(ran)
			run -= run % 1000
			got := c.debited(planned, arrived, grantRanAt(run, wait))
			if got < planned || got > arrived {
				t.Fatalf("call %d: dated %d, outside its call [%d, %d]", i, got-start, planned-start, arrived-start)
			}
			if got > ran+forward {
				t.Fatalf("call %d: dated %v after its plan, Redis ran it %v after", i, time.Duration(got-planned), time.Duration(ran-planned))
			}
			local = arrived
		}
	})
}

// TestServerClockDatesAQueuedCallAtItsRun: after a call answered at once,
// a call that waited a second in Redis's queue is dated when it ran, not
// at its plan (within the first call's round trip and the drift allowed
// since); a grant without a server time, or a clock that stepped forward
// by more than a call's round trip, is dated no later than its run.
func TestServerClockDatesAQueuedCallAtItsRun(t *testing.T) {
	var c serverClock
	const offset = int64(3 * time.Hour) // the server's clock, ahead
	at := time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC).UnixNano()
	rtt := int64(200 * time.Microsecond)
	if got := c.debited(at, at+rtt, grantRanAt(at+rtt/2+offset, 0)); got != at {
		t.Fatalf("the first call dated %v after its plan, want at its plan: nothing is known of the clock yet", time.Duration(got-at))
	}
	planned := at + int64(5*time.Second)
	ran := planned + int64(time.Second)
	got := c.debited(planned, ran+rtt, grantRanAt(ran+offset, 0))
	slack := rtt/2 + int64(time.Microsecond) + int64(math.Ceil(float64(ran+rtt-at)*maxClockDrift)) // TIME's microsecond, the drift
	if got > ran || got < ran-slack {
		t.Fatalf("a call queued 1 s dated %v after its plan, want %v less at most %v", time.Duration(got-planned), time.Duration(ran-planned), time.Duration(slack))
	}
	if got := c.debited(planned, ran+rtt, lease.Grant{}); got != planned {
		t.Fatalf("a grant without a server time dated %v after its plan, want at its plan", time.Duration(got-planned))
	}
	// The server's clock steps 10 s forward: the call's own bounds show
	// it, and its run is dated within its own round trip.
	planned += int64(10 * time.Second)
	ran = planned + rtt/2
	step := int64(10 * time.Second)
	if got := c.debited(planned, planned+rtt, grantRanAt(ran+offset+step, 0)); got > ran || got < planned {
		t.Fatalf("after a step forward, a call dated %v after its plan, Redis ran it %v after", time.Duration(got-planned), time.Duration(ran-planned))
	}
}

// TestQueuedCallsBatchLivesFromItsRun, on a real Redis whose commands a
// CLIENT PAUSE holds for 500 ms: a lease call planned during the pause
// runs after it, and its batch is stamped when it ran (within the round
// trip of a call answered before, and a millisecond of the stamp's
// rounding), not at its plan, so its tokens live their LeaseTTL from the
// debit. Stamped at the plan, as before, the pause was taken from their
// life.
func TestQueuedCallsBatchLivesFromItsRun(t *testing.T) {
	srv := redisserver.StartServer(t)
	rdb, pauser := srv.Client(), srv.Client()
	t.Cleanup(func() { rdb.Close(); pauser.Close() })
	c, err := lease.NewClient(rdb, redisserver.Prefix(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	now := monoclock.New(time.Now())
	s := New(c, Options{Planner: NewPlanner(Config{}, 1), CallTimeout: 10 * time.Second, Now: now})
	t.Cleanup(s.Close)
	lim := quota.Quota{Rate: 100, Burst: 1000, MinLease: 1, MaxLease: 100, LeaseTTL: 10 * time.Second}
	refill := func(name string) (tn *Tenant, asked, answered time.Time) {
		tn, err := s.Track(name, lim)
		if err != nil {
			t.Fatal(err)
		}
		asked = now()
		select {
		case r := <-s.Refill(ctx, tn, 10):
			if r.Err != nil {
				t.Fatalf("refill of %s: %v", name, r.Err)
			}
		case <-ctx.Done():
			t.Fatalf("refill of %s: no answer", name)
		}
		return tn, asked, now()
	}
	// Calls answered at once bound the server's clock; the first of a
	// new server loads the script.
	rtt := time.Duration(1<<63 - 1)
	began := now()
	for i := range 5 {
		_, asked, answered := refill("quiet" + string(rune('a'+i)))
		rtt = min(rtt, answered.Sub(asked))
	}
	const pause = 500 * time.Millisecond
	paused := now()
	if err := pauser.Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	tn, asked, answered := refill("queued")
	tn.mu.Lock()
	expiry, ok := tn.st().ledger.NextExpiry(lim.LeaseTTL)
	tn.mu.Unlock()
	if !ok {
		t.Fatal("no batch held after the refill")
	}
	stamp := expiry.Add(-lim.LeaseTTL)
	// Redis ran the call after the pause, which began after it was asked
	// for; the reply arrived no later than the refill returned.
	// The bound on the clocks is as loose as the fastest quiet call's
	// round trip, and grows by maxClockDrift for the time since; the
	// stamp is rounded down to the millisecond.
	ranAfter := paused.Add(pause)
	drift := time.Duration(float64(answered.Sub(began))*maxClockDrift) + time.Microsecond
	earliest := ranAfter.Add(-rtt - drift - time.Millisecond)
	t.Logf("paused %v, the call took %v; the batch is stamped %v after the pause began (the fastest quiet call took %v)", pause, answered.Sub(asked), stamp.Sub(paused), rtt)
	if stamp.Before(earliest) {
		t.Fatalf("the batch is stamped %v after the pause began, want at least %v: the pause ended %v after it began, less the quiet calls' round trip %v and a drift of %v",
			stamp.Sub(paused), earliest.Sub(paused), pause, rtt, drift)
	}
	if stamp.After(answered) {
		t.Fatalf("the batch is stamped %v after the pause began, after its reply arrived (%v)", stamp.Sub(paused), answered.Sub(paused))
	}
}
