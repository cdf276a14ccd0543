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
			var err error
			for i := 0; err == nil; i++ {
				if i == 20 {
					t.Fatal("no refusal in 20 calls")
				}
				_, err = check(t, cl)
			}
			_, d := hook.last(t)
			if status.Code(err) != c.code || d.Reason != c.reason {
				t.Fatalf("%v, reason %v; want %v, %v", err, d.Reason, c.code, c.reason)
			}
			if got, want := retryInfo(t, err), roundUp(d.RetryAfter); got != want {
				t.Fatalf("RetryInfo %v for a RetryAfter of %v, want %v", got, d.RetryAfter, want)
			}
		})
	}
}
