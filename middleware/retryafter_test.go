package middleware_test

import (
	"math"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/middleware"
)

// TestRetryAfterFollowsDecision checks that Retry-After and RateLimit's t
// are the decision's RetryAfter rounded up to whole seconds, in each case
// that carries them: a 429 for an exhausted quota, a 429 from the local
// fallback bucket of a Redis outage (FailLocal), and the 503 of an outage
// in FailClosed mode.
func TestRetryAfterFollowsDecision(t *testing.T) {
	leakCheck(t)
	// A slow refill, so that waits are seconds long and rounding shows.
	q := leasequota.Quota{Rate: 0.25, Burst: 1}
	want := policy{"default", 1, 4}
	// The refresh interval bounds a failing tenant's backoff: 3 s lets it
	// pass a second (and asks leases of twice that lifetime).
	slowRetry := []leasequota.Option{leasequota.WithRefreshInterval(3 * time.Second), leasequota.WithLeaseTTL(6 * time.Second)}
	// firstDenial sends requests until one is refused and returns it with
	// the decision the hook saw for it. A cold-start denial (the first
	// lease took longer than the cold-start wait, as on a loaded machine)
	// is not the refusal a subtest is after: it sends another.
	firstDenial := func(t *testing.T, srv func() result, hook *hookLog) (result, leasequota.Decision) {
		t.Helper()
		for i := 0; i < 20; i++ {
			res := srv()
			if d := hook.last(t).d; !d.Allowed && d.Reason != leasequota.ReasonColdStart {
				return res, d
			}
		}
		t.Fatal("no refusal in 20 requests")
		return result{}, leasequota.Decision{}
	}
	// longDenial is firstDenial for a limiter on a dead Redis, whose
	// first denials' RetryAfter (the tenant's next lease call, 10 ms of
	// backoff after its first failure) rounds to 1 s, as a constant 1
	// would: it sends requests until the backoff, doubling with each
	// failed call up to the refresh interval, has grown a RetryAfter
	// above a second (about 3 s), which a constant 1 cannot pass for.
	longDenial := func(t *testing.T, srv func() result, hook *hookLog) (result, leasequota.Decision) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			res := srv()
			if d := hook.last(t).d; !d.Allowed && d.Reason != leasequota.ReasonColdStart &&
				d.RetryAfter > time.Second {
				return res, d
			}
			if time.Now().After(deadline) {
				t.Fatalf("no denial with a RetryAfter above 1 s in 20 s; the last: %+v", hook.last(t).d)
			}
			time.Sleep(pollEvery) // the backoff grows with the failed calls' time
		}
	}
	retryAfter := func(t *testing.T, res result) int64 {
		t.Helper()
		ra, err := strconv.ParseInt(res.header.Get("Retry-After"), 10, 64)
		if err != nil {
			t.Fatalf("Retry-After %q: %v", res.header.Get("Retry-After"), err)
		}
		return ra
	}
	t.Run("exhausted", func(t *testing.T) {
		l := newLimiter(t, leasequota.WithDefaultQuota(q))
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithMaxWait(0))
		res, d := firstDenial(t, func() result { return get(t, srv) }, &hook)
		if d.Reason != leasequota.ReasonExhausted {
			t.Fatalf("reason %v, want exhausted", d.Reason)
		}
		ra := check429(t, res, want) // also: RateLimit t == Retry-After
		if wantRA := ceilSeconds(d.RetryAfter); ra != wantRA {
			t.Fatalf("Retry-After %d for a RetryAfter of %v, want %d", ra, d.RetryAfter, wantRA)
		}
		t.Logf("RetryAfter %v: Retry-After %d", d.RetryAfter, ra)
	})
	t.Run("fallback", func(t *testing.T) {
		l := deadLimiter(t, q, leasequota.FailLocal, slowRetry...)
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithMaxWait(0))
		res, d := longDenial(t, func() result { return get(t, srv) }, &hook)
		if d.Reason != leasequota.ReasonFallback || d.RetryAfter <= 0 {
			t.Fatalf("decision %+v, want a fallback denial with a RetryAfter", d)
		}
		ra := check429(t, res, want)
		if wantRA := ceilSeconds(d.RetryAfter); ra != wantRA {
			t.Fatalf("Retry-After %d for a RetryAfter of %v, want %d", ra, d.RetryAfter, wantRA)
		}
		t.Logf("RetryAfter %v: Retry-After %d", d.RetryAfter, ra)
	})
	t.Run("unavailable", func(t *testing.T) {
		l := deadLimiter(t, q, leasequota.FailClosed, slowRetry...)
		var hook hookLog
		srv := serve(t, l, hook.option(), middleware.WithMaxWait(0))
		res, d := longDenial(t, func() result { return get(t, srv) }, &hook)
		if d.Reason != leasequota.ReasonUnavailable || d.RetryAfter <= 0 {
			t.Fatalf("decision %+v, want unavailable with a RetryAfter", d)
		}
		checkProblem(t, res, http.StatusServiceUnavailable, middleware.ProblemTemporaryReducedCapacity)
		ra := retryAfter(t, res)
		if wantRA := ceilSeconds(d.RetryAfter); ra != wantRA {
			t.Fatalf("Retry-After %d for a RetryAfter of %v, want %d", ra, d.RetryAfter, wantRA)
		}
		t.Logf("RetryAfter %v: Retry-After %d", d.RetryAfter, ra)
		if v := res.header.Values("RateLimit"); len(v) != 0 {
			t.Fatalf("RateLimit %q on a 503: nothing is known of the remaining quota", v)
		}
	})
}

// ceilSeconds is d rounded up to whole seconds, at least 1: what the
// fields must carry, computed here and not by the middleware's own
// RetrySeconds, so that a rounding bug there cannot pass for the
// expected figure (with RetrySeconds truncating, a RetryAfter of 3.9996 s
// gave Retry-After 3 and this test passed).
func ceilSeconds(d time.Duration) int64 { return max(1, int64(math.Ceil(d.Seconds()))) }
