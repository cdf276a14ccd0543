package syncer

import (
	"context"
	"testing"
	"time"

	"github.com/leasequota/leasequota/quota"
)

// TestReleaseAllWithAFarDeadline: Close's returns get the time its ctx
// gives, and each return's Age grows by that extra time (the release may
// run that much later). With a deadline hours away, the Age passed what
// lets Redis read a grant's ID (2^32 µs), so the return was judged by its
// age alone, from before its grant: tokens leased from a full bucket were
// credited nothing (a year-3000 deadline: an Age of math.MaxInt64, or one
// overflowed negative and refused). The extension is capped
// (maxCloseExtra), so the 4 tokens leased a moment ago from a full bucket
// come back.
func TestReleaseAllWithAFarDeadline(t *testing.T) {
	for _, c := range []struct {
		name     string
		deadline func(now time.Time) time.Time
	}{
		{"2h", func(now time.Time) time.Time { return now.Add(2 * time.Hour) }},
		{"year 3000", func(time.Time) time.Time { return time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, tn, now, _ := drivenTenant(t, Config{Interval: time.Minute}, "x", quota.Quota{Rate: 0.001, Burst: 10, MinLease: 4, MaxLease: 4, LeaseTTL: 10 * time.Minute})
			refillNow(t, s, tn, 4)
			if tn.Held() != 4 {
				t.Fatalf("x holds %d, want 4", tn.Held())
			}
			// ReleaseAll reads the deadline against the syncer's clock
			// (now, in 2027: weeks ahead of the real one, whose timer
			// does not fire meanwhile).
			ctx, cancel := context.WithDeadline(context.Background(), c.deadline(now()))
			defer cancel()
			s.Close()
			err := s.ReleaseAll(ctx)
			// Credited 3.999999999 (the bucket refilled a nanotoken since),
			// counted in whole tokens, rounded down: 3 returned.
			if st := s.Stats(); st.Returned < 3 || st.Returned+st.Forfeited != 4 || err != nil {
				t.Errorf("ReleaseAll with a deadline %s away: returned %d, forfeited %d, error %v; want the 4 held returned (3 of them counted)", c.name, st.Returned, st.Forfeited, err)
			}
		})
	}
}
