package grpcquota_test

import (
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/grpcquota"
)

// TestRetryInfoFollowsDecision checks that the RetryInfo of a refusal is
// the decision's RetryAfter (rounded up to the millisecond): for an
// exhausted quota, and for a Redis outage in FailClosed mode.
func TestRetryInfoFollowsDecision(t *testing.T) {
	leakCheck(t)
	q := leasequota.Quota{Rate: 0.25, Burst: 1}
	retryInfo := func(t *testing.T, err error) time.Duration {
		t.Helper()
		for _, d := range status.Convert(err).Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				return ri.GetRetryDelay().AsDuration()
			}
		}
		t.Fatalf("%v: no RetryInfo", err)
		return 0
	}
	roundUp := func(d time.Duration) time.Duration {
		return max((d + time.Millisecond - 1).Truncate(time.Millisecond), time.Millisecond)
	}
	for _, c := range []struct {
		name   string
		l      func(t *testing.T) *leasequota.Limiter
		code   codes.Code
		reason leasequota.Reason
	}{
		{"exhausted", func(t *testing.T) *leasequota.Limiter { return newLimiter(t, leasequota.WithDefaultQuota(q)) },
			codes.ResourceExhausted, leasequota.ReasonExhausted},
		{"unavailable", func(t *testing.T) *leasequota.Limiter { return deadLimiter(t, q, leasequota.FailClosed) },
			codes.Unavailable, leasequota.ReasonUnavailable},
	} {
		t.Run(c.name, func(t *testing.T) {
			var hook hookLog
			cl := serve(t, c.l(t), hook.option(), grpcquota.WithMaxWait(0))
			// Calls until the first refusal. With Redis down, cold-start
			// denials may come first: a limiter whose first read of Redis
			// is still out takes a call's timeout for a busy Redis, until
			// it has dialed Redis and found it refusing connections
			// (syncer.Refuser), which on a loaded machine may take longer
			// than the call's 20 ms deadline. Any other refusal is the
			// one checked.
			var (
				err error
				d   leasequota.Decision
			)
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			deadline := time.Now().Add(5 * time.Second)
			for {
				if time.Now().After(deadline) {
					t.Fatalf("no refusal but for the cold start in 5 s; the last call: %v", err)
				}
				<-tick.C // pacing the calls, not waiting for a condition
				if _, err = check(t, cl); err == nil {
					continue
				}
				if _, d = hook.last(t); c.code != codes.Unavailable || d.Reason != leasequota.ReasonColdStart {
					break
				}
			}
			if status.Code(err) != c.code || d.Reason != c.reason {
				t.Fatalf("%v, reason %v; want %v, %v", err, d.Reason, c.code, c.reason)
			}
			if got, want := retryInfo(t, err), roundUp(d.RetryAfter); got != want {
				t.Fatalf("RetryInfo %v for a RetryAfter of %v, want %v", got, d.RetryAfter, want)
			}
		})
	}
}

// TestRetryInfoOfAWaitOfCenturies: a tenant whose next token is centuries
// away (Rate 1e-12; RetryAfter saturates at math.MaxInt64) gets a
// RetryInfo of centuries. Rounding it up to the millisecond overflowed,
// and the clients were told to retry in 1 ms.
func TestRetryInfoOfAWaitOfCenturies(t *testing.T) {
	leakCheck(t)
	l := newLimiter(t, leasequota.WithDefaultQuota(leasequota.Quota{Rate: 1e-12, Burst: 1}))
	var hook hookLog
	c := serve(t, l, hook.option())
	err := exhaust(t, c)
	_, d := hook.last(t)
	if delay := refusal(t, err, "default"); delay < d.RetryAfter-time.Millisecond || delay < 100*365*24*time.Hour {
		t.Errorf("RetryInfo delay %v for a decision's RetryAfter of %v", delay, d.RetryAfter)
	}
}
