package leasequota_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/leasequota/leasequota"
	"github.com/leasequota/leasequota/lease/memstore"
)

// dueAt is when the global bucket of tenant in s, refilling at q's rate
// from its level now, holds what n lacks beyond the held tokens this
// instance holds: the earliest a request for n could be admitted.
func dueAt(t *testing.T, s *memstore.Store, tenant string, q leasequota.Quota, n, held int64) time.Time {
	t.Helper()
	now := time.Now()
	b := s.Tenant(tenant).Bucket
	level := float64(q.Burst)
	if b != nil {
		level = min(level, b.Tokens+now.Sub(b.Time).Seconds()*q.Rate)
	}
	short := float64(n-held) - level
	if short <= 0 {
		return now
	}
	return now.Add(time.Duration(short / q.Rate * float64(time.Second)))
}

// TestWaitCountsReturnedTokens: a WaitN whose ctx cut it off after a
// partial grant (40 of 60 tokens, the bucket emptied) leaves those tokens
// to expire and go back to the global bucket (LeaseTTL 2 s). The next
// wait for 60, and the denial's RetryAfter, must count them there: the
// bucket then holds 60 about 20 s after the start, not 60 s. Counted from
// the level the last lease call saw (the bucket emptied), the denial said
// RetryAfter 50 s at 10 s and the next WaitN slept until 60 s, the return
// of this instance's own 40 tokens unseen.
func TestWaitCountsReturnedTokens(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := leasequota.Quota{Rate: 1, Burst: 100, MaxLease: 10}
		s := memstore.New()
		l := newLimiter(t, s, leasequota.WithDefaultQuota(q))
		ctx := context.Background()
		start := time.Now()
		if _, err := l.WaitN(ctx, "a", 60); err != nil {
			t.Fatal(err)
		}
		cut, cancel := context.WithTimeout(ctx, 10*time.Second)
		d, err := l.WaitN(cut, "a", 60)
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("second WaitN(60) at %v: %+v, %v; want its ctx's deadline", time.Since(start), d, err)
		}
		// The 40 tokens of the partial grant expired (LeaseTTL 2 s) and
		// went back to the bucket, credited there: none lost.
		if st := l.Stats(); st.Returned < 40 || st.Forfeited != 0 {
			t.Errorf("after the cut-off wait: returned %d, forfeited %d; want the partial grant's 40 returned, none forfeited", st.Returned, st.Forfeited)
		}
		due := dueAt(t, s, "a", q, 60, d.Remaining)
		const tolerance = 100 * time.Millisecond // a tick, the hold's jitter, a call
		t.Logf("denied at %v holding %d, RetryAfter %v; 60 tokens due at %v", time.Since(start), d.Remaining, d.RetryAfter, due.Sub(start))
		if want := time.Until(due) + tolerance; d.RetryAfter > want {
			t.Errorf("RetryAfter %v, want at most %v: the bucket holds what 60 lacks by %v", d.RetryAfter, want, due.Sub(start))
		}
		if _, err := l.WaitN(ctx, "a", 60); err != nil {
			t.Fatal(err)
		}
		t.Logf("next WaitN(60) admitted at %v", time.Since(start))
		if late := time.Since(due); late > tolerance {
			t.Errorf("next WaitN(60) admitted at %v, %v after the bucket held what it lacked (%v)", time.Since(start), late, due.Sub(start))
		}
	})
}

// TestPartialGrantHoldCountsTheGrant: after a partial grant that emptied
// the bucket, the tenant's next call is held back until the bucket has
// refilled what the call still lacks, not all it asked for. With
// Quota{Rate: 1, Burst: 100, MaxLease: 60} on one instance, a WaitN(60)
// got 40 of 60 at the start (its own earlier WaitN(60) had taken 60) and
// was cut off by its ctx at 10 s; its tokens expired and went back. The
// bucket held 60 at 20 s, but the call was held back for the 60 it had
// asked (at the instance's share, the whole rate: 60 s): the denial said
// RetryAfter 50 s and the next WaitN(60) waited until 60 s. (With
// MaxLease 10, TestWaitCountsReturnedTokens, the lease target of 10 cut
// the hold to 10 s.) With a LeaseTTL of a minute the 40 tokens stay held
// here instead, and the same holds.
func TestPartialGrantHoldCountsTheGrant(t *testing.T) {
	for _, ttl := range []time.Duration{0, time.Minute} {
		t.Run("LeaseTTL="+ttl.String(), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				q := leasequota.Quota{Rate: 1, Burst: 100, MaxLease: 60, LeaseTTL: ttl}
				s := memstore.New()
				l := newLimiter(t, s, leasequota.WithDefaultQuota(q))
				ctx := context.Background()
				start := time.Now()
				if _, err := l.WaitN(ctx, "a", 60); err != nil {
					t.Fatal(err)
				}
				cut, cancel := context.WithTimeout(ctx, 10*time.Second)
				d, err := l.WaitN(cut, "a", 60)
				cancel()
				if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("second WaitN(60) at %v: %+v, %v; want its ctx's deadline", time.Since(start), d, err)
				}
				due := dueAt(t, s, "a", q, 60, d.Remaining)
				const tolerance = 100 * time.Millisecond // a tick, the hold's jitter, a call
				t.Logf("denied at %v holding %d, RetryAfter %v; 60 tokens due at %v", time.Since(start), d.Remaining, d.RetryAfter, due.Sub(start))
				if want := time.Until(due) + tolerance; d.RetryAfter > want {
					t.Errorf("RetryAfter %v, want at most %v: the bucket holds what 60 lacks by %v", d.RetryAfter, want, due.Sub(start))
				}
				// AllowNWithin waits when the wait fits its budget.
				w := l.AllowNWithin(ctx, "a", 60, time.Until(due)+time.Second)
				t.Logf("AllowNWithin at %v: allowed %v, %v", time.Since(start), w.Allowed, w.Reason)
				if !w.Allowed {
					t.Errorf("AllowNWithin(60, %v) at %v denied (%v, RetryAfter %v), the bucket holding what 60 lacks by %v", time.Until(due)+time.Second, time.Since(start), w.Reason, w.RetryAfter, due.Sub(start))
				} else if late := time.Since(due); late > tolerance {
					t.Errorf("AllowNWithin(60) admitted at %v, %v after the bucket held what it lacked (%v)", time.Since(start), late, due.Sub(start))
				}
			})
		})
	}
}
