package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/lease"
	"github.com/leasequota/leasequota/quota"
)

// TestFailedCallRetryCountsReservedTokens: after a failed lease call, a
// tenant's requests are told to come back when its next reserved token
// comes due, when that is before the call's backoff ends, as after a
// grant or a call held back: the drip needs no call. Before, a failed
// call published the backoff's end alone.
func TestFailedCallRetryCountsReservedTokens(t *testing.T) {
	s, tn, now, _ := drivenTenant(t, Config{Interval: 100 * time.Millisecond, MinBackoff: time.Second, MaxBackoff: 2 * time.Second},
		"a", quota.Quota{Rate: 10, Burst: 10, MinLease: 1, MaxLease: 1, LeaseTTL: 10 * time.Second})
	ctx := context.Background()
	refillNow(t, s, tn, 1)
	tn.mu.Lock()
	st := tn.st()
	// Reserved tokens at 10 a second from the reply's arrival: the first
	// is due 100 ms on.
	s.planner.Reserved(st, *tn.Limits(), now(), now(), lease.Grant{Granted: 5, Reserved: 5, Pace: 10, ServerTime: now()})
	due, ok := st.NextDue()
	if !ok {
		tn.mu.Unlock()
		t.Fatal("no reserved token to come")
	}
	// The next call fails: its backoff is 0.5 to 1 s.
	s.apply(ctx, tn, &s.one, now(), 1, 0, lease.ShareKeep, nil, lease.Result{Err: context.DeadlineExceeded})
	backoffEnd := st.at(st.notBefore)
	tn.mu.Unlock()
	if time.Duration(backoffEnd-now().UnixNano()) < 500*time.Millisecond {
		t.Fatalf("backoff ends %v on, want 0.5 s or more: the test shows nothing", time.Duration(backoffEnd-now().UnixNano()))
	}
	// One token more than the tenant holds: the global bucket has them
	// (it refilled to 9 of its 10), so only the wait published counts.
	if got, want := tn.RetryAfter(now(), tn.Held()+1), due.Sub(now()); got <= 0 || got > want {
		t.Errorf("RetryAfter %v after a failed call, want more than 0 and at most %v: the next reserved token is due then", got, want)
	}
}
